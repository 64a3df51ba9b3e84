# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A module whose options are its steps: deepspeed_build, wheel_distribute and train_node.

A role's single-use steps are one module, not one module per step; ``ansible-doc -l`` lists it as
"Internal only - ..." (docs/design.md says why it is not hidden).
Each step is one option of type dict whose suboptions are the step's own argument spec; a task gives
exactly one. Two steps may then name an option alike with another type or default (``manifest`` is a
dict for one step and a path for another) without one flat spec having to reconcile them.

The step's run function gets the module as the step sees it: ``params`` are the step's options, every
other attribute (``fail_json``, ``run_command``, ``check_mode``) is the module's own, so the functions
and their unit tests are those of a module of its own, and the result has the same keys.
"""
from __future__ import annotations


class StepModule:
    """The AnsibleModule as one step sees it: ``params`` are the step's options."""

    def __init__(self, module, params):
        self._module = module
        self.params = params

    def __getattr__(self, name):
        return getattr(self._module, name)


def module_args(steps):
    """AnsibleModule's keyword arguments for ``steps`` ({name: (argument_spec, run, extra)}, ``extra``
    the step's own ``required_by`` and the like): one dict option per step, exactly one of them given."""
    names = list(steps)
    return dict(
        argument_spec={name: dict(type="dict", options=spec, **extra) for name, (spec, _run, extra) in steps.items()},
        mutually_exclusive=[names],
        required_one_of=[names],
        supports_check_mode=True,
    )


def run(module, steps):
    """Run the step the task gave."""
    name = next(name for name in steps if module.params.get(name) is not None)
    steps[name][1](StepModule(module, module.params[name]))
