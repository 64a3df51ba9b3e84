# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure decisions of the job's security: who runs it, which firewall rule guards its rendezvous port.

Nothing here starts a process or imports Ansible. The filter plugin
``multinode.training.train_run_user``, the probe module ``train_node`` (step access) and the
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
import posixpath
import re

from ansible_collections.multinode.training.plugins.module_utils._node.preflight import MISSING_HINTS

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


VERBS = {"x": "execute", "r": "read", "w": "write", "rx": "enter", "wx": "write into"}
KINDS = {"file": "regular file", "dir": "directory"}
# What is valid, per variable: where the account cannot reach an existing path, and where the path is missing.
REACH_HINTS = {
    "train_python": "a venv the account can enter and run (group or mode; the one multinode.training."
                    "wheel_distribute installs is)",
    "train_script": "a file the account can read (group or mode), or train_code_src to copy it into train_code_dir",
    "train_chdir": "a directory the account can enter (group or mode), or empty (the directory of "
                   "train_script)",
    "train_code_dir": "a train_code_dir whose parent directories the account can enter (group or mode)",
    "train_data_paths": "paths the account can read (a directory: enter and list; group or mode), or "
                        "train_user=<an account that can>",
    "train_checkpoint_dir": "a directory the account can write into (group or mode; it is used as it is), "
                            "or a path that does not exist yet (made on every node, owned by the account)",
}
REACH_HINTS["train_venv"] = REACH_HINTS["train_python"]


def inside(path, directory):
    """``path`` relative to ``directory`` ("" for the directory itself), or None where it lies outside
    (lexically: both are absolute paths on the node, normalised, links not resolved)."""
    if not path or not directory:
        return None
    path, directory = posixpath.normpath(path), posixpath.normpath(directory)
    if path == directory:
        return ""
    prefix = directory.rstrip("/") + "/"
    return path[len(prefix):] if path.startswith(prefix) else None


def _copied(path, kind, code_dir, files):
    """Whether train_code_src's copy gives path (a file, or a directory with files below it): any path
    below code_dir when the copy's files are not known here (files None)."""
    rel = inside(path, code_dir)
    if rel is None:
        return False
    if files is None or rel == "":
        return True
    if kind == "dir":
        return any(name.startswith(rel + "/") for name in files)
    return rel in files


def job_checks(job, manifest=None):
    """Every path the job opens on a node, and who opens it -> checks
    ``[{"var", "path", "need", "kind", "who", "provided", "missing"}]``.

    ``job``: ``python``, ``venv``, ``script`` (empty: a module job), ``chdir`` (empty: the log
    directory, which the step makes), ``env_files`` (``[{var, path}]``), ``configs`` (``{variable:
    controller path}`` of the accelerate / DeepSpeed configs, which travel into ``code_dir``),
    ``code_dir``, ``sync_code``, ``data`` (train_data_paths: read by the account, a file or a
    directory, ``kind`` any), ``checkpoint_dir`` (written into by the account where it exists: the
    step leaves an existing one as it is, makes a missing one), ``refuse_missing`` (preflight
    follows on this node: a missing path is refused here, before the code is copied; otherwise it
    is left to the launcher's own check).
    ``manifest``: the relative paths train_code_src gives train_code_dir (filter code_manifest), or
    None where they are not known here (then everything below train_code_dir counts as the copy's).

    ``need``: x, r, rx, wx as for ``os.access``; ``kind``: file, dir or any (``need`` r, rx once found to be
    a directory); ``who``: account (the job's, which
    runs the script) or self (the module's user, root under become: it reads the env files for the job,
    which need not be the account's); ``provided``: the copy makes it (train_code_src set, a path of the
    manifest below train_code_dir, or train_code_dir itself, which this step gives the account) - nothing
    to check now; ``missing``: refuse (a missing path is a problem) or skip.
    """
    code_dir = job.get("code_dir") or ""
    sync = bool(job.get("sync_code"))
    files = None if manifest is None else set(manifest)
    missing = "refuse" if job.get("refuse_missing") else "skip"

    def provided(path, kind):
        return sync and _copied(path, kind, code_dir, files)

    def check(var, path, need, kind, who="account", made=None, policy=None):
        return {"var": var, "path": path, "need": need, "kind": kind, "who": who,
                "provided": provided(path, kind) if made is None else made, "missing": policy or missing}

    configs = [(var, posixpath.join(code_dir, posixpath.basename(src)))
               for var, src in sorted((job.get("configs") or {}).items()) if src]
    checks = []
    if job.get("python"):
        checks.append(check("train_python", job["python"], "x", "file"))
    if code_dir and (sync or configs):
        # the way to train_code_dir; a missing part is made by this step (root's, 0755)
        checks.append(check("train_code_dir", posixpath.dirname(posixpath.normpath(code_dir)), "rx", "dir",
                            made=False, policy="skip"))
    if job.get("script"):
        checks.append(check("train_script", job["script"], "r", "file"))
    if job.get("chdir"):
        checks.append(check("train_chdir", job["chdir"], "rx", "dir"))
    for path in job.get("data") or []:
        checks.append(check("train_data_paths", path, "r", "any",
                            made=provided(path, "file") or provided(path, "dir")))
    if job.get("checkpoint_dir"):
        checks.append(check("train_checkpoint_dir", job["checkpoint_dir"], "wx", "dir", made=False, policy="skip"))
    for var, path in configs:  # copied by preflight into train_code_dir (sync.yml)
        checks.append(check(var, path, "r", "file", made=True))
    for entry in job.get("env_files") or []:
        checks.append(check(entry.get("var") or "train_env_files", entry.get("path"), "r", "file", who="self",
                            made=False))
    return checks


def venv_checks(python, venv, has_cfg, site_dirs):
    """What the venv of ``python`` (``<venv>/bin/python``) needs from the account that runs it: its
    ``pyvenv.cfg`` (read at start: unreadable, python silently leaves the venv and its packages) and
    its site-packages (entered). Named train_venv where ``venv`` is that directory, else train_python;
    ``part_of``: only worth saying where train_python itself could be run."""
    root = posixpath.dirname(posixpath.dirname(posixpath.normpath(python)))
    if not has_cfg:
        return []
    var = "train_venv" if venv and posixpath.normpath(venv) == root else "train_python"
    out = [{"var": var, "path": posixpath.join(root, "pyvenv.cfg"), "need": "r", "kind": "file"}]
    out += [{"var": var, "path": path, "need": "rx", "kind": "dir"} for path in sorted(site_dirs)]
    for item in out:
        item.update(who="account", provided=False, missing="skip", part_of="train_python")
    return out


def path_problems(results):
    """What the module's own user found (``results``: the checks with ``state`` - missing, file, dir,
    other or unknown (stat refused, e.g. root on a root-squashed mount) - and, for ``who`` self,
    ``ok`` and ``error``) -> problem lines: a missing path or one of another kind where the check
    refuses it (``missing`` refuse), a file the module's user cannot read. A provided path is the copy's."""
    lines = []
    for item in results:
        if item.get("provided"):
            continue
        var, path, state = item["var"], json.dumps(item["path"]), item.get("state")
        if state == "missing":
            if item.get("missing") == "refuse":
                lines.append("%s=%s: missing on this node; valid: %s"
                             % (var, path, MISSING_HINTS.get(var, "an existing path on every node")))
        elif state in ("file", "dir", "other") and item.get("kind") != "any" and state != item.get("kind"):
            if item.get("missing") == "refuse":
                lines.append("%s=%s: not a %s on this node; valid: %s"
                             % (var, path, KINDS.get(item.get("kind"), item.get("kind")),
                                MISSING_HINTS.get(var, "an existing path on every node")))
        elif item.get("who") == "self" and item.get("ok") is False:
            lines.append("%s=%s: cannot be read on this node by %s, which reads it for the job (%s); valid: %s"
                         % (var, path, item.get("reader") or "the play's user", item.get("error") or
                            "Permission denied", "a file the play's user can read (mode 0600 is fine: "
                            "the account of the job need not read it)"))
    return lines


def account_problems(user, results):
    """``[{"var", "path", "need", "ok", "error", "part_of"}]`` (checked as the account ``user``) ->
    problem lines naming account, variable and path: ``train_user=<user>: cannot <verb> <var>=<path>
    (<why>); valid: ...``. A check that is ``part_of`` a variable already refused (its python, or another
    part of its venv) is not repeated."""
    lines, refused = [], set()
    for item in results:
        if item.get("ok") or item.get("part_of") in refused:
            continue
        refused.update(name for name in (item["var"], item.get("part_of")) if name)
        lines.append("train_user=%s: cannot %s %s=%s (%s); valid: %s" % (
            user, VERBS.get(item["need"], item["need"]), item["var"], item["path"],
            item.get("error") or "Permission denied",
            REACH_HINTS.get(item["var"], "paths the account can reach (group or mode)")))
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
