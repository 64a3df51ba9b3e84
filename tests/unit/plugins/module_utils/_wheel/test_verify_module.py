"""deepspeed_env_verify's run (plugins/module_utils/_wheel/verify.py run_module) on a stand-in module."""
import pytest

from ansible_collections.multinode.training.plugins.module_utils._wheel import verify
from tests.unit.plugins.module_utils.stand_in import Exit, StandInModule


def stand_in(**params):
    return StandInModule(verify.ARGUMENT_SPEC, **params)


def test_a_venv_without_python_is_refused_before_the_probe_runs(tmp_path):
    module = stand_in(venv=str(tmp_path), manifest={"ops": [{"name": "cpu_adam", "builder": "CPUAdamBuilder"}]},
                      node="n1")
    with pytest.raises(Exit):
        verify.run_module(module)
    assert module.result["msg"] == "n1: %s has no executable bin/python" % tmp_path
    assert module.result["cmd"][1:3] == ["-c", "<deepspeed op probe>"]
