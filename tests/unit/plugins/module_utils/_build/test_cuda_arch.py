"""TORCH_CUDA_ARCH_LIST validation, auto-detection from nvidia-smi, and coverage."""
import pytest

from ansible_collections.multinode.training.plugins.module_utils._build import cuda_arch as a
from tests.unit.conftest import FIXTURES


def smi(name):
    return (FIXTURES / "nvidia_smi" / name).read_text()


@pytest.mark.parametrize("text, expected", [
    ("7.5", ["7.5"]),
    ("9.0+PTX;7.5;8.0", ["7.5", "8.0", "9.0+PTX"]),
    ("8.0 8.6  9.0", ["8.0", "8.6", "9.0"]),
    ("9.0;9.0+PTX", ["9.0+PTX"]),
    ("9.0a;10.0", ["9.0a", "10.0"]),
    ("10.0;7.0;12.0", ["7.0", "10.0", "12.0"]),
])
def test_parse_valid(text, expected):
    assert a.parse_arch_list(text) == expected


@pytest.mark.parametrize("text, bad", [
    ("7.5;foo", "'foo'"),
    ("75", "'75'"),
    ("sm_80", "'sm_80'"),
    ("8.0;9.0+ptx", "'9.0+ptx'"),
])
def test_parse_garbage_names_the_token(text, bad):
    with pytest.raises(a.ArchListError) as err:
        a.parse_arch_list(text)
    msg = str(err.value)
    assert "deepspeed_build_cuda_arch_list" in msg and bad in msg and "9.0+PTX" in msg


def test_empty_list_refused():
    with pytest.raises(a.ArchListError):
        a.parse_arch_list(" ; ")


def test_auto_from_recorded_h100_node():
    gpus = a.parse_nvidia_smi(smi("h100x8.csv"))
    assert len(gpus) == 8 and gpus[0] == {"index": 0, "name": "NVIDIA H100 80GB HBM3", "compute_cap": "9.0"}
    assert a.auto_arch_list(gpus) == ["9.0+PTX"]


def test_auto_union_with_ptx_on_highest():
    assert a.auto_arch_list(a.parse_nvidia_smi(smi("mixed_a100_l40s.csv"))) == ["8.0", "8.9+PTX"]


def test_old_driver_names_use_the_seed_table():
    gpus = a.parse_nvidia_smi(smi("old_driver_names.csv"))
    assert [g["compute_cap"] for g in gpus] == ["7.0", "7.0", "7.5"]
    assert a.auto_arch_list(gpus) == ["7.0", "7.5+PTX"]


def test_unknown_gpu_and_no_gpu_are_errors():
    with pytest.raises(a.ArchListError) as err:
        a.auto_arch_list(a.parse_nvidia_smi(smi("unknown_gpu.csv")))
    assert "NVIDIA Quantum Widget 9000" in str(err.value)
    with pytest.raises(a.ArchListError) as err:
        a.auto_arch_list([])
    assert "no GPU is visible" in str(err.value)


@pytest.mark.parametrize("name, cap", [
    ("NVIDIA GeForce RTX 4090", "8.9"),
    ("NVIDIA GeForce RTX 2080 Ti", "7.5"),
    ("NVIDIA GeForce RTX 2080", "7.5"),
    ("NVIDIA A100-SXM4-40GB", "8.0"),
    ("NVIDIA A10", "8.6"),
    ("Tesla T4", "7.5"),
    ("NVIDIA H200", "9.0"),
    ("Something else", None),
])
def test_name_table(name, cap):
    assert a.arch_for_name(name) == cap


def test_query_gpus_falls_back_to_names_on_old_drivers():
    calls = []

    def run(argv):
        calls.append(argv)
        if "--query-gpu=name,compute_cap" in argv:
            return 6, "", 'Field "compute_cap" is not a valid field to query.'
        return 0, smi("old_driver_names.csv"), ""

    gpus, commands, error = a.query_gpus(run, "/usr/bin/nvidia-smi")
    assert error is None
    assert [g["compute_cap"] for g in gpus] == ["7.0", "7.0", "7.5"]
    assert len(commands) == 2 and commands == calls
    assert a.query_gpus(run, None) == ([], [], None)


# ---------------------------------------------------------------- what nvcc can compile for

NVCC13 = {"path": "/usr/local/bin/nvcc", "release": "13.0"}


def nvcc13():
    return dict(NVCC13, archs=a.parse_nvcc_gpu_archs((FIXTURES / "cuda" / "nvcc-13.0-list-gpu-arch.txt").read_text()))


def test_nvcc_13_list_gpu_arch_recorded():
    assert nvcc13()["archs"] == ["7.5", "8.0", "8.6", "8.7", "8.8", "8.9", "9.0", "10.0", "10.3", "11.0",
                                 "12.0", "12.1"]


@pytest.mark.parametrize("arch_list", ["8.0;9.0+PTX", "7.5", "9.0a;10.0", "12.0+PTX"])
def test_supported_archs_pass(arch_list):
    assert a.unsupported_archs(a.parse_arch_list(arch_list), nvcc13()) is None


def test_archs_nvcc_13_dropped_are_refused_by_name():
    msg = a.unsupported_archs(a.parse_arch_list("6.0;7.0;8.0;9.0+PTX"), nvcc13())
    assert msg.startswith("deepspeed_build_cuda_arch_list='6.0;7.0;8.0;9.0+PTX': nvcc 13.0 (/usr/local/bin/nvcc) "
                          "cannot compile for 6.0, 7.0; it supports 7.5, 8.0,")
    assert "Drop them" in msg


def test_unknown_nvcc_archs_refuse_nothing():
    assert a.unsupported_archs(["5.0"], dict(NVCC13, archs=[])) is None


def test_auto_without_gpu_asks_for_the_nodes_archs():
    with pytest.raises(a.ArchListError) as err:
        a.auto_arch_list([])
    assert "the GPUs of the nodes the wheel is for" in str(err.value)
    assert "deepspeed_build_cuda_arch_list='8.0;9.0+PTX'" in str(err.value)
