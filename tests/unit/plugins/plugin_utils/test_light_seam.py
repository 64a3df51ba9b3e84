"""The light transport's one seam (plugins/plugin_utils/_light_exec.py: ENTRIES, run_module, the
switch) and the rule it imposes on the modules behind it: the module file and the light call run
the same entry, whose sources need only the standard library and use only what LightModule has."""
import ast
import os

import pytest

from ansible_collections.multinode.training.plugins.module_utils._node import light as _light
from ansible_collections.multinode.training.plugins.plugin_utils import _light_exec

PLUGINS = os.path.dirname(os.path.dirname(os.path.dirname(_light.__file__)))
LIGHT_MEMBERS = {name for name in dir(_light.LightModule) if not name.startswith("_")} | {"params", "check_mode",
                                                                                          "no_log_values"}


def members_used(sources):
    """``{name: sorted attributes read or called on ``module``}`` in the functions of ``sources`` that take
    a parameter named ``module`` (the AnsibleModule, or the LightModule of a light call)."""
    used = {}
    for name, source in sources.items():
        for function in ast.walk(ast.parse(source)):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) or \
                    "module" not in [arg.arg for arg in function.args.args + function.args.kwonlyargs]:
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "module":
                    used.setdefault(name, set()).add(node.attr)
    return {name: sorted(attrs) for name, attrs in used.items()}


def missing_members(sources):
    """``[(source name, attribute)]`` that LightModule lacks."""
    return [(name, attr) for name, attrs in sorted(members_used(sources).items()) for attr in attrs
            if attr not in LIGHT_MEMBERS]


def _tree(path):
    with open(path) as handle:
        return ast.parse(handle.read(), path)


def _constants(tree):
    return {target.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
            for target in node.targets if isinstance(target, ast.Name) and isinstance(node.value, ast.Constant)}


@pytest.mark.parametrize("module", sorted(_light_exec.ENTRIES))
def test_the_module_file_runs_the_entry_the_light_call_runs(module):
    entry = _light_exec.ENTRIES[module]
    tree = _tree(os.path.join(PLUGINS, "modules", module.rsplit(".", 1)[1] + ".py"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module == entry
                for alias in node.names}
    assert {"ARGUMENT_SPEC", "run_module"} <= imported, (module, imported)


@pytest.mark.parametrize("module", sorted(_light_exec.ENTRIES))
def test_an_entry_uses_only_what_light_module_has(module):
    sources = _light_exec.module_sources(_light_exec.ENTRIES[module])
    assert members_used(sources), module  # the scan sees the entry's calls
    assert missing_members(sources) == []


def test_a_member_light_module_lacks_is_found():
    planted = {"x": "def run_module(module):\n    if module.boolean(module.params['a']):\n"
                    "        module.exit_json(changed=module.check_mode)\n"}
    assert missing_members(planted) == [("x", "boolean")]


def test_every_action_that_makes_light_calls_names_a_registered_module_and_entry():
    seen = set()
    for name in sorted(os.listdir(os.path.join(PLUGINS, "action"))):
        if not name.endswith(".py"):
            continue
        tree = _tree(os.path.join(PLUGINS, "action", name))
        uses = any(isinstance(node, ast.ImportFrom) and node.module == _light_exec.__name__
                   and "run_module" in {alias.name for alias in node.names} for node in ast.walk(tree))
        if uses:
            constants = _constants(tree)
            assert _light_exec.ENTRIES.get(constants.get("MODULE")) == constants.get("ENTRY"), name
            seen.add(constants["MODULE"])
    assert seen == set(_light_exec.ENTRIES)


def test_run_module_refuses_a_module_outside_the_seam():
    with pytest.raises(ValueError, match="not a light module"):
        _light_exec.run_module(None, "multinode.training.node_facts",
                               "ansible_collections.multinode.training.plugins.module_utils._train.node_facts", {}, {})


def test_the_switch_turns_light_calls_off(monkeypatch):
    assert _light_exec.enabled({}) and _light_exec.enabled({_light_exec.SWITCH: "1"})
    assert not _light_exec.enabled({_light_exec.SWITCH: "0"})

    class Action(object):
        def __init__(self):
            self.calls = []

        def _execute_module(self, **kwargs):
            self.calls.append(kwargs["module_name"])
            return {"module": True}

    monkeypatch.setenv(_light_exec.SWITCH, "0")
    action = Action()
    module = "multinode.training.train_access"
    # no connection looked at: off means the module call, before any of light_python's checks
    assert _light_exec.light_python(action, {"ansible_python_interpreter": "/usr/bin/python3"}) is None
    assert _light_exec.run_module(action, module, _light_exec.ENTRIES[module], {}, {}) == {"module": True}
    assert action.calls == [module]
