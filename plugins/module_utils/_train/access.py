# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Module train_node (access)'s work on a node: the job's security step in one round trip.

``access`` does, in order: the ports and the firewall tool (what needs no account); the job's
account - resolved, or, when it is missing and the role creates it (``create``) and nothing stands
in the way so far, created (``useradd_argv``: a system account with a home and no login shell, its
group train_group's, in those of the wanted supplementary groups that exist); what the account
must reach, checked as the account (``access_as``): every path the job opens (``job``: train_python
and its venv, train_script, train_chdir, the env files - these as the module's user, which reads them
for the job -, the config files; ``_train.security.job_checks`` decides which, and which of them the
code copy provides), a missing one refused before the account is created where preflight follows
(``refuse_missing``: nothing is copied on a refusing run); then, only when nothing stands in the way, the
listener of preflight's reachability check (first node; ``_train_listener``), the account's
directories (``ensure_directory``: changed only when created or when owner or mode differ), the proof
that train_checkpoint_dir is shared by every node (``shared``: _train.shared, as the account) and,
when preflight follows, its probe (``_node.preflight.probe_node``: the job's python, script, code,
env files and the TCP connect to the listener) - a launch's whole security step and preflight
probe in one round trip per node.
Problems are lines naming the variable (``<variable>=<value>: what is wrong; valid: ...``); the
pure decisions are _train.security's.
"""
from __future__ import annotations

import errno
import glob
import grp
import inspect
import json
import os
import pwd
import select
import stat
import subprocess
import sys
import tempfile

from ansible_collections.multinode.training.plugins.module_utils._node.torchrun import job_memlock, memlock_warning
from ansible_collections.multinode.training.plugins.module_utils._train import listener as _train_listener
from ansible_collections.multinode.training.plugins.module_utils._train import shared as _train_shared
from ansible_collections.multinode.training.plugins.module_utils._node.preflight import CONNECT_TIMEOUT
from ansible_collections.multinode.training.plugins.module_utils._train.preflight import probe_node
from ansible_collections.multinode.training.plugins.module_utils._train.security import (
    SecurityError,
    account_problems,
    decide_firewall,
    job_checks,
    parse_sshd_ports,
    path_problems,
    port_problem,
    render_table,
    table_name,
    venv_checks,
)

MODES = {"x": os.X_OK, "r": os.R_OK, "rx": os.R_OK | os.X_OK, "w": os.W_OK, "wx": os.W_OK | os.X_OK}
NOLOGIN = "/usr/sbin/nologin"
# Where a created account's home goes: the node's own disk (useradd -d), as Debian's system accounts.
HOME_DIR = "/var/lib"


def _why(path):
    """Why a path cannot be used (as the current process): the error of stat, or None."""
    try:
        os.stat(path)
    except OSError as exc:
        return exc.strerror
    return None


def _probe(checks):
    return [(os.access(c["path"], MODES[c["need"]]), _why(c["path"])) for c in checks]


def path_state(path):
    """What ``path`` is for this process: file, dir, other, missing, or unknown (stat refused it:
    root on a root-squashed mount - the account's own check decides)."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        return "missing" if exc.errno in (errno.ENOENT, errno.ENOTDIR) else "unknown"
    if stat.S_ISREG(mode):
        return "file"
    return "dir" if stat.S_ISDIR(mode) else "other"


def venv_layout(python):
    """The venv of ``<venv>/bin/python`` on this node -> (it has a pyvenv.cfg, its site-packages dirs)."""
    root = os.path.dirname(os.path.dirname(os.path.normpath(python)))
    has_cfg = os.path.isfile(os.path.join(root, "pyvenv.cfg"))
    sites = {}
    for path in sorted(glob.glob(os.path.join(root, "lib*", "python*", "site-packages")) if has_cfg else []):
        if os.path.isdir(path):
            sites.setdefault(os.path.realpath(path), path)  # lib64 is often a link to lib
    return has_cfg, sorted(sites.values())


def code_manifest(job, probe):
    """The relative paths of train_code_src (``job``'s ``manifest``, else the probe's code manifest),
    or None where this call does not know them."""
    if job.get("manifest") is not None:
        return list(job["manifest"])
    code = (probe or {}).get("code") or {}
    return list(code["manifest"]) if code.get("manifest") is not None else None


def as_account(account, fn):
    """``fn()`` (its result JSON) in a child that switched to the account -> that result, None when the
    child gave none; in this process when it runs as the account already, or not as root."""
    if os.geteuid() == account["uid"] or os.geteuid() != 0:
        return fn()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os.close(read_fd)
        try:
            os.setgroups(account["groups"])
            os.setgid(account["gid"])
            os.setuid(account["uid"])
            os.write(write_fd, json.dumps(fn()).encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    chunks = []
    while True:
        chunk = os.read(read_fd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read_fd)
    os.waitpid(pid, 0)
    data = b"".join(chunks)
    return json.loads(data) if data else None


def access_as(account, checks):
    """Run os.access for every check as the account -> [(ok, error)]."""
    out = as_account(account, lambda: _probe(checks))
    return out if out is not None else [(False, "check failed") for _c in checks]


def lookup(user, group):
    """-> (user exists, group exists, account or None). The account (both exist): uid, gid,
    supplementary groups, group names, home."""
    group_exists, gid = True, None
    if group:
        try:
            gid = grp.getgrnam(group).gr_gid
        except KeyError:
            group_exists = False
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return False, group_exists, None
    if not group_exists:
        return True, False, None
    gid = entry.pw_gid if gid is None else gid
    groups = sorted(set(os.getgrouplist(entry.pw_name, gid)))
    return True, True, {"name": entry.pw_name, "uid": entry.pw_uid, "gid": gid, "groups": groups,
                        "group_names": sorted(g.gr_name for g in grp.getgrall() if g.gr_gid in groups),
                        "home": entry.pw_dir}


def account_problem(user, group, exists, group_exists, create):
    """The account's verdict -> a problem line or None. A missing account is fine when the role
    creates it (``create``) and its group exists; an existing one needs its group too."""
    if exists and group_exists:
        return None
    if not exists and create:
        if group and not group_exists:
            return ("train_user=%s (train_group=%s): cannot be created, there is no group %s on this node; "
                    "valid: an existing group, or empty train_group (the account's own)" % (user, group, group))
        return None
    return ("train_user=%s (train_group=%s): no such account or group on this node; valid: an existing account "
            "(empty train_user: the role creates mtrain)" % (user, group or ""))


def useradd_argv(useradd, user, group, groups, own_group_exists, uid=None):
    """The command that creates the job's account, as ansible.builtin.user does for ``system: true,
    shell: /usr/sbin/nologin, create_home: true``: ``-g train_group`` when one is given, else the
    account's own group - unless a group of that name exists already (``own_group_exists``), where
    useradd would fail to create it: ``-N``, the default group, as ansible.builtin.user does; ``-G``
    the supplementary groups (those that exist); ``-u`` the uid the account has on every node
    (_train.account); its home under /var/lib (HOME_DIR), on the node's own disk, never in a /home that
    may be shared storage (NFS with root_squash refuses root's mkdir there)."""
    argv = [useradd]
    if uid is not None:
        argv += ["-u", str(int(uid))]
    if group:
        argv += ["-g", group]
    elif own_group_exists:
        argv.append("-N")
    if groups:
        argv += ["-G", ",".join(groups)]
    return argv + ["-s", NOLOGIN, "-d", os.path.join(HOME_DIR, user), "-m", "-r", user]


def create_account(user, group, groups, run_command, get_bin_path, uid=None):
    """Create the job's account (``useradd_argv``) -> None, or why it could not be created."""
    useradd = get_bin_path("useradd")
    if not useradd:
        return "no useradd on this node"
    try:
        grp.getgrnam(user)
        own_group_exists = True
    except KeyError:
        own_group_exists = False
    rc, out, err = run_command(useradd_argv(useradd, user, group, groups, own_group_exists, uid))
    if rc == 0:
        return None
    lines = (err or out or "").strip().splitlines()
    return lines[-1].strip() if lines else "useradd exited %d" % rc


def ensure_directory(path, uid, gid, mode, check_mode=False, keep_existing=False):
    """Like ansible.builtin.file state=directory with owner, group and mode -> changed (bool).

    Missing parents are created too (root's, 0755). SecurityError when ``path`` exists and is
    not a directory. ``keep_existing``: a directory that exists is the user's, left as it is
    (train_checkpoint_dir on shared storage: its owner and mode serve others too).

    A missing directory appears with its owner and mode at once (made under a temporary name beside
    it, then renamed): on shared storage every node makes the same one at about the same time, and
    another node's check of it must never see it half made (root's, before the chown)."""
    changed = False
    if not os.path.isdir(path):
        if os.path.lexists(path):
            raise SecurityError("%s exists and is not a directory" % path)
        if check_mode:
            return True
        parent = os.path.dirname(os.path.normpath(os.path.abspath(path)))
        os.makedirs(parent, exist_ok=True)
        made = tempfile.mkdtemp(prefix=".%s." % os.path.basename(os.path.normpath(path)), dir=parent)
        try:
            os.chown(made, uid, os.stat(made).st_gid if gid is None else gid)
            os.chmod(made, mode)
            os.rename(made, path)
        except OSError as exc:
            os.rmdir(made)
            if not os.path.isdir(path):  # not another node's, made meanwhile
                raise SecurityError("%s: cannot be made (%s)" % (path, exc.strerror)) from exc
            if keep_existing:
                return False
        changed = True
    elif keep_existing:
        return False
    st = os.stat(path)
    want_gid = st.st_gid if gid is None else gid
    if (st.st_uid, st.st_gid) != (uid, want_gid):
        if not check_mode:
            os.chown(path, uid, want_gid)
        changed = True
    if st.st_mode & 0o7777 != mode:
        if not check_mode:
            os.chmod(path, mode)
        changed = True
    return changed


def start_listener(addr, port, expected, limit, python=None, wait=10.0):
    """Stop a listener of an earlier run on ``port``, start a new one detached -> (pid, error)."""
    _train_listener.stop_stale(port)
    argv = [python or sys.executable, "-c", inspect.getsource(_train_listener), _train_listener.MARK,
            str(addr), str(port), str(int(expected)), str(float(limit))]
    with open(os.devnull, "rb") as null_in, open(os.devnull, "wb") as null_out:
        popen = subprocess.Popen(argv, stdin=null_in, stdout=subprocess.PIPE, stderr=null_out, close_fds=True,
                                 start_new_session=True)
    ready, _w, _x = select.select([popen.stdout], [], [], wait)
    line = popen.stdout.readline().decode("utf-8", "replace").strip() if ready else ""
    popen.stdout.close()
    if line == "bound":
        return popen.pid, None
    if popen.poll() is None:
        popen.kill()
    popen.wait()
    return None, line or "the listener did not start within %ss" % wait


def check_ports_and_firewall(p, result, run_command, get_bin_path, is_root):
    """Step 1, what needs no account: ssh's ports (the job's port must not be one of them) and the
    firewall tool (``decide_firewall``; nft's check mode tries the job's rule) -> problem lines."""
    problems = []
    text = ""
    try:
        with open(p["sshd_config"]) as handle:
            text = handle.read()
    except (IOError, OSError):
        pass
    ssh = sorted(parse_sshd_ports(text) | set(p["ssh_ports"]))
    result["ssh_ports"] = ssh
    collision = port_problem(p["port"], ssh)
    if collision:
        problems.append(collision)
    result["nft"] = get_bin_path("nft")
    result["iptables"] = get_bin_path("iptables")
    nft_error = None
    if result["nft"] and is_root and str(p["firewall"]).lower() not in ("false", "no", "off", "0"):
        # The job's rule in nft's check mode: parsed and tried by the kernel, never applied.
        rc, _out, err = run_command([result["nft"], "-c", "-f", "-"], binary_data=True,
                                    data=render_table(table_name("preflight"), p["port"], ["127.0.0.1"], 60))
        nft_error = (err.strip().splitlines() or ["rc %d" % rc])[-1] if rc != 0 else None
    try:
        result["firewall"] = decide_firewall(p["firewall"], result["nft"], result["iptables"], is_root, nft_error)
    except SecurityError as exc:
        result["firewall"] = {"enabled": False, "note": str(exc)}
        problems.append(str(exc))
    return problems


def check_paths(p, result):
    """Step 1b, the paths the job opens as far as the module's own user sees them: missing (refused
    where preflight follows, before anything is copied or an account created), of another kind, an
    env file it cannot read (it reads them for the job) -> (checks, problem lines)."""
    checks = [dict(c, var=c.get("var") or "path", kind=c.get("kind"), who=c.get("who") or "account",
                   provided=bool(c.get("provided")), missing=c.get("missing") or "skip") for c in p["checks"]]
    job = p.get("job")
    if job:
        checks += job_checks(job, code_manifest(job, p.get("probe")))
    for check in checks:
        check["state"] = path_state(check["path"])
        if check["kind"] == "any" and check["state"] == "dir":
            check["need"] = "rx"  # a data directory: entered and listed
        if check["who"] == "self" and check["state"] == check["kind"]:
            check["ok"] = os.access(check["path"], MODES[check["need"]])
            check["error"] = None if check["ok"] else "Permission denied"
            check["reader"] = pwd.getpwuid(os.geteuid()).pw_name
    result["paths"] = [{k: c.get(k) for k in ("var", "path", "need", "who", "provided", "state")} for c in checks]
    return checks, path_problems(checks)


def resolve_account(p, result, problems, run_command, get_bin_path, check_mode):
    """Step 2, the job's account -> the account or None; problem lines go to ``problems``. A missing
    one the role creates (``create``) is created here, only when nothing stood in the way so far
    (an existing account is never changed)."""
    exists, group_exists, account = lookup(p["user"], p["group"])
    result["account_missing"] = not exists
    problem = account_problem(p["user"], p["group"], exists, group_exists, p["create"])
    if problem:
        problems.append(problem)
    if p["user_groups"]:
        names = set(g.gr_name for g in grp.getgrall())
        result["groups_present"] = [g for g in p["user_groups"] if g in names]
    if exists or not p["create"] or problems:
        return account
    error = None if check_mode else create_account(p["user"], p["group"], result["groups_present"],
                                                   run_command, get_bin_path, p["uid"])
    if error:
        problems.append("train_user=%s (train_group=%s): cannot be created (%s); valid: a new account "
                        "name, or an existing account and group" % (p["user"], p["group"] or "", error))
        return account
    result["changed"] = result["account_created"] = True
    if not check_mode:
        exists, group_exists, account = lookup(p["user"], p["group"])
    return account


def check_account_access(p, result, checks, account):
    """Step 3, what the account must reach, checked as the account (``access_as``): the paths it
    opens that exist and are not provided by the code copy, and the venv of its python -> problem lines."""
    result["account"] = account
    python_check = next((c for c in checks if c["var"] == "train_python" and c["who"] == "account"), None)
    mine = [c for c in checks if c["who"] == "account" and not c["provided"] and c["state"] != "missing"
            and (c["kind"] in (None, "any") or c["state"] in (c["kind"], "unknown"))]
    if python_check and python_check in mine and python_check["state"] == "file":
        mine += venv_checks(python_check["path"], (p.get("job") or {}).get("venv"), *venv_layout(
            python_check["path"]))
    for check, (ok, error) in zip(mine, access_as(account, mine)):
        result["access"].append(dict(var=check["var"], path=check["path"], need=check["need"], ok=bool(ok),
                                     error=error, part_of=check.get("part_of")))
    return account_problems(p["user"], result["access"])


# Seconds the first node's listener waits for every node's test connection: each node connects
# within CONNECT_TIMEOUT once its own security step reaches the probe, and the nodes' steps start
# together but take their own time (an account to create, a venv probe on a cold disk); two minutes
# more cover that spread (docs/design.md, "Fixed timings").
LISTEN_TIMEOUT = CONNECT_TIMEOUT + 120


def start_job_listener(listen, result):
    """Step 4a, the listener of preflight's reachability check (first node) -> a problem line or None."""
    pid, error = start_listener(listen["addr"], listen["port"], listen["expected"],
                                listen.get("timeout") or LISTEN_TIMEOUT, listen.get("python"))
    result["listener"] = {"pid": pid, "error": error}
    if not error:
        return None
    return ("train_rdzv_port=%s: in use on %s (%s); valid: a free port in 1-65535 reachable from "
            "all nodes" % (listen["port"], listen["addr"], error))


GIB = 1 << 30


def free_bytes(path):
    """Free bytes for an unprivileged writer on the filesystem of ``path`` (of its nearest existing
    parent while it does not exist yet) -> (bytes, the path measured)."""
    where = os.path.abspath(path)
    while not os.path.exists(where) and os.path.dirname(where) != where:
        where = os.path.dirname(where)
    st = os.statvfs(where)
    return st.f_bavail * st.f_frsize, where


def free_space_problems(directories):
    """Each directory with ``min_free_gib`` (> 0) against the free space where it lies -> problem lines."""
    lines = []
    for entry in directories:
        need = float(entry.get("min_free_gib") or 0)
        if need <= 0:
            continue
        var, path, min_var = entry.get("var", "path"), json.dumps(entry["path"]), entry.get("min_free_var", "min_free")
        try:
            free, where = free_bytes(entry["path"])
        except OSError as exc:
            lines.append("%s=%s: free space unknown on this node (%s); valid: a directory on a filesystem this "
                         "node can read" % (var, path, exc))
            continue
        if free < need * GIB:
            lines.append("%s=%s: %.1f GiB free on this node (filesystem of %s), %s=%g GiB needed; valid: a "
                         "directory with that much free space, or a lower %s (0: no check)"
                         % (var, path, free / GIB, where, min_var, need, min_var))
    return lines


def ensure_directories(p, result, account, check_mode):
    """Step 4b, the account's directories (``ensure_directory``) -> problem lines."""
    problems = []
    for entry in p["directories"]:
        try:
            changed = ensure_directory(entry["path"], account["uid"], account["gid"] if p["group"] else None,
                                       int(str(entry.get("mode") or "0750"), 8), check_mode,
                                       bool(entry.get("keep_existing")))
        except (SecurityError, OSError) as exc:
            problems.append("%s=%s: %s; valid: a directory path" % (entry.get("var", "path"), entry["path"], exc))
            continue
        result["directories"].append({"path": entry["path"], "changed": changed})
        result["changed"] = result["changed"] or changed
    return problems


def unmake_directory(result, path):
    """A refused run leaves nothing: the directory this call made at ``path`` is removed again while it
    is empty, and the call's ``changed`` no longer counts it."""
    made = [d for d in result["directories"] if d["path"] == path and d["changed"]]
    if not made:
        return
    try:
        os.rmdir(path)
    except OSError:
        return
    result["directories"] = [d for d in result["directories"] if d not in made]
    result["changed"] = result["account_created"] or any(d["changed"] for d in result["directories"])


def prove_shared(shared, account):
    """Step 4c, train_checkpoint_shared: the directory is one that every node sees (_train.shared), proven
    as the account -> a problem line or None."""
    def run():
        return {"problem": _train_shared.prove(shared["path"], shared["token"], shared["node"], shared["nodes"],
                                               shared["first"], float(shared.get("wait") or _train_shared.WAIT))}
    out = as_account(account, run) if account else run()
    if not isinstance(out, dict):
        return "train_checkpoint_dir=\"%s\": the shared-storage check did not run on this node" % shared["path"]
    return out.get("problem")


def run_probe(probe, run_command):
    """Step 5, preflight's probe (read-only; its problems are compared across the nodes by the role)."""
    connect = None
    if probe.get("connect_host"):
        connect = {"host": probe["connect_host"], "port": probe["connect_port"],
                   "timeout": probe.get("connect_timeout") or CONNECT_TIMEOUT}
    return probe_node(probe["python"], run_command, probe.get("script"), probe.get("chdir"),
                      probe.get("env_files") or [], connect, probe.get("code"))


def access(p, run_command, get_bin_path, check_mode=False, is_root=None):
    """Everything of module train_node (access) (``p``: its parameters) -> result dict (``changed``, ``problems``).

    The steps run in order; the account is created, the listener started and the directories made
    only while nothing stands in the way."""
    is_root = (os.geteuid() == 0) if is_root is None else is_root
    problems = []
    result = dict(changed=False, access=[], paths=[], problems=problems, account_missing=False, account_created=False,
                  groups_present=[], directories=[], listener=None, probe=None, memlock=job_memlock())
    problems.extend(check_ports_and_firewall(p, result, run_command, get_bin_path, is_root))
    checks, path_lines = check_paths(p, result)
    problems.extend(path_lines)
    problems.extend(free_space_problems(p["directories"]))
    account = None
    if p["user"]:
        account = resolve_account(p, result, problems, run_command, get_bin_path, check_mode)
    if account:
        problems.extend(check_account_access(p, result, checks, account))
    if problems:
        return result
    if p.get("listen"):
        problem = start_job_listener(p["listen"], result)
        if problem:
            problems.append(problem)
            return result
    if account:
        problems.extend(ensure_directories(p, result, account, check_mode))
    if p.get("shared") and not problems and not check_mode:
        problem = prove_shared(p["shared"], account)
        result["shared"] = problem is None
        if problem:
            problems.append(problem)
            unmake_directory(result, p["shared"]["path"])
    if p.get("probe") and not problems:
        result["probe"] = run_probe(p["probe"], run_command)
    return result


ARGUMENT_SPEC = dict(
    user=dict(type="str"),
    group=dict(type="str"),
    create=dict(type="bool", default=False),
    uid=dict(type="int"),
    user_groups=dict(type="list", elements="str", default=[]),
    checks=dict(type="list", elements="dict", default=[]),
    job=dict(type="dict"),
    directories=dict(type="list", elements="dict", default=[]),
    port=dict(type="int", required=True),
    ssh_ports=dict(type="list", elements="int", default=[]),
    sshd_config=dict(type="path", default="/etc/ssh/sshd_config"),
    firewall=dict(type="str", default="auto"),
    listen=dict(type="dict"),
    shared=dict(type="dict"),
    probe=dict(type="dict"),
    node=dict(type="str", default=""),
    fail_on_problems=dict(type="bool", default=False),
)


def play_user():
    """The name of the account this module runs as (the play's user, root under become)."""
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


def run_module(module):
    """The module train_node (access): ``module`` is the AnsibleModule of plugins/modules/train_node.py;
    answers through exit_json / fail_json.

    ``fail_on_problems`` fails with the problems (``node: problem; problem``) instead of returning
    them, so that the play needs no assert task per node after the call."""
    p = module.params
    for check in p["checks"]:
        if not isinstance(check, dict) or check.get("need") not in MODES or not check.get("path"):
            module.fail_json(msg="checks: %r: expected {var, path, need: x|r|rx|w}" % (check,))
    for entry in p["directories"]:
        if not isinstance(entry, dict) or not entry.get("path"):
            module.fail_json(msg="directories: %r: expected {var, path, mode}" % (entry,))
    for entry in (p.get("job") or {}).get("env_files") or []:
        if not isinstance(entry, dict) or not entry.get("path"):
            module.fail_json(msg="job.env_files: %r: expected {var, path}" % (entry,))
    result = access(p, module.run_command, module.get_bin_path, module.check_mode)
    warning = memlock_warning(p["node"] or "this node", result["memlock"], "ssh", play_user())
    if warning:
        module.warn(warning)
    if p["fail_on_problems"] and result["problems"]:
        where = "%s: " % p["node"] if p["node"] else ""
        module.fail_json(msg=where + "; ".join(result["problems"]), **result)
    module.exit_json(**result)
