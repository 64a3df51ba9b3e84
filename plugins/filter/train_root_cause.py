# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter: the root cause of a failed job across its nodes (see train_root_cause.yml)."""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.multinode.training.plugins.module_utils._torchrun import cross_node_root_cause


def train_root_cause(results, node_errors=None):
    """{node: torchrun result} + {failed node: error line} -> {root, line}."""
    if not isinstance(results, dict) or not isinstance(node_errors or {}, dict):
        raise AnsibleFilterError("train_root_cause expects {node: result} and {node: error line}, got %s and %s"
                                 % (type(results).__name__, type(node_errors).__name__))
    return cross_node_root_cause(results, node_errors)


class FilterModule:
    """multinode.training job report filter."""

    def filters(self):
        return {"train_root_cause": train_root_cause}
