# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""TORCH_CUDA_ARCH_LIST: validate an explicit list, or derive it from the GPUs present.

A wheel's CUDA kernels only run on the architectures they were compiled for
("no kernel image is available for execution on the device"), so `auto` takes the
union over the build host's GPUs and adds +PTX on the highest, which newer GPUs
can JIT from.
"""
from __future__ import annotations

import re

# `7.5`, `9.0a` (arch-specific), `10.0f` (family), each optionally `+PTX`.
_TOKEN = re.compile(r"^(\d+)\.(\d+)([af]?)(\+PTX)?$")

# GPU name -> compute capability, for drivers too old for `--query-gpu=compute_cap`
# (added in R510). Longest match wins ("RTX 4090" before "RTX 40").
NAME_TO_ARCH = {
    # From the seed's table (shared/seeds/001): consumer and datacenter cards.
    "RTX 2080 Ti": "7.5", "RTX 2080": "7.5", "RTX 2070": "7.5",
    "RTX 3080": "8.6", "RTX 3070": "8.6",
    "RTX 4080": "8.9", "RTX 4070": "8.9", "RTX 4090": "8.9",
    "V100": "7.0", "A100": "8.0",
    # Others seen in clusters.
    "P100": "6.0", "P40": "6.1", "T4": "7.5", "TITAN RTX": "7.5", "Quadro RTX": "7.5",
    "RTX 3090": "8.6", "RTX 3060": "8.6", "RTX A6000": "8.6", "RTX A5000": "8.6",
    "A800": "8.0", "A30": "8.0", "A10": "8.6", "A40": "8.6", "A16": "8.6", "A2": "8.6",
    "L4": "8.9", "L40": "8.9", "L40S": "8.9", "RTX 6000 Ada": "8.9",
    "H100": "9.0", "H800": "9.0", "H200": "9.0", "H20": "9.0", "GH200": "9.0",
    "B200": "10.0", "GB200": "10.0", "B100": "10.0",
}


class ArchListError(ValueError):
    """Bad arch list or undetectable GPUs; the message names the bad part."""


def _key(token):
    major, minor, suffix, _ptx = _TOKEN.match(token).groups()
    return (int(major), int(minor), suffix)


def arch_entries(text, variable="deepspeed_build_cuda_arch_list"):
    """TORCH_CUDA_ARCH_LIST as the build takes and writes it (the manifest's ``cuda.arch_list``): '8.0;9.0+PTX' ->
    [{'arch': (8, 0), 'suffix': '', 'ptx': False, 'text': '8.0'}, {'arch': (9, 0), ..., 'ptx': True, ...}], in
    the order given ('' gives []). Tokens are separated by ';' or blanks; suffix 'a' (9.0a) runs only on that
    exact architecture, 'f' (family) on the same major; '+PTX' embeds PTX as well. ArchListError (a
    ValueError) names ``variable``, the list and every bad token. The one reading of the list: the build's
    ``parse_arch_list`` and the wheel's GPU check (_wheel/gpu.py) both use it."""
    tokens = [t for t in re.split(r"[;\s]+", str(text or "").strip()) if t]
    bad = [t for t in tokens if not _TOKEN.match(t)]
    if bad:
        raise ArchListError(
            "%s=%r: %s not a compute capability; valid tokens look like 7.5, 8.0, 9.0a, "
            "9.0+PTX (separated by ';'), e.g. '7.5;8.0;9.0+PTX'"
            % (variable, str(text), ", ".join("%r is" % t for t in bad) if len(bad) == 1
               else ", ".join(repr(t) for t in bad) + " are"))
    entries = []
    for token in tokens:
        major, minor, suffix, ptx = _TOKEN.match(token).groups()
        entries.append({"arch": (int(major), int(minor)), "suffix": suffix, "ptx": bool(ptx), "text": token})
    return entries


def parse_arch_list(text, variable="deepspeed_build_cuda_arch_list"):
    """'7.5;8.0 9.0+PTX' -> ['7.5', '8.0', '9.0+PTX'] (sorted, unique), or ArchListError (``arch_entries``;
    an empty list is refused too)."""
    entries = arch_entries(text, variable)
    if not entries:
        raise ArchListError("%s is empty: give compute capabilities such as '7.5;8.0;9.0+PTX' "
                            "or 'auto'" % variable)
    seen = {}
    for entry in entries:
        base = entry["text"].replace("+PTX", "")
        # '9.0' and '9.0+PTX' together mean '9.0+PTX'.
        seen[base] = seen.get(base, False) or entry["ptx"]
    return [b + ("+PTX" if ptx else "") for b, ptx in sorted(seen.items(), key=lambda kv: _key(kv[0]))]


def arch_for_name(name):
    """Compute capability for a GPU name via NAME_TO_ARCH (longest key contained), or None."""
    upper = name.upper()
    best = None
    for key, arch in NAME_TO_ARCH.items():
        if re.search(r"(^|[\s-])%s($|[\s-])" % re.escape(key.upper()), upper):
            if best is None or len(key) > len(best[0]):
                best = (key, arch)
    return best[1] if best else None


def parse_nvidia_smi(output):
    """`nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader` (or name only; a header line is
    skipped) -> [{'index': 0, 'name':..., 'compute_cap': '9.0' or None}], numbered in nvidia-smi's order;
    a driver too old to answer compute_cap gets it from the name (NAME_TO_ARCH)."""
    gpus = []
    for line in (output or "").splitlines():
        line = line.strip()
        if not line or line.lower().startswith("name"):
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2 and re.fullmatch(r"\d+\.\d+", parts[-1]):
            name, cap = ", ".join(parts[:-1]), parts[-1]
        elif len(parts) >= 2 and parts[-1] in ("[N/A]", "N/A", ""):
            name, cap = ", ".join(parts[:-1]), None
        else:  # a name-only query (drivers before R510)
            name, cap = line, None
        gpus.append({"index": len(gpus), "name": name, "compute_cap": cap or arch_for_name(name)})
    return gpus


def auto_arch_list(gpus):
    """Union of the GPUs' capabilities, +PTX on the highest. ArchListError if none known."""
    if not gpus:
        raise ArchListError(
            "deepspeed_build_cuda_arch_list=auto: no GPU is visible on this build host "
            "(nvidia-smi found none) nor on the nodes of the inventory group train, so auto has nothing "
            "to read; list the compute capabilities of "
            "the GPUs of the nodes the wheel is for (`nvidia-smi --query-gpu=compute_cap "
            "--format=csv,noheader` on each), e.g. deepspeed_build_cuda_arch_list='8.0;9.0+PTX'")
    unknown = [g["name"] for g in gpus if not g.get("compute_cap")]
    if unknown:
        raise ArchListError(
            "deepspeed_build_cuda_arch_list=auto: the compute capability of %s is unknown "
            "(driver too old for --query-gpu=compute_cap and not in the name table); "
            "set the list explicitly, e.g. '8.0;9.0+PTX'" % ", ".join(sorted(set(unknown))))
    caps = sorted({g["compute_cap"] for g in gpus}, key=_key)
    caps[-1] = caps[-1] + "+PTX"
    return caps


def query_gpus(run_command, nvidia_smi):
    """GPUs from nvidia-smi: name and compute capability, falling back to a name-only query
    (drivers before R510 reject compute_cap) resolved through NAME_TO_ARCH.

    run_command: AnsibleModule.run_command or any callable(argv) -> (rc, stdout, stderr).
    Returns (gpus, commands run, error); no nvidia-smi means no GPUs and no error. An nvidia-smi
    that is there but fails both queries gives no GPUs and its own message as ``error``
    (smi_error): the caller refuses the node rather than taking it for one without GPUs.
    """
    if not nvidia_smi:
        return [], [], None
    cmd = [nvidia_smi, "--query-gpu=name,compute_cap", "--format=csv,noheader"]
    rc, out, err = run_command(cmd)
    commands = [cmd]
    if rc != 0:
        cmd = [nvidia_smi, "--query-gpu=name", "--format=csv,noheader"]
        commands.append(cmd)
        rc, out, err = run_command(cmd)
        if rc != 0:
            return [], commands, smi_error(cmd, rc, out, err)
    return parse_nvidia_smi(out), commands, None


def smi_error(cmd, rc, out, err):
    """A failed nvidia-smi call -> one line: its command, exit status and own message (stdout and stderr:
    nvidia-smi prints NVML's errors on stdout), e.g. ``Failed to initialize NVML: Driver/library version
    mismatch`` on a node whose driver was upgraded without a reboot."""
    said = " / ".join(line.strip() for line in ((err or "") + "\n" + (out or "")).splitlines() if line.strip())
    return "`%s` exited %s: %s" % (" ".join(cmd), rc, said[:400] or "no message")


def smi_failures(nodes):
    """Nodes as the gpus step answers ({name: {driver, gpus, error}}) -> 'name: error' for each node whose
    nvidia-smi failed (smi_error), by name: what the callers that read their GPUs or driver refuse."""
    return ["%s: %s" % (name, node["error"]) for name, node in sorted((nodes or {}).items())
            if node and node.get("error")]


def parse_nvcc_gpu_archs(output):
    """`nvcc --list-gpu-arch` (compute_75, compute_80, ..., compute_100, compute_121) ->
    ['7.5', '8.0', ..., '10.0', '12.1'], sorted; the last digit is the minor."""
    found = set()
    for match in re.finditer(r"\bcompute_(\d+)(\d)[af]?\b", output or ""):
        found.add((int(match.group(1)), int(match.group(2))))
    return ["%d.%d" % arch for arch in sorted(found)]


def unsupported_archs(arch_list, nvcc, variable="deepspeed_build_cuda_arch_list"):
    """Message refusing the entries of arch_list (parsed) that nvcc cannot compile for, or None.

    nvcc: probe result with 'release', 'path' and 'archs' (from --list-gpu-arch; empty when
    unknown, then nothing is refused here and nvcc itself would fail).
    """
    supported = (nvcc or {}).get("archs") or []
    if not supported:
        return None
    bad = [t for t in arch_list if "%d.%d" % _key(t.replace("+PTX", ""))[:2] not in supported]
    if not bad:
        return None
    return ("%s=%r: nvcc %s (%s) cannot compile for %s; it supports %s (`nvcc --list-gpu-arch`). "
            "Drop %s or build with a CUDA toolkit that still has %s"
            % (variable, ";".join(arch_list), nvcc.get("release"), nvcc.get("path"), ", ".join(bad),
               ", ".join(supported), "it" if len(bad) == 1 else "them", "it" if len(bad) == 1 else "them"))
