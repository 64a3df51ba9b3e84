# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Compare the complete installed package sets (name==version) of the nodes' venvs."""
from __future__ import annotations

import re


def canonicalize_name(name):
    """PEP 503's normalized project name ('Foo_Bar.baz' -> 'foo-bar-baz'), as packaging.utils has it: the one
    rule of the collection (requirements, sdist, seed and space take it from here)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_set(specs):
    """['Foo_Bar==1.0', ...] -> {'foo-bar': '1.0'}; a line without '==' keeps an empty version."""
    out = {}
    for spec in specs:
        name, _sep, version = str(spec).partition("==")
        out[canonicalize_name(name.strip())] = version.strip()
    return out


def differences(sets):
    """{node: [name==version]} -> one line per package that is not the same on every node.

    Each line names the package and, grouped by version, the nodes (a missing package is
    "not installed"); the most common state comes last, so the odd node comes first.
    """
    parsed = {node: parse_set(specs) for node, specs in sets.items()}
    names = sorted(set().union(*[set(p) for p in parsed.values()])) if parsed else []
    lines = []
    for name in names:
        groups = {}
        for node in sets:
            groups.setdefault(parsed[node].get(name), []).append(node)
        if len(groups) < 2:
            continue
        ordered = sorted(groups.items(), key=lambda kv: (len(kv[1]), kv[0] is None, kv[0] or ""))
        parts = ["%s on %s" % (("%s==%s" % (name, version)) if version is not None else "not installed",
                               ", ".join(sorted(nodes)))
                 for version, nodes in ordered]
        lines.append("%s: %s" % (name, "; ".join(parts)))
    return lines


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
