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
    monkeypatch.setattr(_plan._nvcc, "find_nvcc", lambda module, explicit, env=None: None)
    module = FakeModule({})
    p = dict(_plan.defaults(), phase="inputs", cc="gcc-11", cxx="g++-11")
    result = _plan.plan(module, p)
    assert (result["cc"], result["cxx"], result["accelerator"]) == ("gcc-11", "g++-11", None)


def test_the_summary_says_what_a_cuda_build_makes_and_why():
    planned = {"accelerator": "cuda", "arch_list": "9.0+PTX", "nvcc": {"release": "13.0"},
               "gpus": [{"name": "NVIDIA H100 80GB HBM3", "compute_cap": "9.0"}] * 2,
               "ops": [{"name": "fused_adam"}, {"name": "cpu_adam"}]}
    torch = {"version": "2.13.0+cu130", "cuda": "13.0"}
    assert _plan.summary(planned, torch, "auto", "auto") == (
        "a cuda wheel (ops fused_adam, cpu_adam) against torch 2.13.0+cu130 (CUDA 13.0) with nvcc 13.0, GPU code for "
        "9.0+PTX: auto: nvcc and a CUDA build of torch are both there; auto: the GPUs of the build host, "
        "NVIDIA H100 80GB HBM3 (9.0)")
    assert _plan.summary(dict(planned, gpus=[]), torch, "cuda", "8.0;9.0+PTX").endswith(
        ": deepspeed_build_accelerator=cuda; the arch list as given")


@pytest.mark.parametrize("accelerator, nvcc, version, why", [
    ("cpu", "13.0", "2.13.0+cu130", "deepspeed_build_accelerator=cpu"),
    ("auto", None, "2.13.0", "auto: no nvcc on the build host"),
    ("auto", "13.0", "2.13.0+cpu", "auto: torch 2.13.0+cpu is a CPU build"),
])
def test_the_summary_says_why_a_build_is_cpu(accelerator, nvcc, version, why):
    planned = {"accelerator": "cpu", "nvcc": {"release": nvcc} if nvcc else None, "ops": ["cpu_adam"]}
    assert _plan.summary(planned, {"version": version}, accelerator, "auto") == (
        "a cpu wheel (ops cpu_adam) against torch %s: %s" % (version, why))


def test_no_summary_before_the_plan_has_an_accelerator():
    assert _plan.summary({"accelerator": None}, {}, "auto", "auto") == ""


def _cuda_plan(monkeypatch, nodes, arch="auto", host_gpus=()):
    """plan() in phase inputs for a CUDA 12 torch with nvcc 12.4, the build host's nvidia-smi answering host_gpus."""
    nvcc = dict(NVCC, release="12.4", archs=["5.0", "6.0", "7.0", "7.5", "8.0", "8.6", "8.9", "9.0"])
    monkeypatch.setattr(_plan._nvcc, "find_nvcc", lambda module, explicit, env=None: nvcc["path"])
    monkeypatch.setattr(_plan._nvcc, "probe_nvcc", lambda module, path: nvcc)
    monkeypatch.setattr(_plan.cuda_arch, "query_gpus", lambda run, smi: (list(host_gpus), [], None))
    module = FakeModule({})
    module.run_command = lambda argv, **kwargs: (1, "", "not run here")
    p = dict(_plan.defaults(), phase="inputs", accelerator="cuda", cuda_arch_list=arch, nodes=nodes,
             torch={"version": "2.13.0+cu126", "cuda": "12.6"}, torch_requirement="torch==2.13.0+cu126")
    return module, p


def _recorded(gpus):
    from tests.unit.plugins.module_utils._build.test_torch_pick import node  # recorded nvidia-smi answers
    return node(gpus, None)


def test_arch_list_auto_covers_the_nodes_gpus_when_the_build_host_has_none(monkeypatch):
    nodes = {"gpu1": _recorded("a40x10.csv"), "gpu2": _recorded("h100x2.csv")}
    module, p = _cuda_plan(monkeypatch, nodes)
    result = _plan.plan(module, p)
    assert result["arch_list"] == "8.6;9.0+PTX", result
    assert result["gpus"] == [] and len(result["node_gpus"]) == 12
    assert _plan.summary(dict(result, ops=[]), p["torch"], "cuda", "auto").endswith(
        "GPU code for 8.6;9.0+PTX: deepspeed_build_accelerator=cuda; auto: the GPUs of the nodes of group train and "
        "the build host, NVIDIA A40 (8.6), NVIDIA H100 80GB HBM3 (9.0)")
    # the build host's own GPUs join them
    module, p = _cuda_plan(monkeypatch, {"gpu1": _recorded("a40x10.csv")},
                           host_gpus=[{"name": "Tesla V100-SXM2-32GB", "compute_cap": "7.0"}])
    assert _plan.plan(module, p)["arch_list"] == "7.0;8.6+PTX"


def test_arch_list_auto_refuses_a_node_whose_nvidia_smi_failed(monkeypatch):
    nodes = {"gpu1": _recorded("h100x2.csv"),
             "gpu2": {"gpus": [], "driver": None, "error": "`nvidia-smi --query-gpu=name --format=csv,noheader` exited "
                      "18: Failed to initialize NVML: Driver/library version mismatch"}}
    module, p = _cuda_plan(monkeypatch, nodes)
    with pytest.raises(Exit):
        _plan.plan(module, p)
    assert module.result["msg"].startswith("deepspeed_build_cuda_arch_list=auto: nvidia-smi cannot read the GPUs of "
                                           "gpu2: `nvidia-smi"), module.result["msg"]
    # an explicit list does not need the nodes' GPUs
    module, p = _cuda_plan(monkeypatch, nodes, arch="9.0")
    assert _plan.plan(module, p)["arch_list"] == "9.0"
