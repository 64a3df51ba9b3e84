"""Op builders read statically from a recorded DeepSpeed 0.19.8 op_builder tree."""
import tarfile
import zipfile

import pytest

from ansible_collections.multinode.training.plugins.module_utils._build import ops as o
from tests.unit.conftest import FIXTURES


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = tmp_path_factory.mktemp("deepspeed-0.19.8")
    with tarfile.open(FIXTURES / "deepspeed-0.19.8-op_builder.tar.gz") as tar:
        tar.extractall(root)
    return str(root)


def names(ops):
    return [op["name"] for op in ops]


def test_cpu_ops_of_0198(source):
    ops = o.available_ops(source, "cpu")
    assert names(ops) == ["async_io", "cpu_adagrad", "cpu_adam", "cpu_lion", "deepspeed_ccl_comm",
                          "deepspeed_shm_comm", "fused_adam", "pin_memory"]
    shm = next(op for op in ops if op["name"] == "deepspeed_shm_comm")
    assert shm == {"name": "deepspeed_shm_comm", "builder": "ShareMemCommBuilder",
                   "build_var": "DS_BUILD_SHM_COMM", "module": "deepspeed.ops.comm.deepspeed_shm_comm_op"}


def test_cuda_ops_include_utils_and_shared_cpu_optimizers(source):
    ops = {op["name"]: op for op in o.available_ops(source, "cuda")}
    assert "utils" in ops and "fused_adam" in ops and "transformer_inference" in ops
    assert ops["cpu_adam"]["module"] == "deepspeed.ops.adam.cpu_adam_op"
    assert "deepspeed_shm_comm" not in ops  # a CPU-accelerator comm op


def test_utils_has_no_cpu_builder(source):
    with pytest.raises(o.OpsError) as err:
        o.select_ops(["cpu_adam", "utils"], o.available_ops(source, "cpu"), "cpu")
    msg = str(err.value)
    assert "'utils' not an op" in msg and "accelerator cpu" in msg and "cpu_adam" in msg


def test_typo_is_named_with_the_valid_ops(source):
    with pytest.raises(o.OpsError) as err:
        o.select_ops(["cpu_adamm"], o.available_ops(source, "cpu"), "cpu")
    msg = str(err.value)
    assert msg.startswith("deepspeed_build_ops: 'cpu_adamm' not an op")
    assert "valid ops: async_io, cpu_adagrad, cpu_adam," in msg


def test_aliases_from_build_var(source):
    selected = o.select_ops(["shm_comm", "cpu_adam", "deepspeed_shm_comm"], o.available_ops(source, "cpu"), "cpu")
    assert names(selected) == ["deepspeed_shm_comm", "cpu_adam"]
    assert o.build_env(selected) == {"DS_BUILD_OPS": "0", "DS_BUILD_SHM_COMM": "1", "DS_BUILD_CPU_ADAM": "1"}
    aio = o.select_ops(["aio"], o.available_ops(source, "cuda"), "cuda")
    assert names(aio) == ["async_io"]


def test_not_a_source_tree(tmp_path):
    with pytest.raises(o.OpsError):
        o.available_ops(str(tmp_path), "cpu")


def make_wheel(path, members):
    with zipfile.ZipFile(path, "w") as zf:
        for m in members:
            zf.writestr(m, b"x")


def test_check_wheel_finds_ops(source, tmp_path):
    selected = o.select_ops(["cpu_adam", "shm_comm"], o.available_ops(source, "cpu"), "cpu")
    wheel = tmp_path / "deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl"
    make_wheel(wheel, ["deepspeed/__init__.py",
                       "deepspeed/ops/adam/cpu_adam_op.cpython-311-x86_64-linux-gnu.so",
                       "deepspeed/ops/comm/deepspeed_shm_comm_op.cpython-311-x86_64-linux-gnu.so"])
    found = o.check_wheel(str(wheel), selected, "")
    assert found["cpu_adam"] == "deepspeed/ops/adam/cpu_adam_op.cpython-311-x86_64-linux-gnu.so"


def test_missing_op_named_with_the_reason_from_the_log(source, tmp_path):
    selected = o.select_ops(["cpu_adam", "async_io"], o.available_ops(source, "cpu"), "cpu")
    wheel = tmp_path / "deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl"
    make_wheel(wheel, ["deepspeed/ops/adam/cpu_adam_op.cpython-311-x86_64-linux-gnu.so",
                       "deepspeed/ops/csrc/aio/py_lib/deepspeed_py_aio.cpp"])
    log = ("running build_ext\n"
           " [WARNING]  async_io requires the dev libaio .so object and headers but these were not found.\n"
           " [WARNING]  Skip pre-compile of incompatible async_io; One can disable async_io with DS_BUILD_AIO=0\n")
    with pytest.raises(o.OpsError) as err:
        o.check_wheel(str(wheel), selected, log)
    msg = str(err.value)
    assert "op async_io (DS_BUILD_AIO=1) is not in deepspeed-0.19.8" in msg
    assert "Skip pre-compile of incompatible async_io" in msg
    assert "cpu_adam" not in msg.split(":", maxsplit=1)[0]


def test_missing_op_without_a_logged_reason(source, tmp_path):
    selected = o.select_ops(["cpu_lion"], o.available_ops(source, "cpu"), "cpu")
    wheel = tmp_path / "w.whl"
    make_wheel(wheel, ["deepspeed/__init__.py"])
    with pytest.raises(o.OpsError) as err:
        o.check_wheel(str(wheel), selected, "nothing relevant\n")
    assert "logged no reason" in str(err.value)


# ---------------------------------------------------------------- builders that cannot build here

def cuda_ops(source, *names):
    return o.select_ops(list(names), o.available_ops(source, "cuda"), "cuda")


def test_min_arch_read_from_filter_ccs(source):
    ops = {op["name"]: op for op in o.available_ops(source, "cuda")}
    assert ops["fp_quantizer"]["min_cc_major"] == 8
    assert ops["ragged_device_ops"]["min_cc_major"] == 8
    assert ops["evoformer_attn"]["min_cc_major"] == 7
    assert "min_cc_major" not in ops["fused_adam"]


def test_compatible_ops_pass(source):
    selected = cuda_ops(source, "fused_adam", "fp_quantizer", "async_io")
    assert o.incompatible_ops(selected, "cuda", ["8.0", "9.0+PTX"], env={}, libaio=True) == []


def test_incompatible_ops_named_with_reason_and_fix(source):
    selected = cuda_ops(source, "fused_adam", "evoformer_attn", "fp_quantizer", "async_io", "gds")
    problems = o.incompatible_ops(selected, "cuda", ["7.5", "9.0+PTX"], env={}, libaio=False, cufile=False)
    text = "\n".join(problems)
    assert "fused_adam" not in text
    assert ("deepspeed_build_ops: evoformer_attn (EvoformerAttnBuilder) is incompatible with this build: it needs "
            "CUTLASS >= 3.1; set deepspeed_build_env: {CUTLASS_PATH: <a CUTLASS checkout>}") in text
    assert ("fp_quantizer (FPQuantizerBuilder) compiles only for compute capability >= 8.0, its builder drops 7.5 "
            "from deepspeed_build_cuda_arch_list='7.5;9.0+PTX'") in text
    assert "async_io (AsyncIOBuilder) is incompatible with this build host: it needs libaio" in text
    assert "install libaio-dev or set install_prerequisites=true" in text
    assert "gds (GDSBuilder) is incompatible with this build host: it needs libcufile" in text
    # CUTLASS_PATH given: evoformer_attn is buildable.
    assert not [p for p in o.incompatible_ops(selected, "cuda", ["8.0"], env={"CUTLASS_PATH": "/opt/cutlass"})
                if "evoformer" in p]


# ---------------------------------------------------------------- GPU code of the ops in a wheel

def test_wheel_gpu_coverage_from_the_binaries(tmp_path):
    import gzip

    so = gzip.decompress((FIXTURES / "fatbin" / "fused_adam_op-90.so.gz").read_bytes())
    wheel = tmp_path / "deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("deepspeed/ops/adam/fused_adam_op.cpython-311-x86_64-linux-gnu.so", so)
        zf.writestr("deepspeed/ops/adam/cpu_adam_op.cpython-311-x86_64-linux-gnu.so",
                    so.replace(b".nv_fatbin\0", b".nv_fatbix\0"))   # host-only: no GPU code
    found = {"fused_adam": "deepspeed/ops/adam/fused_adam_op.cpython-311-x86_64-linux-gnu.so",
             "cpu_adam": "deepspeed/ops/adam/cpu_adam_op.cpython-311-x86_64-linux-gnu.so"}
    coverage, problems = o.wheel_gpu_coverage(str(wheel), found, ["9.0"])
    assert coverage == {"fused_adam": {"sass": ["9.0"], "ptx": []}, "cpu_adam": None} and problems == []
    # A binary built for "9.0" does not hold what "8.0;9.0+PTX" asks for: the build fails naming both.
    _coverage, problems = o.wheel_gpu_coverage(str(wheel), found, ["8.0", "9.0+PTX"])
    assert problems == ["op fused_adam: deepspeed/ops/adam/fused_adam_op.cpython-311-x86_64-linux-gnu.so lacks "
                        "sm_80, compute_90 requested by deepspeed_build_cuda_arch_list='8.0;9.0+PTX' "
                        "(it has SASS sm_90)"]
