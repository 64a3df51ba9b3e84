# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters: compare the nodes' preflight probes, and the DeepSpeed config whose ops preflight checks (see
train_preflight_problems.yml, train_deepspeed_config.yml)."""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.multinode.training.plugins.module_utils._node.preflight import compare
from ansible_collections.multinode.training.plugins.module_utils._train.ds_ops import job_deepspeed_config


def train_deepspeed_config(config):
    """The role's {text, path} or {accelerate, accelerate_path, code_src} -> {text, path, label}, {problem} or {}."""
    if not isinstance(config, dict):
        raise AnsibleFilterError("train_deepspeed_config expects a dict, got %s" % type(config).__name__)
    return job_deepspeed_config(config)


def train_preflight_problems(probes, hosts, first, venv="", require_deepspeed=True, interface="", deepspeed_config=None,
                             allow_jit=False):
    """{node: train_node (probe) result} -> problem lines."""
    if not isinstance(probes, dict):
        raise AnsibleFilterError("train_preflight_problems expects {node: train_node (probe) result}, got %s"
                                 % type(probes).__name__)
    return compare(probes, list(hosts), first, venv, bool(require_deepspeed), interface or "",
                   job_deepspeed_config(deepspeed_config), bool(allow_jit))


class FilterModule:
    """multinode.training preflight filters."""

    def filters(self):
        return {"train_preflight_problems": train_preflight_problems, "train_deepspeed_config": train_deepspeed_config}
