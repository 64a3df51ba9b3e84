"""Which torch a requirement gives, from recorded pip --dry-run reports, and the accelerator rules."""
import pytest

from ansible_collections.multinode.training.plugins.module_utils._build import torch_info as ti
from tests.unit.conftest import FIXTURES


def report(name):
    return (FIXTURES / "pip_reports" / name).read_text()


@pytest.mark.parametrize("name, version, cuda", [
    ("torch-2.13.0-cpu.json", "2.13.0+cpu", None),
    ("torch-2.7.1-cu128.json", "2.7.1", "12.8"),
    ("torch-2.6.0-cu124-label.json", "2.6.0+cu124", "12.4"),
    # PyPI's default Linux torch 2.13.0 (torch.__version__ 2.13.0+cu130) names its CUDA
    # through cuda-toolkit[...]==13.0.3, not nvidia-cuda-runtime.
    ("torch-2.13.0-cu130-pypi.json", "2.13.0", "13.0"),
])
def test_from_recorded_reports(name, version, cuda):
    found = ti.from_pip_report(report(name))
    assert found["version"] == version and found["cuda"] == cuda


def test_report_without_torch():
    with pytest.raises(ti.TorchError):
        ti.from_pip_report(report("no-torch.json"))


@pytest.mark.parametrize("version, cuda", [
    ("2.13.0+cu130", "13.0"), ("2.5.1+cu118", "11.8"), ("2.13.0+cpu", None), ("2.4.0+rocm6.1", None),
    ("2.13.0", ""),
])
def test_cuda_from_version(version, cuda):
    assert ti.cuda_from_version(version) == cuda


CPU_TORCH = {"version": "2.13.0+cpu", "cuda": None}
CUDA_TORCH = {"version": "2.13.0+cu130", "cuda": "13.0"}


def test_auto():
    assert ti.resolve_accelerator("auto", "13.0", CUDA_TORCH, "h", "torch") == "cuda"
    assert ti.resolve_accelerator("auto", "13.0", CPU_TORCH, "h", "torch") == "cpu"
    assert ti.resolve_accelerator("auto", None, CUDA_TORCH, "h", "torch") == "cpu"
    # within CUDA 12, DeepSpeed accepts the releases of its list across each other
    assert ti.resolve_accelerator("auto", "12.4", {"version": "2.5.1+cu121", "cuda": "12.1"}, "h", "") == "cuda"


def test_auto_refuses_what_deepspeeds_op_builder_would_refuse_before_compiling():
    """The issue's walk: nvcc 12.4 on the build host, the default torch==2.13.0 (PyPI: CUDA 13.0)."""
    with pytest.raises(ti.TorchError) as err:
        ti.resolve_accelerator("auto", "12.4", CUDA_TORCH, "build01", "torch==2.13.0")
    assert str(err.value) == (
        "deepspeed_build_accelerator=auto on build01: nvcc 12.4 and the CUDA 13.0 of torch 2.13.0+cu130 do not "
        "match, and DeepSpeed compiles no op across them (within one major only the releases of its "
        "cuda_minor_mismatch_ok); valid: a torch built for CUDA 12 (deepspeed_build_torch_requirement=auto picks "
        "one that nvcc and the nodes' drivers fit, or torch==<version>+cu12<minor>: its PyTorch index is added for "
        "torch alone), a CUDA 13.0 toolkit first on PATH or in CUDA_HOME, or deepspeed_build_accelerator=cpu")
    # CUDA 13 is not in DeepSpeed 0.19.8's list: 13.1 against 13.0 fails its check too; 12.7 was never released
    for nvcc, torch in (("13.1", CUDA_TORCH), ("12.7", {"version": "2.5.1+cu124", "cuda": "12.4"}),
                        ("13.0", {"version": "2.5.1+cu118", "cuda": "11.8"})):
        with pytest.raises(ti.TorchError):
            ti.resolve_accelerator("auto", nvcc, torch, "b", "")
    # DeepSpeed's own way past its check
    assert ti.resolve_accelerator("auto", "13.1", CUDA_TORCH, "b", "", {"DS_SKIP_CUDA_CHECK": "1"}) == "cuda"


def test_cuda_on_this_machine_kind_is_refused():
    # These build hosts have nvcc 13.0 and a CPU torch.
    with pytest.raises(ti.TorchError) as err:
        ti.resolve_accelerator("cuda", "13.0", CPU_TORCH, "build01", "torch==2.13.0")
    msg = str(err.value)
    assert "deepspeed_build_accelerator=cuda cannot build on build01" in msg
    assert "torch 2.13.0+cpu" in msg and "is a CPU build" in msg and "'cpu' or 'auto'" in msg


def test_cuda_without_nvcc_and_major_mismatch():
    with pytest.raises(ti.TorchError) as err:
        ti.resolve_accelerator("cuda", None, CUDA_TORCH, "b", "torch")
    assert "no nvcc on b" in str(err.value)
    with pytest.raises(ti.TorchError) as err:
        ti.resolve_accelerator("cuda", "12.4", CUDA_TORCH, "b", "torch")
    assert str(err.value).startswith("deepspeed_build_accelerator=cuda on b: nvcc 12.4 and the CUDA 13.0 of torch")


class FakeModule:
    """run_command answers from ``answers`` ({argv[0]: (rc, out, err)}); fail_json raises."""

    def __init__(self, answers):
        self.answers, self.ran = answers, []

    def get_bin_path(self, name):
        return "/usr/bin/" + name

    def run_command(self, argv):
        self.ran.append(argv)
        return self.answers.get(argv[0], (1, "", "no such interpreter"))

    def fail_json(self, msg):
        raise AssertionError(msg)


def test_an_empty_requirement_uses_the_environment_torch_and_downloads_nothing(monkeypatch):
    monkeypatch.setattr(ti.os, "access", lambda path, mode: True)
    module = FakeModule({"/opt/conda/bin/python": (0, '{"version": "2.11.0+cu130", "cuda": "13.0"}\n', "")})
    found = ti.resolve(module, dict(requirement="", python="/opt/conda/bin/python", venv_python="/w/venv/bin/python",
                                    pip_args=[]))
    assert found == {"resolved": True, "source": "environment", "version": "2.11.0+cu130", "cuda": "13.0"}
    assert not [argv for argv in module.ran if "pip" in argv]


def test_an_empty_requirement_without_torch_is_refused_naming_both_variables(monkeypatch):
    monkeypatch.setattr(ti.os, "access", lambda path, mode: True)
    module = FakeModule({"/usr/bin/python3": (0, "null\n", "")})
    with pytest.raises(AssertionError) as err:
        ti.resolve(module, dict(requirement="", python="python3", venv_python="", pip_args=[]))
    msg = str(err.value)
    assert msg.startswith('deepspeed_build_torch_requirement="": ') and 'deepspeed_build_python="python3"' in msg
    assert "which has none" in msg and "; valid: " in msg


def test_a_cpu_torch_of_the_environment_is_named_as_such():
    with pytest.raises(ti.TorchError) as err:
        ti.resolve_accelerator("cuda", "13.0", CPU_TORCH, "b", "")
    assert "installed for deepspeed_build_python is a CPU build" in str(err.value)


H100 = [{"name": "NVIDIA H100 80GB HBM3", "compute_cap": "9.0"}] * 2
RESOLVED_CUDA_TORCH = {"resolved": True, "version": "2.13.0", "cuda": "13.0"}


def test_auto_without_nvcc_for_gpus_and_a_cuda_torch_is_refused_naming_the_gpus():
    msg = ti.no_nvcc_for_gpus("auto", None, RESOLVED_CUDA_TORCH, {"node1": {"gpus": H100}, "b (the build host)": {"gpus": []}},
                              "b")
    assert msg.startswith("deepspeed_build_accelerator=auto on b: GPUs on node1 (2 x NVIDIA H100 80GB HBM3) and torch "
                          "2.13.0 is a CUDA 13.0 build, but there is no nvcc on b ")
    assert "valid: a CUDA 13 toolkit on the build host" in msg and "deepspeed_build_accelerator=cpu" in msg


@pytest.mark.parametrize("requested, nvcc, torch, gpus", [
    ("cpu", None, RESOLVED_CUDA_TORCH, H100),       # a cpu wheel asked for
    ("auto", "13.0", RESOLVED_CUDA_TORCH, H100),    # nvcc there: a cuda build
    ("auto", None, RESOLVED_CUDA_TORCH, []),        # no GPU anywhere: a cpu build is what fits
    ("auto", None, {"resolved": True, "version": "2.13.0+cpu", "cuda": None}, H100),  # a CPU torch asked for
    ("auto", None, {"resolved": False}, H100),  # torch not known yet
])
def test_no_refusal_where_a_cpu_wheel_is_what_was_asked_or_fits(requested, nvcc, torch, gpus):
    assert ti.no_nvcc_for_gpus(requested, nvcc, torch, {"n": {"gpus": gpus}}, "b") is None
