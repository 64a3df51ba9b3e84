# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action for multinode.training.train_access: the module's logic (_train.access.run_module) as a
light call where it can run (plugins/plugin_utils/_light_exec.py: a python start-up on the node
instead of Ansible's module machinery, about 0.3 CPU-seconds less per node), else the module."""
from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.multinode.training.plugins.plugin_utils._light_exec import prepare, run_module
from ansible_collections.multinode.training.plugins.plugin_utils._warm import warm

MODULE = "multinode.training.train_access"
ENTRY = "ansible_collections.multinode.training.plugins.module_utils._train.access"
# Imported by ansible-playbook before it forks the workers: they inherit the entry's import and sources.
prepare(ENTRY)
warm()


class ActionModule(ActionBase):
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        result.update(run_module(self, MODULE, ENTRY, self._task.args, task_vars))
        return result
