"""plugins/module_utils/_stepped.py: one dict option per step, exactly one given, the step sees its own options."""
from ansible_collections.multinode.training.plugins.module_utils import _stepped
from ansible_collections.multinode.training.plugins.module_utils._train import preflight

from .stand_in import Exit, StandInModule


def _record(module):
    module.exit_json(changed=False, params=module.params, check_mode=module.check_mode)


STEPS = {
    "first": ({"path": dict(type="path", required=True)}, _record, {}),
    "second": ({"count": dict(type="int", default=3)}, _record, dict(required_by={"count": "path"})),
}


def test_module_args_one_dict_option_per_step_exactly_one_given():
    args = _stepped.module_args(STEPS)
    assert args["argument_spec"] == {
        "first": dict(type="dict", options=STEPS["first"][0]),
        "second": dict(type="dict", options=STEPS["second"][0], required_by={"count": "path"}),
    }
    assert args["mutually_exclusive"] == [["first", "second"]]
    assert args["required_one_of"] == [["first", "second"]]
    assert args["supports_check_mode"] is True


def test_run_gives_the_step_its_own_options_and_the_module_the_rest():
    module = StandInModule({}, check_mode=True, first=None, second={"count": 5})
    try:
        _stepped.run(module, STEPS)
    except Exit:
        pass
    assert module.result == dict(changed=False, params={"count": 5}, check_mode=True)


def test_the_train_probe_step_keeps_its_required_by():
    # train_node's probe step: connect_host needs connect_port, as the module of its own had it
    from ansible_collections.multinode.training.plugins.modules import train_node

    assert train_node.STEPS["probe"][2] == dict(required_by=preflight.PROBE_REQUIRED_BY)
