# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter: nodes whose NCCL fabric differs from the others (see nccl_odd_nodes.yml)."""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.multinode.training.plugins.module_utils._nccl.fabric import odd_nodes


def nccl_odd_nodes(signatures):
    """{node: signature} -> {majority, odd: {node: signature}, groups: {signature: [nodes]}}."""
    if not isinstance(signatures, dict):
        raise AnsibleFilterError("nccl_odd_nodes expects a dict {node: signature}, got %s" % type(signatures).__name__)
    return odd_nodes({str(node): str(sig) for node, sig in signatures.items()})


class FilterModule:
    """multinode.training NCCL filters."""

    def filters(self):
        return {"nccl_odd_nodes": nccl_odd_nodes}
