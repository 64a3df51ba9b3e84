# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter: compare the nodes' preflight probes (see train_preflight_problems.yml)."""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.multinode.training.plugins.module_utils._train.preflight import compare


def train_preflight_problems(probes, hosts, first, venv="", require_deepspeed=True, interface="", deepspeed_config=None,
                             allow_jit=False):
    """{node: train_node (probe) result} -> problem lines."""
    if not isinstance(probes, dict):
        raise AnsibleFilterError("train_preflight_problems expects {node: train_node (probe) result}, got %s"
                                 % type(probes).__name__)
    return compare(probes, list(hosts), first, venv, bool(require_deepspeed), interface or "",
                   dict(deepspeed_config or {}), bool(allow_jit))


class FilterModule:
    """multinode.training preflight filter."""

    def filters(self):
        return {"train_preflight_problems": train_preflight_problems}
