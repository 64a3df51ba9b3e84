# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Does a node's NVIDIA driver run the CUDA that the wheel's torch was built with?

The data: NVIDIA's minimum driver per CUDA major release under minor version compatibility (CUDA 11
and later: an application built with any 11.x, 12.x or 13.x toolkit runs on a driver at or above the
minimum of its major family), from "CUDA Compatibility", Table 1 "CUDA Toolkit 11.x, 12.x, and 13.x
Driver Version Ranges", https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html
(the exact versions: the CUDA Toolkit release notes, Table 3, Linux x86_64). torch wheels from PyPI bring
their CUDA runtime along, so the node's driver is the one thing the node must provide; below the
minimum, the job fails at its first CUDA call ("The NVIDIA driver on your system is too old").
A newer driver always runs older CUDA (backward compatibility): there is no upper bound.
"""
from __future__ import annotations

import re

SOURCE = "https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html"
# CUDA major -> the minimum Linux x86_64 driver of its family.
MINIMUM_DRIVER = {
    11: "450.80.02",
    12: "525.60.13",
    13: "580.65.06",
}


def version_tuple(text):
    """'580.65.06' -> (580, 65, 6); None where it is not a driver version."""
    text = str(text or "").strip()
    if not re.match(r"^\d+(\.\d+){0,2}$", text):
        return None
    return tuple(int(part) for part in text.split("."))


def minimum_for(cuda):
    """The minimum driver for CUDA '12.8' (torch's torch.version.cuda), or None where the table has none."""
    match = re.match(r"^(\d+)\.", str(cuda or "") + ".")
    return MINIMUM_DRIVER.get(int(match.group(1))) if match else None


def parse_driver(text):
    """nvidia-smi --query-gpu=driver_version --format=csv,noheader -> the driver version (every GPU of a node
    reports the same one: the first line), or None."""
    for line in (text or "").splitlines():
        if version_tuple(line):
            return line.strip()
    return None


def driver_problems(manifest, driver, gpus, node):
    """A node with GPUs whose driver is below the minimum for the CUDA of the wheel's torch -> one problem line.
    Nothing to say for a cpu wheel, a node without GPUs or a CUDA the table does not list; a driver that could
    not be read is not judged here (the GPU list came from the same nvidia-smi)."""
    cuda = (manifest.get("torch") or {}).get("cuda")
    if manifest.get("accelerator") != "cuda" or not gpus or not cuda:
        return []
    minimum = minimum_for(cuda)
    have = version_tuple(driver)
    if not minimum or not have or have >= version_tuple(minimum):
        return []
    return ["%s: NVIDIA driver %s, but torch %s of wheel %s was built with CUDA %s, which needs a driver >= %s "
            "(NVIDIA's minimum for CUDA %s.x, %s); valid: a driver of that branch or newer on this node, or a "
            "torch built for an older CUDA (deepspeed_build_torch_requirement, then build the wheel again)" % (
                node, driver, (manifest.get("torch") or {}).get("version"), manifest.get("wheel"), cuda, minimum,
                str(cuda).split(".", maxsplit=1)[0], SOURCE)]


def smi_problems(error, node):
    """An nvidia-smi that is installed but fails (``error``: cuda_arch.smi_error) -> one problem line: the node's
    GPUs and driver cannot be read, so neither the wheel's GPU coverage nor the driver minimum can be judged, and
    a node that has GPUs would pass as one without. Refused, whatever the wheel: fail closed."""
    if not error:
        return []
    hint = ("after a driver upgrade without a reboot the loaded kernel module and the user-space library differ: "
            "reboot the node or reload the nvidia kernel modules" if "mismatch" in error.lower() else
            "fix the driver so that nvidia-smi runs")
    return ["%s: nvidia-smi is installed but fails, so this node's GPUs and NVIDIA driver cannot be checked: %s; "
            "valid: a node where nvidia-smi runs (%s), or a node without GPUs and without nvidia-smi" % (
                node, error, hint)]
