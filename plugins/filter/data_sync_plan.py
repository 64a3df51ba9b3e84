# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter data_sync_plan (data_sync_plan.yml): who sends train_data_sync's files to whom; the logic is
plugins/module_utils/_data/sync.py (plan)."""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.multinode.training.plugins.module_utils._data.sync import plan


def data_sync_plan(needs, items, hosts, addrs, differs=None):
    """{node: [[item, rel]] it lacks} + the manifest's items + the nodes + {node: address} -> the plan."""
    if not isinstance(needs, dict) or not isinstance(items, list) or not isinstance(hosts, (list, tuple)) \
            or not isinstance(addrs, dict):
        got = ", ".join(type(value).__name__ for value in (needs, items, hosts, addrs))
        raise AnsibleFilterError("data_sync_plan expects {node: [[item, rel]]}, a list of items, a list of nodes and "
                                 "{node: address}, got %s" % got)
    missing = [h for h in hosts if h not in addrs]
    if missing:
        raise AnsibleFilterError("data_sync_plan: no address for %s" % ", ".join(missing))
    return plan(items, needs, list(hosts), addrs, differs or {})


class FilterModule:
    """multinode.training data sync filter."""

    def filters(self):
        return {"data_sync_plan": data_sync_plan}
