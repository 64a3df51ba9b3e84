# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Templating work done once in ansible-playbook's own process instead of once in every node's
worker.

ansible-playbook forks a worker per node for every task; a worker starts from its parent's memory
and what it loads dies with it. The first template of a worker that names one of this collection's
filters has Ansible find that filter by importing every filter file of the collection (and their
module_utils); one naming community.general's dict_kv imports every filter file of
community.general; the first naming a builtin filter or test wraps all the builtin ones. In a
profile of every worker of an 8-node train.yml, that was 0.45 of the 1.48 CPU-s of the root check's
workers (0.017 after). ``warm()`` does that work in the parent, where the action plugins of this
collection are imported before the first fork of their task (the linear and free strategies ask
each action class whether it bypasses the host loop): every later worker inherits it.

Only what the roles' per-node templates import anyway is imported: this collection's filter files,
community.general's, the builtin filter and test wrappers. Failures are ignored: a worker then does
the same work as before."""
from __future__ import annotations

_DONE = []

# This collection's filters (a name that none of its files defines: the lookup imports each filter
# file of the collection, then fails), community.general's dict_kv (the train role's env file checks:
# its lookup imports every filter file of community.general), then the builtin filters and
# tests.
WARM = (
    ("filter", "multinode.training._warm_every_filter_file"),
    ("filter", "community.general.dict_kv"),
    ("filter", "ansible.builtin.combine"),
    ("test", "ansible.builtin.truthy"),
)


def warm():
    """Load the filter and test plugins named by ``WARM`` in this process, once; True when done
    now, False when done before."""
    if _DONE:
        return False
    _DONE.append(True)
    from ansible.plugins import loader

    for kind, name in WARM:
        plugin_loader = getattr(loader, "%s_loader" % kind)
        try:
            plugin_loader.get_with_context(name)
        except Exception:  # pylint: disable=broad-exception-caught
            pass
    return True
