# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter: packages whose version differs between the nodes' venvs (see package_set_diff.yml)."""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.multinode.training.plugins.module_utils._package_set import differences


def package_set_diff(sets):
    """{node: [name==version]} -> ['pkg: pkg==1 on node2; not installed on node1', ...]."""
    if not isinstance(sets, dict):
        raise AnsibleFilterError("package_set_diff expects a dict {node: [name==version]}, got %s"
                                 % type(sets).__name__)
    return differences({str(node): [str(s) for s in specs or []] for node, specs in sets.items()})


class FilterModule:
    """multinode.training package set filters."""

    def filters(self):
        return {"package_set_diff": package_set_diff}
