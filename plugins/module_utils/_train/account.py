# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The job's account across the nodes: one uid everywhere.

The role creates its account (``mtrain``) as a system account on each node where it is missing. Left to
``useradd -r``, each node picks its own free uid, and nodes installed differently pick different ones:
the job's files on shared storage (checkpoints, data, code) then belong to another uid on some nodes.
So every node reports the account and the system uids in use (``account_facts``, through module
node_facts), the controller decides one uid (``decide_uid``), and the security step creates the account
with it where it is missing (_train.access: ``useradd -u``) - or refuses the play, naming the nodes, where
the account's uids differ already or its uid is taken there by another account.
"""
from __future__ import annotations

import pwd

from ansible_collections.multinode.training.plugins.module_utils._train.security import DEFAULT_ACCOUNT

LOGIN_DEFS = "/etc/login.defs"
# useradd's own defaults where login.defs names no range (shadow's SYS_UID_MIN / SYS_UID_MAX)
SYS_UID_MIN, SYS_UID_MAX = 101, 999


def sys_uid_range(text):
    """login.defs text -> (SYS_UID_MIN, SYS_UID_MAX), useradd's defaults for what it does not set."""
    found = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] in ("SYS_UID_MIN", "SYS_UID_MAX") and parts[1].isdigit():
            found[parts[0]] = int(parts[1])
    return found.get("SYS_UID_MIN", SYS_UID_MIN), found.get("SYS_UID_MAX", SYS_UID_MAX)


def account_facts(name, entries, login_defs_text):
    """This node's view of the job's account -> {name, uid (None: missing), used, sys_uid_min, sys_uid_max}.

    ``name``: train_user ('' = the role's own account); ``entries``: (name, uid) of every account the node
    resolves (pwd.getpwall); ``used``: the system-range uids other accounts hold."""
    name = str(name or "").strip() or DEFAULT_ACCOUNT
    low, high = sys_uid_range(login_defs_text)
    uid = next((u for n, u in entries if n == name), None)
    used = sorted(set(u for n, u in entries if n != name and low <= u <= high))
    return {"name": name, "uid": uid, "used": used, "sys_uid_min": low, "sys_uid_max": high}


def node_account_facts(name, login_defs=LOGIN_DEFS):
    """``account_facts`` read on this node."""
    try:
        with open(login_defs) as handle:
            text = handle.read()
    except (IOError, OSError):
        text = ""
    return account_facts(name, [(entry.pw_name, entry.pw_uid) for entry in pwd.getpwall()], text)


def nodes_text(nodes):
    return ", ".join(nodes[:8]) + (", ..." if len(nodes) > 8 else "")


def decide_uid(accounts, create):
    """Every node's ``account_facts`` ({node: facts}) -> {uid, error}: the uid the account has or gets on
    every node (None: nothing to create), or the refusal ('' when none).

    Where the account exists, its uid must be the same on every node. Where it is missing and the role
    creates it (``create``), it gets that uid, which must be free there; where it exists nowhere, the
    highest system uid free on every node (as ``useradd -r`` picks on one)."""
    accounts = {node: facts for node, facts in (accounts or {}).items() if facts}
    if not accounts:
        return {"uid": None, "error": ""}
    name = next(iter(accounts.values()))["name"]
    by_uid = {}
    for node, facts in accounts.items():
        if facts.get("uid") is not None:
            by_uid.setdefault(facts["uid"], []).append(node)
    if len(by_uid) > 1:
        return {"uid": None, "error": "train_user=%s: its uid differs between the nodes (%s): the job's "
                "files on shared storage would belong to another account on some; valid: the same uid on every "
                "node (usermod -u on the others), or train_user=<an account with one uid everywhere, such as "
                "your own login>" % (name, "; ".join("uid %d on %s" % (uid, nodes_text(sorted(nodes)))
                                                     for uid, nodes in sorted(by_uid.items())))}
    missing = sorted(node for node, facts in accounts.items() if facts.get("uid") is None)
    if not missing or not create:
        return {"uid": next(iter(by_uid), None), "error": ""}
    if by_uid:
        uid = next(iter(by_uid))
        taken = [node for node in missing if uid in accounts[node].get("used", [])]
        if taken:
            holders = nodes_text(sorted(by_uid[uid]))
            return {"uid": None, "error": "train_user=%s: has uid %d on %s, which another account holds on %s, where "
                    "the role would create it; valid: the uid free on those nodes, or train_user=<an existing "
                    "account with one uid everywhere>" % (name, uid, holders, nodes_text(taken))}
        return {"uid": uid, "error": ""}
    low = max(facts.get("sys_uid_min", SYS_UID_MIN) for facts in accounts.values())
    high = min(facts.get("sys_uid_max", SYS_UID_MAX) for facts in accounts.values())
    used = set(u for facts in accounts.values() for u in facts.get("used", []))
    free = [uid for uid in range(high, low - 1, -1) if uid not in used]
    if not free:
        return {"uid": None, "error": "train_user=%s: no system uid (%d-%d) is free on every node; valid: create "
                "the account with one uid on every node, or train_user=<an existing account>" % (name, low, high)}
    return {"uid": free[0], "error": ""}
