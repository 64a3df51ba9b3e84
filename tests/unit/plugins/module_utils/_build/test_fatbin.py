"""The ELF .nv_fatbin reader, on fused_adam binaries built on this machine (nvcc 13.0), reduced
to their section headers and fat binary (tests/fixtures/fatbin/reduce_elf.py), and checked
against what cuobjdump listed for the same files."""
import gzip
import re
import struct

import pytest

from ansible_collections.multinode.training.plugins.module_utils._build import fatbin as f
from tests.unit.conftest import FIXTURES

FAT = FIXTURES / "fatbin"


def so(name):
    return gzip.decompress((FAT / ("fused_adam_op-%s.so.gz" % name)).read_bytes())


def cuobjdump(name):
    """cuobjdump --list-elf --list-ptx of the same file -> {'sass': [...], 'ptx': [...]}."""
    text = (FAT / ("fused_adam_op-%s.cuobjdump.txt" % name)).read_text()

    def archs(kind):
        found = {"%d.%d" % divmod(int(n), 10) for n in re.findall(r"^%s file .*\.sm_(\d+)\.\w+$" % kind, text, re.M)}
        return sorted(found, key=lambda a: tuple(map(int, a.split("."))))
    return {"sass": archs("ELF"), "ptx": archs("PTX")}


@pytest.mark.parametrize("name, sass, ptx", [
    ("80-90ptx", ["8.0", "9.0"], ["9.0"]),   # TORCH_CUDA_ARCH_LIST="8.0;9.0+PTX"
    ("90", ["9.0"], []),                     # TORCH_CUDA_ARCH_LIST="9.0"
])
def test_reader_agrees_with_cuobjdump(name, sass, ptx):
    coverage = f.read_coverage(so(name))
    assert coverage == {"sass": sass, "ptx": ptx}
    assert coverage == cuobjdump(name)


def test_entries_of_the_80_90ptx_build():
    data = so("80-90ptx")
    offset, size = f._elf_sections(data)[f.SECTION]
    entries = f.parse_fatbin(data[offset:offset + size])
    assert [(e["kind"], e["arch"]) for e in entries] == [("sass", "8.0"), ("ptx", "9.0"), ("sass", "9.0")]
    # nvcc 13 compresses the PTX; the headers are read all the same.
    assert [e["compressed"] for e in entries] == [False, True, False]


def test_host_only_extension_has_no_gpu_code():
    # Drop the section's name: what a cpu_adam .so looks like to the reader.
    data = bytearray(so("90"))
    data[:] = data.replace(b".nv_fatbin\0", b".nv_fatbix\0")
    assert f.read_coverage(bytes(data)) is None


def test_not_elf_and_broken_fatbin():
    with pytest.raises(f.FatbinError, match="not an ELF file"):
        f.read_coverage(b"#!/bin/sh\n")
    with pytest.raises(f.FatbinError, match="no fatbin container"):
        f.parse_fatbin(struct.pack("<IHHQ", 0x12345678, 1, 16, 0))
    with pytest.raises(f.FatbinError, match="runs past"):
        f.parse_fatbin(struct.pack("<IHHQ", f.FATBIN_MAGIC, 1, 16, 4096))


@pytest.mark.parametrize("coverage, arch_list, missing", [
    ({"sass": ["8.0", "9.0"], "ptx": ["9.0"]}, ["8.0", "9.0+PTX"], []),
    ({"sass": ["9.0"], "ptx": []}, ["8.0", "9.0+PTX"], ["sm_80", "compute_90"]),
    ({"sass": ["8.0", "9.0"], "ptx": []}, ["8.0", "9.0"], []),
    ({"sass": ["9.0"], "ptx": []}, ["9.0a"], []),
])
def test_missing_archs(coverage, arch_list, missing):
    assert f.missing_archs(coverage, arch_list) == missing


@pytest.mark.parametrize("cap, covered", [
    ((8, 0), ("sass", "8.0")),
    ((8, 6), ("sass", "8.0")),     # same major, lower minor
    ((8, 9), ("sass", "8.0")),
    ((9, 0), ("sass", "9.0")),
    ((10, 0), ("ptx", "9.0")),     # no sm_10x: the driver JITs compute_90
    ((12, 0), ("ptx", "9.0")),
    ((7, 5), None),                # older than everything in the binary
])
def test_gpu_covered(cap, covered):
    assert f.gpu_covered({"sass": ["8.0", "9.0"], "ptx": ["9.0"]}, cap) == covered


def test_sass_only_does_not_cover_newer_major():
    assert f.gpu_covered({"sass": ["9.0"], "ptx": []}, (10, 0)) is None
    assert f.gpu_covered({"sass": ["9.0"], "ptx": []}, (8, 0)) is None


def test_describe():
    assert f.describe({"sass": ["8.0", "9.0"], "ptx": ["9.0"]}) == "SASS sm_80, sm_90; PTX compute_90"
    assert f.describe({"sass": [], "ptx": []}) == "no GPU code"
