# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Compare the complete installed package sets (name==version) of the nodes' venvs: with each other
(``differences``, in _node/preflight.py: preflight compares the nodes with it on every launcher) and with
a lock (``lock_differences``)."""
from __future__ import annotations

from ansible_collections.multinode.training.plugins.module_utils._node.preflight import parse_set


# What a fresh venv holds before anything is installed into it (python -m venv seeds pip, and
# setuptools before Python 3.12): not part of a lock, never counted as extra.
VENV_SEED = ("pip", "setuptools")


def lock_differences(installed, lock, seed=VENV_SEED):
    """[name==version] installed in a venv, [name==version] of its lock -> one line per package that differs.

    Every package of the lock must be installed at the locked version; a package installed but not in
    the lock is extra (the venv's seed packages excepted, unless the lock pins them). Empty: the venv
    holds exactly the lock.
    """
    have, want = parse_set(installed), parse_set(lock)
    lines = []
    for name in sorted(set(have) | set(want)):
        if name not in want:
            if name not in seed:
                lines.append("%s==%s installed, not in the lock" % (name, have[name]))
        elif name not in have:
            lines.append("%s: the lock has %s, not installed" % (name, want[name]))
        elif have[name] != want[name]:
            lines.append("%s: the lock has %s, installed %s" % (name, want[name], have[name]))
    return lines
