# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Do the wheel's CUDA kernels cover a node's GPUs? Arch lists, per-op fatbin coverage.

Pure functions on the manifest's ``cuda`` entries and the GPUs a node reported (_build/cuda_arch.py reads
the arch list and nvidia-smi, for the build and here alike); a problem refuses the node, a note (PTX JIT at
first use) is a warning.
"""
from __future__ import annotations

from ansible_collections.multinode.training.plugins.module_utils._build import cuda_arch
from ansible_collections.multinode.training.plugins.module_utils._build import fatbin


def parse_compute_cap(text):
    """'8.6' -> (8, 6)."""
    major, _sep, minor = str(text).strip().partition(".")
    return int(major), int(minor or 0)


def arch_covers(entries, cap):
    """The arch-list entry (cuda_arch.arch_entries) whose code runs on a device of compute capability `cap`, or None.

    CUDA binary compatibility: a cubin for sm_XY runs on devices of the same major X
    with minor >= Y (sm_XYa: exactly XY); PTX for compute_XY is JIT-compiled by the
    driver for any device >= XY.
    """
    for entry in entries:
        arch = entry["arch"]
        if entry["suffix"] == "a":
            sass = cap == arch
        else:
            sass = cap[0] == arch[0] and cap[1] >= arch[1]
        if sass:
            return entry["text"] + " (SASS)"
    for entry in entries:
        if entry["ptx"] and cap >= entry["arch"]:
            return entry["text"] + " (PTX JIT)"
    return None


def _gpu_groups(gpus):
    """GPUs grouped by (name, compute_cap), in index order: [(label, gpu)], label 'GPU 0' or 'GPUs 0-7'."""
    groups = {}
    for gpu in gpus:
        groups.setdefault((gpu["name"], gpu["compute_cap"]), []).append(gpu)
    out = []
    for members in sorted(groups.values(), key=lambda m: m[0]["index"]):
        idx = [m["index"] for m in members]
        if len(idx) == 1:
            label = "GPU %s" % idx[0]
        elif idx == list(range(idx[0], idx[0] + len(idx))):
            label = "GPUs %s-%s" % (idx[0], idx[-1])
        else:
            label = "GPUs %s" % ", ".join(str(i) for i in idx)
        out.append((label, members[0]))
    return out


def _has(label):
    return "have" if label.startswith("GPUs") else "has"


def gpu_findings(manifest, gpus, node):
    """(problems, notes) for the node's GPUs against a cuda wheel.

    With per-op coverage in the manifest (ops[].cuda, read from the binaries by the build),
    every GPU must be covered by every op that has GPU code: SASS of the GPU's major with a
    lower or equal minor, or PTX of a lower or equal arch, which the driver JIT-compiles on
    first use (a note, not a refusal). Older manifests fall back to the arch list. A node
    without GPUs is not judged here: a note says the check was skipped. A wheel of another
    accelerator (cpu) on a node with GPUs is refused: its torch and ops would leave them idle.
    """
    if manifest.get("accelerator") != "cuda":
        if not gpus:
            return [], []
        names = sorted(set(gpu.get("name") or "?" for gpu in gpus))
        return ["%s: %d NVIDIA GPU(s) (%s) on this node, but wheel %s is a %s build (torch %s), which would "
                "leave them idle; valid: a cuda wheel: build_deepspeed.yml with deepspeed_build_accelerator=cuda "
                "and a CUDA torch (auto picks cuda only where the build host has nvcc and a CUDA torch)" % (
                    node, len(gpus), ", ".join(names), manifest.get("wheel"), manifest.get("accelerator") or "cpu",
                    (manifest.get("torch") or {}).get("version", "?"))], []
    arch_list = (manifest.get("cuda") or {}).get("arch_list") or ""
    wheel = manifest.get("wheel")
    if not gpus:
        return [], ["%s: no NVIDIA GPU (nvidia-smi absent or lists none): the GPU check of cuda wheel %s "
                    "(arch list %r) is skipped; its CUDA ops need a GPU to run" % (node, wheel, arch_list)]
    gpu_ops = [op for op in manifest.get("ops") or [] if op.get("cuda")]
    entries = None if gpu_ops else cuda_arch.arch_entries(arch_list, "cuda.arch_list")
    problems, notes = [], []
    for label, gpu in _gpu_groups(gpus):
        try:
            cap = parse_compute_cap(gpu["compute_cap"])
        except ValueError:
            problems.append("%s: %s (%s) reports compute capability %r, which cannot be read" % (
                node, label, gpu["name"], gpu["compute_cap"]))
            continue
        if entries is not None:
            if arch_covers(entries, cap) is None:
                problems.append(
                    "%s: wheel's ops are compiled for CUDA arch list %r, %s (%s) %s compute "
                    "capability %d.%d, not covered (no SASS of the same major with a lower or equal "
                    "minor, no +PTX of a lower or equal arch)" % (
                        node, arch_list, label, gpu["name"], _has(label), cap[0], cap[1]))
            continue
        for op in gpu_ops:
            found = fatbin.gpu_covered(op["cuda"], cap)
            if found is None:
                problems.append(
                    "%s: %s (%s) %s compute capability %d.%d, which op %s of wheel %s does not cover: its binary "
                    "has %s (arch list %r); it needs SASS sm_%d<minor <= %d> or PTX of an arch <= %d.%d" % (
                        node, label, gpu["name"], _has(label), cap[0], cap[1], op["name"], wheel,
                        fatbin.describe(op["cuda"]),
                        arch_list, cap[0], cap[1], cap[0], cap[1]))
            elif found[0] == "ptx":
                notes.append(
                    "%s: %s (%s) %s compute capability %d.%d, op %s of wheel %s has no SASS for it and runs "
                    "from PTX compute_%s: the driver JIT-compiles it on first use (slow first start, cached in "
                    "~/.nv/ComputeCache)" % (node, label, gpu["name"], _has(label), cap[0], cap[1], op["name"], wheel,
                                             found[1].replace(".", "")))
    return problems, notes


def gpu_problems(manifest, gpus, node):
    """Each GPU on the node must be covered by the wheel's GPU code (cuda builds only)."""
    return gpu_findings(manifest, gpus, node)[0]


def gpu_notes(manifest, gpus, node):
    """Warnings for an accepted node: PTX-only coverage (JIT on first use), GPU check skipped."""
    return gpu_findings(manifest, gpus, node)[1]
