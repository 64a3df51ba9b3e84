# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""deepspeed_build_torch_requirement auto: the torch picked for recorded nodes (tests/fixtures/nvidia_smi)."""
from __future__ import annotations

import json
import pathlib
import re

import pytest

from ansible_collections.multinode.training.plugins.module_utils._build import cuda_arch
from ansible_collections.multinode.training.plugins.module_utils._build import torch_info
from ansible_collections.multinode.training.plugins.module_utils._build import torch_pick
from ansible_collections.multinode.training.plugins.module_utils._wheel import driver

FIXTURES = pathlib.Path(__file__).resolve().parents[4] / "fixtures"


def node(gpus, drv):
    """A node as the gpus step answers, from two recorded nvidia-smi answers."""
    smi = FIXTURES / "nvidia_smi"
    return {"gpus": cuda_arch.parse_nvidia_smi((smi / gpus).read_text()),
            "driver": driver.parse_driver((smi / drv).read_text()) if drv else None, "error": None}


A40_550 = node("a40x10.csv", "a40x10_driver_550.csv")
H100_580 = node("h100x2.csv", "h100x2_driver_580.csv")
H100_535 = node("h100x8.csv", "h100x2_driver_535.csv")
NO_GPU = {"gpus": [], "driver": None, "error": None}


def test_driver_550_gets_a_cuda_12_build_from_the_pytorch_index():
    got = torch_pick.pick({"node1": A40_550})
    assert got["requirement"] == "torch==2.13.0+cu126" and got["cuda"] == "12.6"
    assert got["index"] == "https://download.pytorch.org/whl/cu126"
    assert "550.127.05 on node1" in got["reason"]
    assert got["reason"].endswith("(not torch==2.13.0, torch==2.13.0+cu130: CUDA 13.0 needs a driver >= 580.65.06, "
                                  "node1 has 550.127.05)")


def test_driver_580_gets_pypis_cuda_13_build():
    got = torch_pick.pick({"node2": H100_580})
    assert got == {"requirement": "torch==2.13.0", "cuda": "13.0", "index": None,
                   "reason": "the lowest NVIDIA driver of the 1 GPU node(s), 580.95.05 on node2, runs CUDA 13.0"}


def test_the_lowest_driver_decides_for_all_nodes():
    got = torch_pick.pick({"node1": A40_550, "node2": H100_580, "node3": H100_535, "cpu": NO_GPU})
    assert got["requirement"] == "torch==2.13.0+cu126"
    assert "535.183.06 on node3" in got["reason"] and "of the 3 GPU node(s)" in got["reason"]


def test_nvcc_12_on_the_build_host_takes_the_cuda_12_build_even_on_a_new_driver():
    got = torch_pick.pick({"node2": H100_580}, nvcc="12.4")
    assert got["requirement"] == "torch==2.13.0+cu126"
    assert "nvcc 12.4 compiles against it" in got["reason"]
    assert "nvcc 12.4 on the build host compiles no DeepSpeed op against CUDA 13.0" in got["reason"]


def test_nvcc_13_with_a_driver_550_is_refused_naming_each_build():
    with pytest.raises(torch_info.TorchError) as err:
        torch_pick.pick({"node1": A40_550}, nvcc="13.0")
    msg = str(err.value)
    assert msg.startswith("deepspeed_build_torch_requirement=auto: no build of torch 2.13.0 fits: ")
    assert "torch==2.13.0+cu126: nvcc 13.0 on the build host compiles no DeepSpeed op against CUDA 12.6" in msg
    assert "torch==2.13.0, torch==2.13.0+cu130: CUDA 13.0 needs a driver >= 580.65.06, node1 has 550.127.05" in msg
    assert "; valid: " in msg


def test_ds_skip_cuda_check_lets_nvcc_13_build_against_cuda_12():
    got = torch_pick.pick({"node1": A40_550}, nvcc="13.0", env={"DS_SKIP_CUDA_CHECK": "1"})
    assert got["requirement"] == "torch==2.13.0+cu126"


def test_a_volta_node_gets_the_cuda_12_build_its_kernels_cover():
    v100 = {"gpus": cuda_arch.parse_nvidia_smi((FIXTURES / "nvidia_smi" / "old_driver_names.csv").read_text())[:2],
            "driver": "580.95.05", "error": None}
    got = torch_pick.pick({"v100": v100})
    assert got["requirement"] == "torch==2.13.0+cu126"
    assert "do not run on the Tesla V100-SXM2-32GB (7.0) of v100" in got["reason"]


def test_no_gpu_anywhere_keeps_pypis_torch():
    got = torch_pick.pick({"build": NO_GPU})
    assert got["requirement"] == "torch==2.13.0" and got["index"] is None
    assert got["reason"].startswith("no NVIDIA driver was read")


def test_a_failing_nvidia_smi_is_refused_naming_the_node():
    broken = {"gpus": [], "driver": None, "error": "nvidia-smi exited 18: Failed to initialize NVML"}
    with pytest.raises(torch_info.TorchError) as err:
        torch_pick.pick({"node1": A40_550, "node4": broken})
    assert "node4: nvidia-smi exited 18" in str(err.value) and "node1" not in str(err.value)


@pytest.mark.parametrize("requirement, pip_args, expected", [
    ("torch==2.13.0+cu126", [], ["--extra-index-url", "https://download.pytorch.org/whl/cu126"]),
    ("torch==2.10.0+cu128", ["--retries", "3"], ["--extra-index-url", "https://download.pytorch.org/whl/cu128"]),
    ("torch==2.13.0+cu126", ["--no-index", "--find-links", "/w"], []),
    ("torch==2.13.0+cu126", ["--index-url=https://mirror/simple"], []),
    ("torch==2.13.0", [], []),
    ("torch==2.13.0+cpu", [], []),
])
def test_the_pytorch_index_reaches_torch_alone_and_only_for_a_cuda_label(requirement, pip_args, expected):
    assert torch_pick.index_args(requirement, pip_args) == expected


def test_pypis_table_is_what_the_recorded_wheel_metadata_says():
    recorded = json.loads((FIXTURES / "torch_pypi_requires.json").read_text())["wheels"]
    seen = {}
    for wheel, requires in recorded.items():
        release = re.match(r"torch-(\d+\.\d+)\.", wheel).group(1)
        seen.setdefault(release, set()).add(torch_info.cuda_from_requires(
            [re.sub(r"\s*\((.*)\)", r"\1", r) for r in requires]))
    assert {r: c.pop() for r, c in seen.items() if len(c) == 1 and r in torch_pick.PYPI_CUDA} == {
        r: c for r, c in torch_pick.PYPI_CUDA.items() if r in seen}
    assert set(torch_pick.PYPI_CUDA) <= set(seen)


@pytest.mark.parametrize("archs, cap, runs", [
    (("7.5", "8.0", "8.6", "9.0", "10.0", "12.0+PTX"), "7.0", False),
    (("7.5", "8.0", "8.6", "9.0", "10.0", "12.0+PTX"), "8.9", True),
    (("7.5", "8.0", "8.6", "9.0", "10.0", "12.0+PTX"), "12.1", True),
    (("5.0", "6.0", "7.0", "7.5", "8.0", "8.6", "9.0"), "10.0", False),
])
def test_kernels_run_on_the_same_major_or_through_ptx(archs, cap, runs):
    assert torch_pick.runs_on(archs, cap) is runs
