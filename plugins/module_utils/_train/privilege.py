# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which steps of a run need root on a node, named before any work.

playbooks/train.yml writes on the nodes: the venv and the node folder of the wheels (tag prepare), the NCCL
env file (tag nccl), the job's code and logs (role train). A play connected as a user without
``become`` can do only what that user may write. Its first task (module node_facts, option
``writes``) reports, for each path the selected steps write, the directory that keeps the connecting
user from writing it (``write_blockers``, on the node; nothing for root); ``root_needed`` (filter
``train_root_needed``) turns every node's answer into one refusal that names the nodes, the user,
each path with its variable and tag, and the ways out, before the first step touches a node.
"""
from __future__ import annotations

import os

from ansible_collections.multinode.training.plugins.module_utils._train.account import nodes_text


def write_blocker(path):
    """The existing directory (or file) that keeps this process from writing ``path``: the path itself
    where it exists, else its nearest existing ancestor; "" when nothing does."""
    probe = os.path.normpath(path)
    while not os.path.lexists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    if os.path.isdir(probe):
        ok = os.access(probe, os.W_OK | os.X_OK)
    else:
        ok = os.access(probe, os.W_OK)
    return "" if ok else probe


def write_blockers(paths, euid=None):
    """{path: write_blocker(path)} for this process; {} for root (it writes anything)."""
    if (os.geteuid() if euid is None else euid) == 0:
        return {}
    return {path: write_blocker(path) for path in paths if path}


def tags_selected(tags, run_tags, skip_tags):
    """Whether a task with ``tags`` runs under ``--tags run_tags --skip-tags skip_tags`` (Ansible's
    ansible_run_tags / ansible_skip_tags; untagged: no tags)."""
    tags = set(tags or [])
    if "always" in tags and "always" not in set(skip_tags or []):
        return True
    if tags & set(skip_tags or []):
        return False
    run = set(run_tags or ["all"])
    if "all" in run:
        return True
    if "tagged" in run and tags:
        return True
    if "untagged" in run and not tags:
        return True
    return bool(tags & run)


def _entry_text(write, blocker):
    value = write.get("value") or write["path"]
    name = "%s=%s" % (write["var"], value) if write.get("var") else "%s %s" % (write.get("what", ""), value)
    return "%s (tag %s: %s is not writable)" % (name.strip(), write["tags"][0], blocker)


def root_needed(nodes, writes, run_tags=None, skip_tags=None):
    """Every node's facts and the run's writes -> the refusal ("" when the connecting user can do it all).

    ``nodes``: {node: facts}, facts with ``user_id`` (as in ansible_facts; or ``ansible_user_id``) and ``multinode_training_writes`` ({path:
    blocker}, module node_facts; {} or absent as root). ``writes``: [{path (checked), value (shown with
    var, default path), var (the variable that sets it, "" for a fixed path), what (the fixed path's
    purpose), tags (the step's tags, the first named), on (false: the step does not run in this
    play)}]."""
    active = [w for w in writes or [] if w.get("on", True) and w.get("path")
              and tags_selected(w.get("tags"), run_tags, skip_tags)]
    groups = {}
    for node in sorted(nodes or {}):
        facts = nodes[node] or {}
        blockers = facts.get("multinode_training_writes") or {}
        blocked = tuple((i, blockers[w["path"]]) for i, w in enumerate(active) if blockers.get(w["path"]))
        if blocked:
            user = facts.get("user_id") or facts.get("ansible_user_id") or "?"
            groups.setdefault((user, blocked), []).append(node)
    problems = []
    for (user, blocked), where in groups.items():
        entries = [_entry_text(active[i], blocker) for i, blocker in blocked]
        steps = [active[i] for i, _blocker in blocked]
        tags = []
        for step in steps:
            if step["tags"][0] not in tags:
                tags.append(step["tags"][0])
        own = sorted({step["var"] for step in steps if step["var"] in ("train_code_dir", "train_log_dir")})
        outs = ["root through sudo: -b on the command line, or ansible_become: true in the inventory "
                "(beside a hostfile: group_vars/train.yml)"]
        skip = [t for t in tags if t in ("prepare", "nccl")]
        if skip:
            outs.append("--skip-tags %s on nodes a root run prepared" % ",".join(skip))
        if own:
            outs.append("%s in a directory %s can write" % (" and ".join(own), user))
        problems.append("ansible_become=false: %s on %s cannot write what this run writes there: %s; valid: %s"
                        % (user, nodes_text(where), ", ".join(entries), ", or ".join(outs)))
    return " | ".join(problems)
