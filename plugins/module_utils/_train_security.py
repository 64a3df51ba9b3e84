# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure decisions of the job's security: who runs it, which firewall rule guards its rendezvous port.

Nothing here starts a process or imports Ansible. The filter plugin
``multinode.training.train_run_user``, the probe module ``train_access`` and the
``torchrun`` module call these functions; tests/unit exercises them directly.

The rendezvous rule lives in an nftables table of its own, one per job
(``inet mt_<job>_<hash>``): removing the table removes everything of the job and
touches no other rule of the host. The port is guarded only while the one element
of the set ``guard`` lives: it carries a timeout that the job's keeper refreshes
while the job runs, so a table whose keeper died (host crash, kill -9) stops
guarding the port after ``ttl`` seconds instead of closing it forever.
"""
from __future__ import annotations

import hashlib
import ipaddress
import json
import re

DEFAULT_ACCOUNT = "mtrain"
USERNAME_RE = re.compile(r"^[a-z_][a-z0-9_-]{0,30}\$?$")
TABLE_PREFIX = "mt_"
FIREWALL_CHOICES = ("auto", "true", "false")


class SecurityError(ValueError):
    """A value that cannot work; the message names the variable, the value and what is valid."""


# ---------------------------------------------------------------- user

def decide_user(requested, effective_user, effective_uid, allow_root=False, default_account=DEFAULT_ACCOUNT):
    """Which account runs the job on a node.

    ``requested`` is train_user ("" = decide): when the play runs as root, the dedicated
    account ``default_account`` (created by the role); otherwise the connecting user.
    Returns ``{"user", "create", "drop"}``: ``create`` - the role makes sure the account
    exists (needs root); ``drop`` - the launcher switches from the play's user to it.
    Raises SecurityError for root without allow_root, a name that cannot be an account,
    or another account when the play is not root.
    """
    name = str(requested or "").strip()
    is_root = int(effective_uid) == 0
    if not name:
        name = default_account if is_root else str(effective_user)
    if name == "root" or (name == str(effective_user) and is_root):
        if not allow_root:
            raise SecurityError(
                "train_user=%s: the job (your script and everything it imports) would run as root; "
                "valid: an unprivileged account (empty: %s, created by the role), or train_allow_root: true"
                % (name, default_account))
        return {"user": name, "create": False, "drop": False}
    if not USERNAME_RE.match(name):
        raise SecurityError("train_user=%r: cannot be created, not a valid account name; valid: 1-32 of "
                            "lower-case letters, digits, '_', '-', starting with a letter or '_'" % (name,))
    if not is_root and name != str(effective_user):
        raise SecurityError("train_user=%s: the play runs as %s, which cannot switch to another account; "
                            "valid: %s (or empty), or run the play with become" % (name, effective_user, effective_user))
    return {"user": name, "create": is_root, "drop": is_root}


def check_access(results):
    """``[{"var", "path", "need", "ok", "error"}]`` (what the user could not do) -> problem lines."""
    lines = []
    for item in results:
        if not item.get("ok"):
            lines.append("cannot %s %s=%s (%s)" % (
                {"x": "execute", "r": "read", "w": "write", "rx": "enter"}.get(item["need"], item["need"]),
                item["var"], item["path"], item.get("error") or "permission denied"))
    return lines


# ---------------------------------------------------------------- ports

def parse_sshd_ports(text):
    """``Port`` lines of an sshd_config -> set of ports (22 when there is none)."""
    ports = set()
    for line in (text or "").splitlines():
        match = re.match(r"^\s*Port\s+(\d+)\s*(?:#.*)?$", line, re.IGNORECASE)
        if match:
            ports.add(int(match.group(1)))
    return ports or {22}


def port_problem(port, ssh_ports):
    """A rendezvous port that is ssh's: the job would fail to bind it, a guard rule would lock out ssh."""
    if int(port) in set(int(p) for p in ssh_ports):
        return ("train_rdzv_port=%s: collides with ssh (ports %s on this node); valid: a free port in "
                "1024-65535 other than ssh's, e.g. 29400" % (port, ",".join(str(p) for p in sorted(ssh_ports))))
    return None


# ---------------------------------------------------------------- firewall

def normalize_firewall(value):
    text = str(value).strip().lower()
    if text in ("true", "yes", "on", "1"):
        return "true"
    if text in ("false", "no", "off", "0"):
        return "false"
    if text == "auto":
        return "auto"
    raise SecurityError("train_firewall=%r: valid: auto, true, false" % (value,))


def decide_firewall(requested, nft, iptables, is_root, nft_error=None):
    """Whether this node guards the rendezvous port -> ``{"enabled", "note"}``; SecurityError when it cannot.

    auto: on where ``nft`` exists, works (``nft_error`` is None: a ``nft -c`` of the rule passed)
    and the play is root; otherwise off, and ``note`` says why.
    true: all of that is required (an iptables-only node is told to install nftables).
    """
    mode = normalize_firewall(requested)
    if mode == "false":
        return {"enabled": False, "note": "train_firewall=false: the rendezvous port is open to any host that routes to it"}
    if nft and is_root and not nft_error:
        return {"enabled": True, "note": "nftables table per job guards the rendezvous port"}
    if not nft:
        why = ("only iptables found (%s); the guard rule needs nftables (package nftables)" % iptables) if iptables \
            else "neither nft nor iptables found"
    elif not is_root:
        why = "the play does not run as root (become), which nft needs"
    else:
        why = "nft cannot change the ruleset here (%s; in a container: capability NET_ADMIN)" % nft_error
    if mode == "true":
        raise SecurityError("train_firewall=true: %s; valid: install nftables / run with become, or "
                            "train_firewall=auto|false" % why)
    return {"enabled": False, "note": "train_firewall=auto: off, %s; the rendezvous port is open to any host "
                                      "that routes to it" % why}


def table_name(job_id):
    """nftables table of a job: ``mt_`` + the id's identifier characters + a hash (ids differing in '.' or '-' differ)."""
    text = str(job_id)
    safe = re.sub(r"[^A-Za-z0-9_]", "_", text)[:40]
    return "%s%s_%s" % (TABLE_PREFIX, safe, hashlib.sha256(text.encode()).hexdigest()[:8])


def split_members(addresses):
    """Addresses of the job's nodes -> (IPv4 list, IPv6 list), sorted, duplicates removed."""
    v4, v6 = set(), set()
    for raw in addresses or []:
        text = str(raw).strip().strip("[]")
        try:
            addr = ipaddress.ip_address(text.split("%", 1)[0])
        except ValueError:
            raise SecurityError("firewall member %r: not an IP address; valid: the nodes' addresses" % (raw,))
        (v4 if addr.version == 4 else v6).add(str(addr))
    return sorted(v4, key=ipaddress.ip_address), sorted(v6, key=ipaddress.ip_address)


def guard_elements(ports, ttl):
    """The guard set's elements: each port with the guard's timeout (``ports``: one or a list)."""
    ports = ports if isinstance(ports, (list, tuple)) else [ports]
    if not ports:
        raise SecurityError("no port to guard")
    return ", ".join("%d timeout %ds" % (int(port), int(ttl)) for port in sorted(set(int(p) for p in ports)))


def render_table(table, port, members, ttl):
    """nft script (for ``nft -f -``) that (re)creates the job's table in one transaction.

    Only the job's ports are touched (``port``: the rendezvous port, or a list with the
    watchers' hub port too): members and loopback pass (other chains of the host still
    apply), every other source gets a TCP reset. Nothing else of the host changes.
    """
    v4, v6 = split_members(members)
    lines = ["add table inet %s" % table, "delete table inet %s" % table, "table inet %s {" % table]
    for name, kind, items in (("members4", "ipv4_addr", v4), ("members6", "ipv6_addr", v6)):
        elements = " elements = { %s };" % ", ".join(items) if items else ""
        lines.append("  set %s { type %s;%s }" % (name, kind, elements))
    lines += [
        "  set guard { type inet_service; flags timeout; elements = { %s }; }" % guard_elements(port, ttl),
        "  chain input {",
        "    type filter hook input priority -5; policy accept;",
        '    iifname "lo" accept',
        "    tcp dport @guard ip saddr @members4 accept",
        "    tcp dport @guard ip6 saddr @members6 accept",
        "    tcp dport @guard counter reject with tcp reset",
        "  }",
        "}",
    ]
    return "\n".join(lines) + "\n"


def render_refresh(table, port, ttl):
    """Renew the guard's timeout (one transaction: never a moment without the guard)."""
    return "flush set inet %s guard\nadd element inet %s guard { %s }\n" % (table, table, guard_elements(port, ttl))


def render_delete(table):
    """Remove the job's table; succeeds whether or not it exists."""
    return "add table inet %s\ndelete table inet %s\n" % (table, table)


def parse_tables(text):
    """``nft -j list tables`` -> [(family, name)]."""
    if not (text or "").strip():
        return []
    data = json.loads(text)
    return [(item["table"]["family"], item["table"]["name"])
            for item in data.get("nftables", []) if "table" in item]


def job_tables(tables, job_id=None):
    """Tables the launcher made (all jobs, or the one of ``job_id``)."""
    wanted = table_name(job_id) if job_id else None
    return [name for family, name in tables
            if family == "inet" and name.startswith(TABLE_PREFIX) and (wanted is None or name == wanted)]
