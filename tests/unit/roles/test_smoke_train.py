"""The bundled smoke job (roles/train/files/smoke_train.py) names the DeepSpeed ops it loaded and their files:
DeepSpeed prints "<op> built successfully" when it loads a prebuilt op too, which read like a JIT build."""
import importlib.util
import sys
import types

import pytest

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


def _fake_torch(monkeypatch, reduced):
    """torch and torch.distributed as _time_is_up uses them: a tensor of one value, an all-reduce that
    records its operation and gives the value of the other ranks' MAX (``reduced``)."""
    torch = types.ModuleType("torch")
    dist = types.ModuleType("torch.distributed")

    class Tensor:
        def __init__(self, values, device=None):
            self.values = list(values)

        def item(self):
            return self.values[0]

    def all_reduce(tensor, op=None):
        calls.append((list(tensor.values), op))
        tensor.values = [max(tensor.values[0], reduced)]

    calls = []
    torch.tensor = Tensor
    torch.distributed = dist
    dist.all_reduce = all_reduce
    dist.ReduceOp = types.SimpleNamespace(MAX="max")
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch.distributed", dist)
    return calls


def test_max_seconds_is_rank_0s_clock_and_every_rank_takes_its_verdict(monkeypatch):
    import time

    calls = _fake_torch(monkeypatch, reduced=0.0)
    # rank 0, 10 s in with --max-seconds 5: up; its flag goes into a MAX all-reduce
    assert smoke._time_is_up(0, time.monotonic() - 10, 5, "cpu") is True
    assert calls[-1] == ([1.0], "max")
    # rank 0 early: not up
    assert smoke._time_is_up(0, time.monotonic(), 5, "cpu") is False
    # another rank never decides by its own clock ...
    assert smoke._time_is_up(1, time.monotonic() - 10, 5, "cpu") is False
    assert calls[-1] == ([0.0], "max")
    # ... but ends when rank 0 said so (the all-reduce carries rank 0's 1.0)
    _fake_torch(monkeypatch, reduced=1.0)
    assert smoke._time_is_up(1, time.monotonic(), 5, "cpu") is True
    assert smoke.parse_args(["--max-seconds", "75"]).max_seconds == 75.0
    assert smoke.parse_args([]).max_seconds == 0.0


def test_a_held_rank_ends_once_the_file_exists_and_fails_past_its_limit(tmp_path, capsys):
    path = tmp_path / "release"
    now = [0.0]

    def sleep(seconds):
        now[0] += seconds
        if now[0] >= 1.0:
            path.write_text("")

    smoke._hold(str(path), 60, 3, clock=lambda: now[0], sleep=sleep)
    assert 1.0 <= now[0] < 1.5
    assert "smoke: rank=3 released by %s" % path in capsys.readouterr().out
    path.unlink()
    now[0] = 0.0
    with pytest.raises(RuntimeError, match="did not appear within 5 s"):
        smoke._hold(str(path), 5, 3, clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
