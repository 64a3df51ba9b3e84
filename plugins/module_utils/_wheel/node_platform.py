# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nodes' platform for pip: which wheel platform tags every node runs.

Pure functions on the nodes' facts (``multinode_training_platform`` of module node_facts: the machine
from ``uname`` and the glibc from ``confstr``, both without a subprocess). The lock step
(_wheel/lock.py) passes the tags to pip's resolution and download as ``--platform``; the check of a
wheel built from an sdist (_wheel/sdist.py) reads the same facts.
"""
from __future__ import annotations

import re

from ansible_collections.multinode.training.plugins.module_utils._wheel.tags import LEGACY_MANYLINUX

# PEP 600's legacy aliases, by the glibc each stands for (_wheel/tags.py's table): glibc -> the old name.
LEGACY = {glibc: name for name, glibc in LEGACY_MANYLINUX.items()}
# The oldest manylinux_2_X a platform has (packaging.tags: 2_5 on x86, 2_17 elsewhere, where
# manylinux2014 was the first policy).
OLDEST = {"x86_64": 5, "i686": 5}
OLDEST_OTHER = 17


class PlatformError(Exception):
    """The nodes' facts give no one platform; the message names the nodes."""


def glibc_tuple(text):
    """'2.36' -> (2, 36); None for anything else (a musl node, no fact)."""
    match = re.match(r"^\s*(\d+)\.(\d+)", str(text or ""))
    return (int(match.group(1)), int(match.group(2))) if match else None


def nodes_platform(nodes):
    """{node: {machine, glibc}} -> {arch, glibc, lowest: [nodes with the lowest glibc]}; None without nodes.

    Raises PlatformError naming the nodes: several machine archs, or a node without a glibc version.
    """
    if not nodes:
        return None
    by_arch, no_glibc = {}, []
    for node in sorted(nodes):
        facts = nodes[node] or {}
        by_arch.setdefault(facts.get("machine") or "unknown", []).append(node)
        if glibc_tuple(facts.get("glibc")) is None:
            no_glibc.append("%s (%s)" % (node, facts.get("glibc") or "none reported"))
    problems = []
    if len(by_arch) > 1:
        problems.append("nodes of %d machine archs: %s; valid: job requirements resolved for one arch, every node "
                        "of the play the same" % (len(by_arch), "; ".join(
                            "%s on %s" % (arch, ", ".join(names)) for arch, names in sorted(by_arch.items()))))
    if no_glibc:
        problems.append("no glibc version on %s; valid: glibc-based Linux nodes (manylinux wheels)"
                        % ", ".join(no_glibc))
    if problems:
        raise PlatformError("; ".join(problems))
    arch = next(iter(by_arch))
    lowest = min(glibc_tuple(nodes[n]["glibc"]) for n in nodes)
    return {"arch": arch, "glibc": "%d.%d" % lowest,
            "lowest": sorted(n for n in nodes if glibc_tuple(nodes[n]["glibc"]) == lowest)}


def platform_tags(arch, glibc):
    """Every platform tag a node of this arch and glibc runs, most specific first.

    pip's ``--platform`` takes each tag literally (it expands manylinux2014/2010 to the older legacy
    names, never manylinux_2_X to older glibcs), so every one is listed: manylinux_2_<minor> down to the
    oldest of the arch, each legacy alias beside its glibc, then linux_<arch> (a wheel built here, not
    repaired by auditwheel).

    >>> platform_tags("x86_64", "2.17")[:3]
    ['manylinux_2_17_x86_64', 'manylinux2014_x86_64', 'manylinux_2_16_x86_64']
    """
    version = glibc_tuple(glibc)
    if version is None or version[0] != 2:
        raise PlatformError("glibc=%s: not a glibc 2.X version; valid: glibc 2.X" % glibc)
    tags = []
    for minor in range(version[1], OLDEST.get(arch, OLDEST_OTHER) - 1, -1):
        tags.append("manylinux_2_%d_%s" % (minor, arch))
        legacy = LEGACY.get((2, minor))
        if legacy and (legacy == "manylinux2014" or arch in OLDEST):
            tags.append("%s_%s" % (legacy, arch))
    tags.append("linux_%s" % arch)
    return tags


def platform_args(tags):
    """pip's argv for the tags: ``--platform <tag>`` each."""
    args = []
    for tag in tags:
        args.extend(["--platform", tag])
    return args
