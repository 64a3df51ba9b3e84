"""Unit tests for _wheel.driver: the node's NVIDIA driver against the CUDA of the wheel's torch."""
import json

import pytest

from ansible_collections.multinode.training.plugins.module_utils._build import cuda_arch
from ansible_collections.multinode.training.plugins.module_utils._wheel import compat, driver, node_probe
from tests.unit.conftest import FIXTURES

FIX = FIXTURES / "wheel_compat"
H100 = cuda_arch.parse_nvidia_smi((FIX / "nvidia-smi-h100x8.txt").read_text())


def cuda_manifest(torch="2.13.0+cu130", cuda="13.0"):
    m = json.loads((FIX / "manifest-cuda-80-90ptx.json").read_text())
    m["torch"] = {"version": torch, "cuda": cuda}
    return m


@pytest.mark.parametrize("cuda,have,refused", [
    ("13.0", "575.57.08", True),      # an R575 driver (CUDA 12.9) cannot run CUDA 13
    ("13.0", "580.65.06", False),     # the 13.0 GA driver
    ("13.0", "580.95.05", False),
    ("12.8", "525.60.13", False),     # minor version compatibility: any 12.x on >= 525.60.13
    ("12.8", "520.61.05", True),      # the CUDA 11.8 driver
    ("12.8", "535.104.05", False),
    ("11.8", "450.80.02", False),
    ("11.8", "450.51.06", True),
    ("13.0", "1000.1.1", False),      # newer drivers run older CUDA: no upper bound
])
def test_driver_against_the_cuda_of_torch(cuda, have, refused):
    problems = driver.driver_problems(cuda_manifest(cuda=cuda), have, H100, "gpu1")
    assert bool(problems) is refused
    if refused:
        assert problems[0].startswith("gpu1: NVIDIA driver %s, but torch 2.13.0+cu130 of wheel " % have)
        assert "was built with CUDA %s, which needs a driver >= %s" % (cuda, driver.MINIMUM_DRIVER[int(cuda[:2])]) \
            in problems[0]
        assert driver.SOURCE in problems[0]


@pytest.mark.parametrize("manifest,have,gpus", [
    (cuda_manifest(), "470.82.01", []),                       # no GPU on the node: nothing to judge
    (cuda_manifest(), None, H100),                            # the driver could not be read
    (cuda_manifest(cuda="14.0"), "470.82.01", H100),          # a CUDA the table does not list
    (dict(cuda_manifest(), accelerator="cpu"), "470.82.01", H100),  # the cpu wheel has its own refusal
])
def test_nothing_is_said_where_nothing_can_be_judged(manifest, have, gpus):
    assert driver.driver_problems(manifest, have, gpus, "n") == []


def test_parse_driver_reads_the_first_gpus_line():
    assert driver.parse_driver("580.65.06\n580.65.06\n") == "580.65.06"
    assert driver.parse_driver("No devices were found\n") is None
    assert driver.parse_driver("") is None


def test_node_problems_include_the_driver():
    facts = {"python": {"version": "3.12.3", "implementation": "cp", "tag": "cp312", "abi": "cp312",
                        "platform": "linux_x86_64", "glibc": "2.39", "executable": "/usr/bin/python3"},
             "venv": {"path": "/opt/v", "state": "absent"}, "gpus": H100, "driver": "550.54.15",
             "cpuinfo": (FIX / "cpuinfo-avx512-zen4.txt").read_text(), "cpuinfo_path": "/proc/cpuinfo"}
    problems = compat.node_problems(cuda_manifest(), facts, "gpu1")
    assert [p for p in problems if "NVIDIA driver 550.54.15" in p]


def test_query_driver_asks_nvidia_smi_for_the_driver_version():
    seen = []

    def run(cmd):
        seen.append(cmd)
        return 0, "580.65.06\n580.65.06\n", ""

    assert node_probe.query_driver(run, "/usr/bin/nvidia-smi") == (
        "580.65.06", [["/usr/bin/nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]], None)
    assert node_probe.query_driver(lambda cmd: (9, "", "no"), "/x/nvidia-smi")[0] is None


SMI = FIXTURES / "nvidia_smi"


@pytest.mark.parametrize("fixture,rc", [("nvml_mismatch.txt", 18), ("driver_not_loaded.txt", 9)])
def test_a_failing_nvidia_smi_refuses_the_node_quoting_it(fixture, rc):
    """nvidia-smi installed but failing (NVML's driver/library mismatch after a driver upgrade without a reboot)
    is no 'node without GPUs': the probe gives its message and compat refuses the node, whatever the wheel
    (a cpu wheel would otherwise pass on a GPU node, and the driver minimum go unjudged)."""
    said = (SMI / fixture).read_text()
    calls = []

    def run(cmd):
        calls.append(cmd)
        return rc, said, ""

    gpus, commands, error = node_probe.cuda_arch.query_gpus(run, "/usr/bin/nvidia-smi")
    assert gpus == [] and len(commands) == 2 == len(calls)
    first_line = said.splitlines()[0]
    assert error.startswith("`/usr/bin/nvidia-smi --query-gpu=name --format=csv,noheader` exited %d: " % rc)
    assert first_line in error
    facts = {"python": {"version": "3.12.3", "implementation": "cp", "tag": "cp312", "abi": "cp312",
                        "platform": "linux_x86_64", "glibc": "2.39", "executable": "/usr/bin/python3"},
             "venv": {"path": "/opt/v", "state": "absent"}, "gpus": gpus, "driver": None,
             "cpuinfo": (FIX / "cpuinfo-avx512-zen4.txt").read_text(), "cpuinfo_path": "/proc/cpuinfo",
             "nvidia_smi_error": error}
    for manifest in (cuda_manifest(), json.loads((FIX / "manifest-cpu-avx512.json").read_text())):
        problems = [p for p in compat.node_problems(manifest, facts, "gpu1") if "nvidia-smi" in p]
        assert len(problems) == 1, problems
        assert problems[0].startswith("gpu1: nvidia-smi is installed but fails, so this node's GPUs and NVIDIA "
                                      "driver cannot be checked: ")
        assert first_line in problems[0]
        assert ("reboot the node" in problems[0]) is ("mismatch" in said)
    # without nvidia-smi: no GPU, no error; with it working: no error
    assert node_probe.cuda_arch.query_gpus(run, None) == ([], [], None)
    assert node_probe.cuda_arch.query_gpus(lambda cmd: (0, "NVIDIA H200, 9.0\n", ""), "/x")[2] is None


def test_a_driver_query_that_fails_after_the_gpu_query_is_an_error_too():
    driver_version, _cmds, error = node_probe.query_driver(
        lambda cmd: (18, (SMI / "nvml_mismatch.txt").read_text(), ""), "/x/nvidia-smi")
    assert driver_version is None and "Driver/library version mismatch" in error
