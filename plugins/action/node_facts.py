# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action for multinode.training.node_facts: the facts from one shell command, no python on the node.

The module costs a python start-up and Ansible's module machinery on the node (about 0.3
CPU-seconds); this runs _train.node_facts.SCRIPT through the connection (three ``ip -j`` calls and the
user's ids, no value of the play in it) and parses the output here with the same code. Where that
cannot be read (no ``ip``, no JSON output), it runs the module, which falls back to setup's own
collectors. ``gather_facts`` runs the module (it calls fact modules, not actions); train.yml calls
this action as its first task instead.

Where the host's python is left to discovery (``interpreter_python = auto*``, no
ansible_python_interpreter) and no module ran there yet, the action also runs Ansible's own
discovery (ansible.executor.interpreter_discovery: ``command -v`` over INTERPRETER_PYTHON_FALLBACK,
no python) and returns its ``discovered_interpreter_python`` fact, as the first module call would:
the launch's next calls can then be light ones (plugins/plugin_utils/_light_exec.py) from the first.
"""
from __future__ import annotations

from ansible.executor.interpreter_discovery import discover_interpreter
from ansible.plugins.action import ActionBase

from ansible_collections.multinode.training.plugins.module_utils._train.node_facts import SCRIPT, NodeFactsError, raw_facts
from ansible_collections.multinode.training.plugins.plugin_utils._light_exec import configured_python
from ansible_collections.multinode.training.plugins.plugin_utils._warm import warm

# Imported by ansible-playbook before it forks the first per-node workers of train.yml: they inherit
# the loaded filters (plugin_utils/_warm.py).
warm()


def discover_python(action, task_vars):
    """Ansible's interpreter discovery (through ``action``'s connection) where a module call would run
    it first -> path or None."""
    mode = str(configured_python(task_vars) or "")
    if not mode.startswith("auto"):
        return None
    return discover_interpreter(action=action, interpreter_name="python", discovery_mode=mode, task_vars=task_vars)


class ActionModule(ActionBase):
    _supports_check_mode = True
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        answer = self._low_level_execute_command(SCRIPT, sudoable=True)
        try:
            facts = raw_facts(answer.get("stdout") or "")
        except NodeFactsError as exc:
            self._display.vvv("node_facts: %s; gathering with the module" % exc)
            result.update(self._execute_module(module_name="multinode.training.node_facts", module_args={},
                                               task_vars=task_vars))
            return result
        python = discover_python(self, task_vars or {})
        if python:
            facts["discovered_interpreter_python"] = python
        result.update(changed=False, ansible_facts=facts, facts_source="ip")
        return result
