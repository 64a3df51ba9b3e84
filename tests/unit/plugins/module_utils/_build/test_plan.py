"""The build plan's arch list and environment (plugins/module_utils/_build/plan.py) on a stand-in module."""
import pytest

from ansible_collections.multinode.training.plugins.module_utils._build import plan as _plan
from tests.unit.plugins.module_utils.stand_in import Exit, StandInModule


class FakeModule(StandInModule):
    def __init__(self, bins):
        super().__init__({})
        self.bins = bins

    def get_bin_path(self, name, required=False):
        return self.bins.get(name)


NVCC = {"release": "12.8", "path": "/usr/local/cuda/bin/nvcc", "cuda_home": "/usr/local/cuda",
        "archs": ["7.5", "8.0", "9.0"]}


def test_a_cpu_build_has_no_arch_list_and_a_cuda_build_the_explicit_one():
    module = FakeModule({})
    assert _plan.cuda_arch_list(module, "b1", "cpu", None, [], None) == ""
    assert _plan.cuda_arch_list(module, "b1", "cuda", ["8.0", "9.0+PTX"], [], NVCC) == "8.0;9.0+PTX"


def test_auto_without_a_gpu_and_an_arch_nvcc_cannot_build_are_refused():
    module = FakeModule({})
    with pytest.raises(Exit):
        _plan.cuda_arch_list(module, "b1", "cuda", None, [], NVCC)
    assert module.result["msg"].startswith("deepspeed_build_cuda_arch_list=auto: no GPU is visible")
    with pytest.raises(Exit):
        _plan.cuda_arch_list(module, "b1", "cuda", ["12.0"], [], NVCC)
    assert module.result["msg"].startswith("b1: ") and "12.0" in module.result["msg"]


def test_the_build_environment_of_a_cpu_and_a_cuda_build():
    module = FakeModule({"gcc": "/usr/bin/gcc", "g++": "/usr/bin/g++"})
    p = dict(_plan.defaults(), cc="gcc", cxx="g++", site_packages="")
    assert _plan.build_env(module, p, "b1", "cpu", "", None, 4) == {
        "DS_ACCELERATOR": "cpu", "MAX_JOBS": "4", "DS_ENABLE_NINJA": "1", "CC": "/usr/bin/gcc", "CXX": "/usr/bin/g++"}
    env = _plan.build_env(module, p, "b1", "cuda", "8.0;9.0+PTX", NVCC, 16)
    assert env["TORCH_CUDA_ARCH_LIST"] == "8.0;9.0+PTX" and env["DS_NVCC_THREADS"] == "8"
    assert env["CUDA_HOME"] == "/usr/local/cuda" and "CPATH" not in env


def test_a_missing_cxx_is_refused_naming_the_toolchain_role():
    module = FakeModule({"gcc": "/usr/bin/gcc"})
    with pytest.raises(Exit):
        _plan.build_env(module, dict(_plan.defaults(), cc="gcc", cxx="g++"), "b1", "cpu", "", None, 2)
    assert module.result["msg"] == "C++ compiler 'g++' not found on b1: the toolchain role installs it"


def test_the_plan_says_which_compilers_it_is_for(monkeypatch):
    monkeypatch.setattr(_plan._nvcc, "find_nvcc", lambda module, explicit: None)
    module = FakeModule({})
    p = dict(_plan.defaults(), phase="inputs", cc="gcc-11", cxx="g++-11")
    result = _plan.plan(module, p)
    assert (result["cc"], result["cxx"], result["accelerator"]) == ("gcc-11", "g++-11", None)
