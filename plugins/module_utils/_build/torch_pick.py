# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which torch the build uses when deepspeed_build_torch_requirement is `auto`: one whose CUDA build every GPU
node's driver runs, whose kernels cover every node's GPUs, and that the build host's nvcc compiles ops against.

The tables, each with its source:
- PYPI_CUDA: the CUDA of torch's Linux x86_64 wheel on PyPI (what `pip install torch==X` gets), read from each
  wheel's metadata on PyPI (`<wheel URL>.metadata`, its Requires-Dist: `nvidia-cuda-runtime-cu12==12.8.90` or
  `cuda-toolkit[...]==13.0.3`), read on 2026-12-03. 2.12's metadata was not served: not listed.
- INDEX_CUDA: the stable CUDA variants of each release on the PyTorch index (https://download.pytorch.org/whl/cuXYZ,
  local version `+cuXYZ`), from pytorch/pytorch RELEASE.md, "Release Compatibility Matrix" ("Stable CUDA" column;
  the experimental column is left out).
- INDEX_ARCHS: the GPU architectures those variants are compiled for, from the same file's "PyTorch CUDA Support
  Matrix" ("For Release 2.12, 2.13 and 2.14", Linux x86): CUDA 12.6 Maxwell to Hopper (5.0-9.0, no Blackwell),
  CUDA 13.0 Turing to Blackwell (7.5-12.0+PTX). Releases it does not cover are not judged by architecture.
- The driver a CUDA major needs: _wheel/driver.py's MINIMUM_DRIVER (NVIDIA's minor version compatibility).
"""
from __future__ import annotations

import re

from ansible_collections.multinode.training.plugins.module_utils._build import cuda_arch
from ansible_collections.multinode.training.plugins.module_utils._build import torch_info
from ansible_collections.multinode.training.plugins.module_utils._wheel import driver as _driver

# The release `auto` picks a build of; the role's deepspeed_build_version was tested against it.
RELEASE = "2.13.0"
INDEX = "https://download.pytorch.org/whl/cu%s"
SOURCE = "pytorch/pytorch RELEASE.md (Release Compatibility Matrix) and the wheels' metadata on PyPI"

PYPI_CUDA = {
    "2.4": "12.1", "2.5": "12.4", "2.6": "12.4", "2.7": "12.6", "2.8": "12.8", "2.9": "12.8",
    "2.10": "12.8", "2.11": "13.0", "2.13": "13.0", "2.14": "13.0",
}
INDEX_CUDA = {
    "2.5": ("11.8", "12.1", "12.4"), "2.6": ("11.8", "12.4"), "2.7": ("11.8", "12.6"), "2.8": ("12.6", "12.8"),
    "2.9": ("12.6", "12.8"), "2.10": ("12.6", "12.8"), "2.11": ("12.6", "12.8", "13.0"),
    "2.12": ("12.6", "13.0"), "2.13": ("12.6", "13.0"), "2.14": ("12.6", "13.0", "13.2"),
}
_ARCHS_12_6 = ("5.0", "6.0", "7.0", "7.5", "8.0", "8.6", "9.0")
_ARCHS_13 = ("7.5", "8.0", "8.6", "9.0", "10.0", "12.0+PTX")
INDEX_ARCHS = {release: {"12.6": _ARCHS_12_6, "13.0": _ARCHS_13, "13.2": _ARCHS_13}
               for release in ("2.12", "2.13", "2.14")}


def _minor(release):
    return ".".join(str(release).split(".")[:2])


def _cap(text):
    return tuple(int(x) for x in str(text).replace("+PTX", "").split("."))


def runs_on(archs, capability):
    """Whether kernels built for ``archs`` run on a GPU of ``capability``: SASS of the same major and a lower or
    equal minor, or PTX of a lower or equal arch (JIT-compiled by the driver)."""
    cap = _cap(capability)
    for arch in archs:
        built = _cap(arch)
        if built[0] == cap[0] and built[1] <= cap[1]:
            return True
        if arch.endswith("+PTX") and built <= cap:
            return True
    return False


def candidates(release=RELEASE):
    """The builds of ``release`` in the order `auto` prefers them: PyPI's own wheel first (no extra index), then
    the PyTorch index's variants, newest CUDA first. Each: {requirement, cuda, index, archs}."""
    minor = _minor(release)
    found = []
    if minor in PYPI_CUDA:
        found.append({"requirement": "torch==%s" % release, "cuda": PYPI_CUDA[minor], "index": None,
                      "archs": INDEX_ARCHS.get(minor, {}).get(PYPI_CUDA[minor])})
    for cuda in sorted(INDEX_CUDA.get(minor, ()), key=_cap, reverse=True):
        tag = cuda.replace(".", "")
        found.append({"requirement": "torch==%s+cu%s" % (release, tag), "cuda": cuda, "index": INDEX % tag,
                      "archs": INDEX_ARCHS.get(minor, {}).get(cuda)})
    return found


def _lowest_driver(nodes):
    """(node, driver) of the lowest NVIDIA driver among the nodes with GPUs, or (None, None)."""
    known = [(name, n["driver"]) for name, n in sorted(nodes.items())
             if n.get("gpus") and _driver.version_tuple(n.get("driver"))]
    return min(known, key=lambda item: _driver.version_tuple(item[1])) if known else (None, None)


def _why_not(candidate, lowest, nodes, nvcc, env):
    """Why a candidate does not fit (a phrase), or None when it does."""
    cuda = candidate["cuda"]
    node, drv = lowest
    minimum = _driver.minimum_for(cuda)
    if drv and minimum and _driver.version_tuple(drv) < _driver.version_tuple(minimum):
        return "CUDA %s needs a driver >= %s, %s has %s" % (cuda, minimum, node, drv)
    if candidate["archs"]:
        for name, facts in sorted(nodes.items()):
            for gpu in facts.get("gpus") or []:
                cap = gpu.get("compute_cap")
                if cap and not runs_on(candidate["archs"], cap):
                    return "its CUDA %s kernels (%s) do not run on the %s (%s) of %s" % (
                        cuda, ", ".join(candidate["archs"]), gpu.get("name"), cap, name)
    if nvcc and not torch_info.cuda_pair_ok(nvcc, cuda, env):
        return "nvcc %s on the build host compiles no DeepSpeed op against CUDA %s" % (nvcc, cuda)
    return None


def _reason(chosen, lowest, nodes, nvcc, skipped):
    node, drv = lowest
    facts = []
    if drv:
        facts.append("the lowest NVIDIA driver of the %d GPU node(s), %s on %s, runs CUDA %s"
                     % (sum(1 for n in nodes.values() if n.get("gpus")), drv, node, chosen["cuda"]))
    else:
        facts.append("no NVIDIA driver was read on the build host or the nodes (no GPU there)")
    if nvcc:
        facts.append("nvcc %s compiles against it" % nvcc)
    return "; ".join(facts) + ("" if not skipped else " (not %s)" % _left_out(skipped))


def _left_out(skipped):
    """'torch==2.13.0, torch==2.13.0+cu130: CUDA 13.0 needs ...; torch==...: ...': one phrase per reason."""
    by_reason = {}
    for candidate, why in skipped:
        by_reason.setdefault(why, []).append(candidate["requirement"])
    return "; ".join("%s: %s" % (", ".join(names), why) for why, names in by_reason.items())


def pick(nodes, nvcc=None, env=None, release=RELEASE):
    """The torch for requirement `auto`: {requirement, cuda, index, reason}, or TorchError naming what rules out
    every build of ``release``.

    nodes: {name: {'driver': '550.127.05' or None, 'gpus': [{'name', 'compute_cap'}], 'error': nvidia-smi's
    failure or None}}, the build host and the GPU nodes; nvcc: the build host's nvcc release or None.
    """
    failed = cuda_arch.smi_failures(nodes)
    if failed:
        raise torch_info.TorchError(
            "deepspeed_build_torch_requirement=auto: nvidia-smi fails, so the driver that decides the torch "
            "cannot be read: %s; valid: fix nvidia-smi there, or an explicit deepspeed_build_torch_requirement"
            % "; ".join(failed))
    lowest = _lowest_driver(nodes)
    skipped = []
    for candidate in candidates(release):
        why = _why_not(candidate, lowest, nodes, nvcc, env)
        if why is None:
            return {"requirement": candidate["requirement"], "cuda": candidate["cuda"], "index": candidate["index"],
                    "reason": _reason(candidate, lowest, nodes, nvcc, skipped)}
        skipped.append((candidate, why))
    raise torch_info.TorchError(
        "deepspeed_build_torch_requirement=auto: no build of torch %s fits: %s (%s); valid: a newer NVIDIA "
        "driver on the GPU nodes (CUDA 12 needs >= %s, CUDA 13 >= %s), a CUDA toolkit on the build host that "
        "matches one of them, or an explicit deepspeed_build_torch_requirement (an older torch, e.g. "
        "torch==2.7.1+cu118)" % (release, _left_out(skipped), SOURCE, _driver.MINIMUM_DRIVER[12],
                                 _driver.MINIMUM_DRIVER[13]))


def index_args(requirement, pip_args):
    """pip arguments that reach the PyTorch index of a `+cuXYZ` requirement (only that index has such builds),
    for torch's resolution, install and download alone; none where the user's deepspeed_build_pip_args name an
    index, a find-links folder or --no-index of their own (a mirror, an offline wheelhouse)."""
    match = re.search(r"\+cu(\d{3,})\s*$", str(requirement or ""))
    own = {"--index-url", "-i", "--extra-index-url", "--find-links", "-f", "--no-index"}
    if not match or any(arg.split("=", 1)[0] in own for arg in pip_args or []):
        return []
    return ["--extra-index-url", INDEX % match.group(1)]
