"""deepspeed_env_verify's run (plugins/module_utils/_wheel/verify.py run_module) on a stand-in module."""
import pytest

from ansible_collections.multinode.training.plugins.module_utils._wheel import verify


class Exit(Exception):
    pass


class FakeModule:
    def __init__(self, **params):
        self.params = dict({k: v.get("default") for k, v in verify.ARGUMENT_SPEC.items()}, **params)

    def fail_json(self, **result):
        self.result = dict(result, failed=True)
        raise Exit()


def test_a_venv_without_python_is_refused_before_the_probe_runs(tmp_path):
    module = FakeModule(venv=str(tmp_path), manifest={"ops": [{"name": "cpu_adam", "builder": "CPUAdamBuilder"}]},
                        node="n1")
    with pytest.raises(Exit):
        verify.run_module(module)
    assert module.result["msg"] == "n1: %s has no executable bin/python" % tmp_path
    assert module.result["cmd"][1:3] == ["-c", "<deepspeed op probe>"]
