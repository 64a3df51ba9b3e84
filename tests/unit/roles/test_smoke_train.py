"""The bundled smoke job (roles/train/files/smoke_train.py) names the DeepSpeed ops it loaded and their files:
DeepSpeed prints "<op> built successfully" when it loads a prebuilt op too, which read like a JIT build."""
import importlib.util
import sys
import types

from tests.unit.conftest import ROOT

_SPEC = importlib.util.spec_from_file_location("smoke_train", ROOT / "roles" / "train" / "files" / "smoke_train.py")
smoke = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(smoke)


def test_the_loaded_op_libraries_and_their_files(monkeypatch):
    site = "/opt/multinode-training/venv/lib/python3.11/site-packages/deepspeed/ops"
    for name, path in (("deepspeed.ops.adam.cpu_adam_op", site + "/adam/cpu_adam_op.cpython-311-x86_64-linux-gnu.so"),
                       ("deepspeed.ops.comm.deepspeed_shm_comm_op", site + "/comm/deepspeed_shm_comm_op.cpython-311.so"),
                       ("deepspeed.ops.adam", site + "/adam/__init__.py")):
        module = types.ModuleType(name)
        module.__file__ = path
        monkeypatch.setitem(sys.modules, name, module)
    assert smoke.loaded_ops() == {"cpu_adam_op": site + "/adam/cpu_adam_op.cpython-311-x86_64-linux-gnu.so",
                                  "deepspeed_shm_comm_op": site + "/comm/deepspeed_shm_comm_op.cpython-311.so"}


def test_the_checkpoint_directory_comes_from_the_collection_unless_given(monkeypatch):
    monkeypatch.setenv("MULTINODE_TRAINING_CHECKPOINT_DIR", "/shared/ckpt")
    assert smoke.parse_args([]).checkpoint_dir == "/shared/ckpt"
    assert smoke.parse_args(["--checkpoint-dir", "/mine"]).checkpoint_dir == "/mine"
    monkeypatch.delenv("MULTINODE_TRAINING_CHECKPOINT_DIR")
    assert smoke.parse_args([]).checkpoint_dir == ""
