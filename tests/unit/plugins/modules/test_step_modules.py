"""The modules whose options are a role's steps (deepspeed_build, wheel_distribute, train_node): each step
documented as its function reads it, one real call per module through AnsibleModule, and no task, playbook
or scenario naming a module the collection no longer has."""
import json
import pathlib
import re

import pytest
import yaml
from ansible.module_utils.testing import patch_module_args

from ansible_collections.multinode.training.plugins.modules import deepspeed_build, train_node, wheel_distribute

ROOT = pathlib.Path(__file__).resolve().parents[4]
MODULES = {"deepspeed_build": deepspeed_build, "wheel_distribute": wheel_distribute, "train_node": train_node}


def _doc(module):
    return yaml.safe_load(module.DOCUMENTATION)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_step_is_documented_as_its_function_reads_it(name):
    module = MODULES[name]
    options = _doc(module)["options"]
    assert sorted(options) == sorted(module.STEPS)
    for step, (spec, _run, _extra) in module.STEPS.items():
        assert options[step]["type"] == "dict"
        documented = options[step]["suboptions"]
        assert sorted(documented) == sorted(spec), step
        for option, rules in spec.items():
            assert documented[option].get("type", "str") == rules.get("type", "str"), (step, option)
            assert documented[option].get("default") == rules.get("default"), (step, option)
            assert bool(documented[option].get("required")) == bool(rules.get("required")), (step, option)


def _call(module, args, capsys):
    with patch_module_args(args), pytest.raises(SystemExit):
        module.main()
    return json.loads(capsys.readouterr().out)


def test_deepspeed_build_dist_check_as_a_task_calls_it(tmp_path, capsys):
    result = _call(deepspeed_build, {"dist_check": {"dist_dir": str(tmp_path), "manifest": {"wheel": "x.whl"},
                                                    "manifest_sha256": "0" * 64}}, capsys)
    assert result["changed"] is False
    assert result["current"] is False
    assert result["fetch"]["wheel"] is True
    assert result["invocation"]["module_args"]["dist_check"]["dist_dir"] == str(tmp_path)


def test_wheel_distribute_report_as_a_task_calls_it(capsys):
    env = {"python": "3.11.2", "torch": "2.13.0+cpu", "deepspeed": "0.19.8"}
    result = _call(wheel_distribute, {"report": {"envs": {"node1": env, "node2": env}}}, capsys)
    assert result["consistent"] is True
    assert result["differences"] == []


def test_train_node_platform_env_as_a_task_calls_it(capsys, monkeypatch):
    for var, value in {"MASTER_ADDR": "10.0.0.11", "MASTER_PORT": "29500", "WORLD_SIZE": "2", "RANK": "1"}.items():
        monkeypatch.setenv(var, value)
    result = _call(train_node, {"platform_env": {"platform": "sensecore"}}, capsys)
    assert result["nnodes"] == "2"
    assert result["rdzv_endpoint"] == "10.0.0.11:29500"
    assert result["is_host"] is False


@pytest.mark.parametrize("args, message", [
    ({}, "one of the following is required: access, probe, platform_env"),
    ({"probe": {"python": "/usr/bin/python3"}, "platform_env": {}}, "parameters are mutually exclusive: access|probe|platform_env"),
    ({"probe": {"python": "/usr/bin/python3", "connect_host": "node1"}}, "missing parameter(s) required by 'connect_host': connect_port"),
])
def test_train_node_takes_exactly_one_step_with_that_step_s_rules(args, message, capsys):
    result = _call(train_node, args, capsys)
    assert result["failed"] is True
    assert message in result["msg"]


def test_no_task_names_a_module_the_collection_does_not_have():
    modules = {path.stem for path in (ROOT / "plugins" / "modules").glob("*.py")}
    task = re.compile(r"^\s*(?:- )?multinode\.training\.(\w+):\s*(?:#.*)?$")
    unknown = []
    for folder in ("roles", "playbooks", "molecule", "tests"):
        for path in (ROOT / folder).rglob("*.yml"):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                found = task.match(line)
                if found and found.group(1) not in modules:
                    unknown.append("%s:%d %s" % (path.relative_to(ROOT), number, found.group(1)))
    assert unknown == []
