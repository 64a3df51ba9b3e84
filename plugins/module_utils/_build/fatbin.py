# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which GPU code a compiled CUDA extension really holds, read from its ELF `.nv_fatbin` section.

TORCH_CUDA_ARCH_LIST says what was asked for; the shared object says what was built.
nvcc embeds, per translation unit, a "fat binary" in the section `.nv_fatbin`: a
container header followed by one entry per code object, each an ELF cubin (SASS for
one sm_XY) or PTX (for one compute_XY, JIT-compiled by the driver on newer GPUs).
Only the headers are read (payloads may be compressed), in pure Python, so that
nodes need no NVIDIA tool; cuobjdump (`--list-elf`, `--list-ptx`) agrees in the tests.

Layout (little endian), as documented by the CUDA toolkit's fatbinary.h and
observed with nvcc 12 and 13:
  container: u32 magic 0xBA55ED50, u16 version, u16 header size, u64 size of the entries
  entry:     u16 kind (1 PTX, 2 ELF), u16 version, u32 header size, u64 payload size,
             u32 compressed size, u32 reserved, u16 minor, u16 major, u32 arch (e.g. 90),
             ... (flags; the rest is not needed here)
"""
from __future__ import annotations

import struct

FATBIN_MAGIC = 0xBA55ED50
KIND_PTX = 1
KIND_ELF = 2
SECTION = b".nv_fatbin"


class FatbinError(ValueError):
    """Not an ELF file, or a fatbin that cannot be read; the message says what."""


def _elf_sections(data):
    """{name: (offset, size)} of a little-endian ELF64 or ELF32 file's sections."""
    if data[:4] != b"\x7fELF":
        raise FatbinError("not an ELF file")
    is64 = data[4] == 2
    if data[5] != 1:
        raise FatbinError("big-endian ELF is not supported")
    if is64:
        shoff, = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
        fmt, name_at, off_at = "<IIQQQQ", 0, (4, 5)
    else:
        shoff, = struct.unpack_from("<I", data, 0x20)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x2E)
        fmt, name_at, off_at = "<IIIIII", 0, (4, 5)
    if not shoff or shstrndx >= shnum or shoff + shnum * shentsize > len(data):
        raise FatbinError("ELF section header table is missing or truncated")
    headers = [struct.unpack_from(fmt, data, shoff + i * shentsize) for i in range(shnum)]
    str_off, str_size = headers[shstrndx][off_at[0]], headers[shstrndx][off_at[1]]
    names = data[str_off:str_off + str_size]
    sections = {}
    for header in headers:
        start = header[name_at]
        name = names[start:names.find(b"\0", start)]
        sections[name] = (header[off_at[0]], header[off_at[1]])
    return sections


def arch_text(arch):
    """90 -> '9.0', 100 -> '10.0', 121 -> '12.1' (the last digit is the minor)."""
    return "%d.%d" % divmod(int(arch), 10)


def parse_fatbin(blob):
    """Entries of the fat binaries concatenated in `blob` (the section's bytes):
    [{'kind': 'sass'|'ptx'|'other', 'arch': '9.0', 'version': (major, minor), 'compressed': bool}]."""
    entries = []
    pos = 0
    end = len(blob)
    while pos + 16 <= end:
        magic, _version, header_size, fat_size = struct.unpack_from("<IHHQ", blob, pos)
        if magic != FATBIN_MAGIC:
            # Containers are aligned; skip the padding between them.
            if blob[pos:pos + 8] == b"\0" * 8 or (magic == 0 and pos + 8 <= end):
                pos += 8
                continue
            raise FatbinError("no fatbin container at offset %d of .nv_fatbin (magic 0x%08x)" % (pos, magic))
        entry = pos + header_size
        stop = entry + fat_size
        if stop > end:
            raise FatbinError("fatbin container at offset %d runs past the section's end" % pos)
        while entry + 32 <= stop:
            kind, _ver, entry_header, payload, compressed, _res, minor, major, arch = struct.unpack_from(
                "<HHIQIIHHI", blob, entry)
            if entry_header < 32:
                raise FatbinError("fatbin entry at offset %d has a %d-byte header" % (entry, entry_header))
            entries.append({
                "kind": {KIND_PTX: "ptx", KIND_ELF: "sass"}.get(kind, "other"),
                "arch": arch_text(arch),
                "version": (major, minor),
                "compressed": bool(compressed),
            })
            entry += entry_header + payload
        pos = stop
    return entries


def _arch_key(text):
    major, minor = text.split(".")
    return int(major), int(minor)


def coverage_from_entries(entries):
    """{'sass': ['8.0', '9.0'], 'ptx': ['9.0']} (sorted, unique) from parse_fatbin entries."""
    return {kind: sorted({e["arch"] for e in entries if e["kind"] == kind}, key=_arch_key)
            for kind in ("sass", "ptx")}


def read_coverage(data):
    """GPU code in an ELF shared object's bytes: {'sass': [...], 'ptx': [...]}, or None when
    it has no `.nv_fatbin` section (host-only code, e.g. cpu_adam)."""
    sections = _elf_sections(data)
    if SECTION not in sections:
        return None
    offset, size = sections[SECTION]
    return coverage_from_entries(parse_fatbin(data[offset:offset + size]))


def missing_archs(coverage, arch_list):
    """Requested TORCH_CUDA_ARCH_LIST entries ('8.0', '9.0+PTX') that the coverage lacks, as
    ['sm_80', 'compute_90'] names."""
    missing = []
    for token in arch_list:
        base = token.replace("+PTX", "").rstrip("af")
        name = base.replace(".", "")
        if base not in coverage.get("sass", []):
            missing.append("sm_" + name)
        if token.endswith("+PTX") and base not in coverage.get("ptx", []):
            missing.append("compute_" + name)
    return missing


def gpu_covered(coverage, cap):
    """How code of `coverage` runs on a GPU of compute capability cap=(major, minor):
    ('sass', '8.0') for a cubin of the same major with minor <= the GPU's (the highest
    such), ('ptx', '9.0') for PTX of an arch <= the GPU's that the driver JIT-compiles
    (the highest such), or None."""
    sass = [a for a in coverage.get("sass", []) if _arch_key(a)[0] == cap[0] and _arch_key(a) <= tuple(cap)]
    if sass:
        return "sass", max(sass, key=_arch_key)
    ptx = [a for a in coverage.get("ptx", []) if _arch_key(a) <= tuple(cap)]
    if ptx:
        return "ptx", max(ptx, key=_arch_key)
    return None


def describe(coverage):
    """'SASS sm_80, sm_90; PTX compute_90' (or 'no GPU code')."""
    parts = []
    if coverage.get("sass"):
        parts.append("SASS " + ", ".join("sm_" + a.replace(".", "") for a in coverage["sass"]))
    if coverage.get("ptx"):
        parts.append("PTX " + ", ".join("compute_" + a.replace(".", "") for a in coverage["ptx"]))
    return "; ".join(parts) or "no GPU code"
