# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Is the torch a build would use a CUDA build, and of which CUDA?

Known before anything is installed: from `pip install --dry-run --report` of the
torch requirement (local version label `+cu128` / `+cpu`, or the nvidia-* runtime
wheels a default Linux torch depends on), or from a torch already in the venv.
"""
from __future__ import annotations

import json
import re

from ansible_collections.multinode.training.plugins.module_utils._toolchain import parse_version


class TorchError(ValueError):
    """The torch/accelerator/nvcc combination cannot build; the message says why."""


def cuda_from_version(version):
    """'2.13.0+cu128' -> '12.8'; '2.13.0+cpu' -> None; no label -> '' (unknown from the version)."""
    match = re.search(r"\+(cu|cpu|rocm)(\d*)", version or "")
    if not match:
        return ""
    kind, digits = match.groups()
    if kind != "cu" or len(digits) < 3:
        return None
    return "%d.%d" % (int(digits[:-1]), int(digits[-1]))


def cuda_from_requires(requires_dist):
    """CUDA release from torch's nvidia-* runtime requirement, or None when there is none."""
    for req in requires_dist or []:
        match = re.match(r"nvidia-cuda-runtime(?:-cu(\d+))?\s*[=~<>!]=*\s*(\d+)\.(\d+)", req)
        if match:
            return "%s.%s" % (match.group(2), match.group(3))
        match = re.match(r"nvidia-cuda-runtime-cu(\d+)", req)
        if match:
            return "%s.0" % match.group(1)
        # torch >= 2.10 on PyPI: cuda-toolkit[cublas,cudart,...]==13.0.3
        match = re.match(r"cuda-toolkit\s*(?:\[[^\]]*\])?\s*==\s*(\d+)\.(\d+)", req)
        if match:
            return "%s.%s" % (match.group(1), match.group(2))
    return None


def from_pip_report(report_text):
    """{'version', 'cuda'} for torch from a `pip install --dry-run --report` JSON document."""
    report = json.loads(report_text)
    for item in report.get("install", []):
        meta = item.get("metadata", {})
        if meta.get("name", "").lower() == "torch":
            version = meta.get("version")
            cuda = cuda_from_version(version)
            if cuda == "":
                cuda = cuda_from_requires(meta.get("requires_dist"))
            return {"version": version, "cuda": cuda, "source": "resolved"}
    raise TorchError("the pip report resolves no torch: does deepspeed_build_torch_requirement name torch?")


def resolve_accelerator(requested, nvcc_release, torch, host, requirement):
    """'cpu' or 'cuda' for this build, or TorchError naming host, variable and fix."""
    torch_cuda = torch.get("cuda")
    if requested == "cpu":
        return "cpu"
    if requested == "auto":
        return "cuda" if (nvcc_release and torch_cuda) else "cpu"
    problems = []
    if not nvcc_release:
        problems.append("no nvcc on %s (looked in PATH, $CUDA_HOME/bin and /usr/local/cuda/bin): install the "
                        "CUDA toolkit" % host)
    if not torch_cuda:
        problems.append("torch %s from deepspeed_build_torch_requirement=%r is a CPU build: use a CUDA build "
                        "(e.g. deepspeed_build_pip_args: ['--index-url', 'https://download.pytorch.org/whl/cu128'])"
                        % (torch.get("version"), requirement))
    if nvcc_release and torch_cuda and parse_version(nvcc_release)[:1] != parse_version(torch_cuda)[:1]:
        problems.append("nvcc %s and torch's CUDA %s differ in major version: DeepSpeed refuses to compile "
                        "such ops; install a matching toolkit or torch" % (nvcc_release, torch_cuda))
    if problems:
        raise TorchError("deepspeed_build_accelerator=cuda cannot build on %s: %s. Valid choices here: %s."
                         % (host, "; ".join(problems), "'cpu' or 'auto'"))
    return "cuda"
