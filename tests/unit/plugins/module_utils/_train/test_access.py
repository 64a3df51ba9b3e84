"""Unit tests for plugins/module_utils/_train/access.py (module train_node (access): the security step and
preflight's probe in one call per node) and _train/listener.py (the reachability check's listener).

Real processes and sockets on this machine: the listener is started detached and connected to,
directories are made in a temporary directory, the account is this test's own.
"""
from __future__ import annotations

import grp
import os
import pwd
import socket
import subprocess
import sys
import time

import pytest

from ansible_collections.multinode.training.plugins.module_utils._train import access as acc
from ansible_collections.multinode.training.plugins.module_utils._torchrun import firewall as fw
from ansible_collections.multinode.training.plugins.module_utils._torchrun import start as job_mod
from ansible_collections.multinode.training.plugins.module_utils._train import listener as lis

ME = pwd.getpwuid(os.geteuid()).pw_name
MY_GROUP = grp.getgrgid(os.getegid()).gr_name


def free_port():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def params(**over):
    p = dict(user=None, group=None, create=False, uid=None, user_groups=[], checks=[], directories=[], port=29400,
             ssh_ports=[], sshd_config="/nonexistent/sshd_config", firewall="false", listen=None, probe=None)
    p.update(over)
    return p


def no_run(argv, **_kw):
    raise AssertionError("nothing to run: %r" % (argv,))


def no_bin(_name):
    return None


# ------------------------------------------------------------------ account

def test_lookup_existing_account_and_missing_group():
    exists, group_ok, account = acc.lookup(ME, None)
    assert exists and group_ok and account["name"] == ME and account["uid"] == os.geteuid()
    assert acc.lookup(ME, "no-such-group-xyz") == (True, False, None)
    assert acc.lookup("no-such-user-xyz", None) == (False, True, None)


@pytest.mark.parametrize("exists, group_ok, create, group, fragment", [
    (True, True, False, "", None),
    (False, True, True, "", None),                                      # the role creates it
    (False, False, True, "nosuchgroup", "cannot be created, there is no group nosuchgroup on this node"),
    (False, True, False, "", "no such account or group on this node"),
    (True, False, True, "nosuchgroup", "no such account or group on this node"),  # existing: never changed
])
def test_account_problem(exists, group_ok, create, group, fragment):
    line = acc.account_problem("trainer2", group, exists, group_ok, create)
    if fragment is None:
        assert line is None
    else:
        assert line.startswith("train_user=trainer2 (train_group=%s): " % group) and fragment in line
        assert "; valid: " in line


HOME = ["-d", "/var/lib/mtrain", "-m", "-r", "mtrain"]


@pytest.mark.parametrize("group, own_group_exists, groups, uid, expected", [
    ("", False, [], None, ["-s", "/usr/sbin/nologin"] + HOME),
    ("train", False, ["video", "render"], None, ["-g", "train", "-G", "video,render", "-s", "/usr/sbin/nologin"]
     + HOME),
    # a group named like the account exists: useradd would fail to create it (ansible.builtin.user: -N)
    ("", True, ["video"], None, ["-N", "-G", "video", "-s", "/usr/sbin/nologin"] + HOME),
    ("train", True, [], None, ["-g", "train", "-s", "/usr/sbin/nologin"] + HOME),
    # the uid it has on the other nodes (_train.account.decide_uid)
    ("", False, [], 998, ["-u", "998", "-s", "/usr/sbin/nologin"] + HOME),
])
def test_useradd_argv(group, own_group_exists, groups, uid, expected):
    """A system account without a login shell, its home on the node's own disk (never /home, which may be NFS
    with root_squash), with the job's one uid when given."""
    assert acc.useradd_argv("/usr/sbin/useradd", "mtrain", group, groups, own_group_exists, uid) == \
        ["/usr/sbin/useradd"] + expected


REAL_LOOKUP = acc.lookup


class FakeAccounts:
    """``lookup`` of a node where the account appears once useradd ran (then: this test's own account);
    records the commands."""

    def __init__(self, rc=0, err=""):
        self.created, self.ran, self.rc, self.err = False, [], rc, err

    def lookup(self, user, group):
        if not self.created:
            return False, True, None
        return REAL_LOOKUP(ME, group)

    def run(self, argv, **_kw):
        self.ran.append(argv)
        self.created = self.rc == 0
        return self.rc, "", self.err


def test_a_missing_account_is_created_then_checked_and_given_its_directories(tmp_path, monkeypatch):
    fake = FakeAccounts()
    monkeypatch.setattr(acc, "lookup", fake.lookup)
    target = tmp_path / "logs"
    out = acc.access(params(user="no-such-user-xyz", create=True, user_groups=[MY_GROUP, "no-such-group-xyz"],
                            directories=[{"path": str(target)}]), fake.run, lambda name: "/usr/sbin/" + name,
                     is_root=False)
    assert out["problems"] == [] and out["account_missing"] is True and out["account_created"] is True
    assert out["groups_present"] == [MY_GROUP]
    assert fake.ran == [["/usr/sbin/useradd", "-G", MY_GROUP, "-s", "/usr/sbin/nologin", "-d",
                         "/var/lib/no-such-user-xyz", "-m", "-r", "no-such-user-xyz"]]
    # then, in the same call, as the account now found: its directories
    assert target.is_dir() and out["changed"] is True and out["account"]["name"] == ME


def test_an_account_that_cannot_be_created_is_a_problem_and_nothing_is_made(tmp_path, monkeypatch):
    fake = FakeAccounts(rc=4, err="useradd: UID 999 is not unique\n")
    monkeypatch.setattr(acc, "lookup", fake.lookup)
    target = tmp_path / "logs"
    out = acc.access(params(user="trainer2", create=True, directories=[{"path": str(target)}]), fake.run,
                     lambda name: "/usr/sbin/" + name, is_root=False)
    assert out["problems"] == ["train_user=trainer2 (train_group=): cannot be created (useradd: UID 999 is not "
                               "unique); valid: a new account name, or an existing account and group"]
    assert out["account_created"] is False and out["changed"] is False and not target.exists()
    without = acc.access(params(user="trainer2", create=True), no_run, no_bin, is_root=False)
    assert without["problems"][0].endswith("cannot be created (no useradd on this node); valid: a new account "
                                           "name, or an existing account and group")


def test_check_mode_creates_no_account_and_makes_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(acc, "lookup", FakeAccounts().lookup)
    target = tmp_path / "logs"
    out = acc.access(params(user="trainer2", create=True, directories=[{"path": str(target)}]), no_run, no_bin,
                     check_mode=True, is_root=False)
    assert out["problems"] == [] and out["account_created"] is True and out["changed"] is True
    assert not target.exists()


def test_no_account_is_created_where_something_stands_in_the_way(monkeypatch):
    """A port that collides with ssh: refused before the account is created (nothing half-made)."""
    monkeypatch.setattr(acc, "lookup", FakeAccounts().lookup)
    out = acc.access(params(user="trainer2", create=True, port=22), no_run, no_bin, is_root=False)
    assert len(out["problems"]) == 1 and "collides with ssh" in out["problems"][0]
    assert out["account_missing"] is True and out["account_created"] is False


# ------------------------------------------------------------------ order: refusals change nothing

def test_a_refusal_makes_no_directory_and_starts_no_listener(tmp_path):
    target = tmp_path / "logs"
    port = free_port()
    out = acc.access(params(user=ME, port=22, directories=[{"path": str(target)}],
                            listen={"addr": "127.0.0.1", "port": port, "expected": 1, "timeout": 5}),
                     no_run, no_bin, is_root=False)
    assert len(out["problems"]) == 1 and "train_rdzv_port=22: collides with ssh" in out["problems"][0]
    assert not target.exists() and out["listener"] is None and out["changed"] is False
    assert lis.stale_listeners(port) == []


def test_too_little_free_space_is_refused_before_anything_is_made(tmp_path):
    """statvfs where the checkpoint directory will be (its parent: it does not exist yet)."""
    target = tmp_path / "ckpt" / "run1"
    free = os.statvfs(str(tmp_path)).f_bavail * os.statvfs(str(tmp_path)).f_frsize
    entry = {"var": "train_checkpoint_dir", "path": str(target), "min_free_var": "train_checkpoint_min_free"}
    out = acc.access(params(user=ME, directories=[dict(entry, min_free_gib=free / acc.GIB * 2 + 1)]), no_run, no_bin,
                     is_root=False)
    assert len(out["problems"]) == 1
    assert out["problems"][0].startswith('train_checkpoint_dir="%s": %.1f GiB free on this node (filesystem of %s), '
                                         "train_checkpoint_min_free=" % (target, free / acc.GIB, tmp_path))
    assert out["problems"][0].endswith("GiB needed; valid: a directory with that much free space, or a lower "
                                       "train_checkpoint_min_free (0: no check)")
    assert not target.exists() and out["changed"] is False
    for need in (0, free / acc.GIB / 2):  # 0: no check; half of what is free: made
        out = acc.access(params(user=ME, directories=[dict(entry, min_free_gib=need)]), no_run, no_bin, is_root=False)
        assert out["problems"] == [] and target.is_dir()


def test_access_problem_names_the_variable(tmp_path):
    """Checked as the account: as root, in a child that switched to nobody; otherwise as this user."""
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o700 if os.geteuid() == 0 else 0o000)
    user = "nobody" if os.geteuid() == 0 else ME
    try:
        out = acc.access(params(user=user, checks=[{"var": "train_code_dir", "path": str(locked), "need": "rx"}]),
                         no_run, no_bin, is_root=os.geteuid() == 0)
        assert [line.lower() for line in out["problems"]] == [
            "train_user=%s: cannot enter train_code_dir=%s (permission denied); valid: a train_code_dir whose "
            "parent directories the account can enter (group or mode)" % (user, str(locked).lower())]
        assert out["access"][0]["ok"] is False
    finally:
        locked.chmod(0o700)


# ------------------------------------------------------------------ every path the job opens

AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="switching to another account needs root")
PYTHON = "/usr/bin/python3"


class FailModule:
    """What run_module needs of an AnsibleModule: params, run_command, get_bin_path, fail/exit_json."""

    def __init__(self, p, run=no_run):
        self.params, self.check_mode, self.run_command = dict(p, node="node1", fail_on_problems=True), False, run
        self.failed = self.exited = None
        self.warnings = []

    def get_bin_path(self, _name, *_args, **_kw):
        return None

    def warn(self, text):
        self.warnings.append(text)

    def fail_json(self, **kw):
        self.failed = kw
        raise SystemExit(1)

    def exit_json(self, **kw):
        self.exited = kw
        raise SystemExit(0)


def run_access(p, run=no_run):
    module = FailModule(p, run)
    with pytest.raises(SystemExit):
        acc.run_module(module)
    return module


def job(code_dir, **over):
    out = {"python": PYTHON, "venv": "", "script": "", "chdir": "", "env_files": [], "configs": {},
           "code_dir": code_dir, "sync_code": True, "manifest": ["smoke_train.py"], "refuse_missing": True}
    out.update(over)
    return out


@AS_ROOT
def test_a_script_in_roots_0700_directory_is_refused_naming_node_variable_path_and_account(shared_dir):
    """train_script in a 0700 temp directory of root's, train_code_src set: rank 0 would die with
    PermissionError after the copy and the start, so the security step refuses it, as the account,
    before anything is copied."""
    private = os.path.join(shared_dir, "tmp.private")
    os.mkdir(private, 0o700)
    script = os.path.join(private, "p.py")
    with open(script, "w") as handle:
        handle.write("print(1)\n")
    code = os.path.join(shared_dir, "code")
    module = run_access(params(user="nobody", job=job(code, script=script),
                               directories=[{"var": "train_code_dir", "path": code}]))
    assert module.failed["msg"] == (
        "node1: train_user=nobody: cannot read train_script=%s (Permission denied); valid: a file the account "
        "can read (group or mode), or train_code_src to copy it into train_code_dir" % script)
    # nothing made: the code directory (where the copy would go) does not exist
    assert not os.path.exists(code) and module.failed["changed"] is False
    os.chmod(private, 0o755)  # readable now: the same call passes and makes the code directory
    passed = run_access(params(user="nobody", job=job(code, script=script),
                               directories=[{"var": "train_code_dir", "path": code}]))
    assert passed.failed is None and passed.exited["problems"] == [] and os.path.isdir(code)


@AS_ROOT
def test_a_working_directory_the_account_cannot_enter_is_refused(shared_dir):
    chdir = os.path.join(shared_dir, "work")
    os.mkdir(chdir, 0o700)
    out = acc.access(params(user="nobody", job=job(os.path.join(shared_dir, "code"), chdir=chdir)), no_run, no_bin)
    assert out["problems"] == [
        "train_user=nobody: cannot enter train_chdir=%s (Permission denied); valid: a directory the account can "
        "enter (group or mode), or empty (the directory of train_script)" % chdir]


@AS_ROOT
def test_what_the_code_copy_makes_is_not_checked_what_it_does_not_is(shared_dir):
    """train_code_dir root's 0700 today: train_node (access) gives it to the account before the copy, so the
    manifest's script in it is fine; a script below it that train_code_src does not hold must be
    reachable now, and a missing one is refused."""
    code = os.path.join(shared_dir, "code")
    os.mkdir(code, 0o700)
    other = os.path.join(code, "other.py")
    with open(other, "w") as handle:
        handle.write("print(2)\n")
    ok = acc.access(params(user="nobody", job=job(code, script=os.path.join(code, "smoke_train.py"),
                                                  chdir=code)), no_run, no_bin)
    assert ok["problems"] == []
    assert [(c["var"], c["provided"]) for c in ok["paths"] if c["var"] in ("train_script", "train_chdir")] == [
        ("train_script", True), ("train_chdir", True)]
    refused = acc.access(params(user="nobody", job=job(code, script=other)), no_run, no_bin)
    assert refused["problems"] == [
        "train_user=nobody: cannot read train_script=%s (Permission denied); valid: a file the account can read "
        "(group or mode), or train_code_src to copy it into train_code_dir" % other]
    missing = acc.access(params(user="nobody", job=job(code, script=os.path.join(code, "gone.py"))), no_run,
                         no_bin)
    assert missing["problems"] == [
        'train_script="%s/gone.py": missing on this node; valid: a file of train_code_src (copied into '
        'train_code_dir), or a file that exists on every node' % code]


@AS_ROOT
def test_env_files_are_read_by_the_play_user_not_the_account(shared_dir):
    """The launcher reads the env files for the job (as root under become): a root 0600 file is fine,
    as docs/train.md recommends for secrets; a missing one is refused."""
    secret = os.path.join(shared_dir, "secret.env")
    with open(secret, "w") as handle:
        handle.write("KEY=1\n")
    os.chmod(secret, 0o600)
    files = [{"var": "train_env_files", "path": secret},
             {"var": "train_nccl", "path": os.path.join(shared_dir, "nccl.env")}]
    out = acc.access(params(user="nobody", job=job(os.path.join(shared_dir, "code"), env_files=files)), no_run,
                     no_bin)
    assert out["problems"] == [
        'train_nccl="%s/nccl.env": missing on this node; valid: the NCCL env file multinode.training.nccl_tuning '
        'writes (tag nccl), or train_nccl=false to leave it out' % shared_dir]
    assert [c["state"] for c in out["paths"] if c["who"] == "self"] == ["file", "missing"]


@AS_ROOT
def test_a_venv_whose_files_the_account_cannot_read_is_refused_once(shared_dir):
    venv = os.path.join(shared_dir, "venv")
    site = os.path.join(venv, "lib", "python3.11", "site-packages")
    os.makedirs(os.path.join(venv, "bin"))
    os.makedirs(site)
    os.symlink(PYTHON, os.path.join(venv, "bin", "python"))
    os.symlink("lib", os.path.join(venv, "lib64"))
    with open(os.path.join(venv, "pyvenv.cfg"), "w") as handle:
        handle.write("home = /usr/bin\n")
    checks = dict(user="nobody", job=job(os.path.join(shared_dir, "code"), python=os.path.join(venv, "bin", "python"),
                                         venv=venv))
    ok = acc.access(params(**checks), no_run, no_bin)
    assert ok["problems"] == []
    # lib64 -> lib: one site-packages checked
    assert [(a["var"], a["path"]) for a in ok["access"] if a["part_of"]] == [
        ("train_venv", os.path.join(venv, "pyvenv.cfg")), ("train_venv", site)]
    os.chmod(os.path.join(venv, "pyvenv.cfg"), 0o600)  # a venv made under umask 077
    os.chmod(site, 0o700)
    out = acc.access(params(**checks), no_run, no_bin)
    assert out["problems"] == [
        "train_user=nobody: cannot read train_venv=%s/pyvenv.cfg (Permission denied); valid: a venv the account "
        "can enter and run (group or mode; the one multinode.training.wheel_distribute installs is)" % venv]


@AS_ROOT
def test_data_paths_the_account_cannot_read_are_refused_naming_each(shared_dir):
    """train_data_paths: a dataset directory of root's (0700: not entered) and a file of root's (0600:
    not read) are refused as the account, each named; a readable directory and file pass; nothing made."""
    dataset = os.path.join(shared_dir, "dataset")
    os.mkdir(dataset, 0o700)
    secret = os.path.join(shared_dir, "tokenizer.json")
    with open(secret, "w") as handle:
        handle.write("{}")
    os.chmod(secret, 0o600)
    shared = os.path.join(shared_dir, "hf-cache")
    os.mkdir(shared, 0o755)
    logs = os.path.join(shared_dir, "logs")
    out = acc.access(params(user="nobody", directories=[{"path": logs}],
                            job=job(os.path.join(shared_dir, "code"), data=[shared, dataset, secret])),
                     no_run, no_bin)
    hint = ("valid: paths the account can read (a directory: enter and list; group or mode), or "
            "train_user=<an account that can>")
    assert out["problems"] == [
        "train_user=nobody: cannot enter train_data_paths=%s (Permission denied); %s" % (dataset, hint),
        "train_user=nobody: cannot read train_data_paths=%s (Permission denied); %s" % (secret, hint)]
    assert not os.path.exists(logs)
    os.chmod(dataset, 0o755)
    os.chmod(secret, 0o644)
    out = acc.access(params(user="nobody", job=job(os.path.join(shared_dir, "code"), data=[shared, dataset, secret])),
                     no_run, no_bin)
    assert out["problems"] == []


@AS_ROOT
def test_an_existing_checkpoint_dir_is_the_users_checked_as_the_account_never_changed(shared_dir):
    """train_checkpoint_dir that exists (shared storage, a team's 2775 directory of root's): the account
    must write into it, refused before anything is made where it cannot; where it can, the directory
    keeps its owner and mode. A missing one is made, owned by the account."""
    ckpt = os.path.join(shared_dir, "ckpt")
    os.mkdir(ckpt)
    os.chmod(ckpt, 0o2775)
    logs = os.path.join(shared_dir, "logs")
    dirs = [{"var": "train_log_dir", "path": logs},
            {"var": "train_checkpoint_dir", "path": ckpt, "keep_existing": True}]
    nobody = pwd.getpwnam("nobody")

    def run(**over):
        return acc.access(params(user="nobody", directories=dirs,
                                 job=job(os.path.join(shared_dir, "code"), checkpoint_dir=ckpt, **over)), no_run, no_bin)

    out = run()
    assert out["problems"] == [
        "train_user=nobody: cannot write into train_checkpoint_dir=%s (Permission denied); valid: a directory the "
        "account can write into (group or mode; it is used as it is), or a path that does not exist yet (made on "
        "every node, owned by the account)" % ckpt]
    assert not os.path.exists(logs)
    os.chmod(ckpt, 0o2777)
    out = run()
    assert out["problems"] == [] and os.path.isdir(logs)
    st = os.stat(ckpt)
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (0, 0, 0o2777)
    assert {"path": ckpt, "changed": False} in out["directories"]
    os.rmdir(ckpt)
    out = run()
    st = os.stat(ckpt)
    assert out["problems"] == [] and (st.st_uid, st.st_mode & 0o7777) == (nobody.pw_uid, 0o750)
    assert {"path": ckpt, "changed": True} in out["directories"]


def test_a_missing_data_path_is_refused_where_preflight_follows(tmp_path):
    out = acc.access(params(user=ME, job=job(str(tmp_path / "code"), python=sys.executable,
                                             data=[str(tmp_path), "/nonexistent/dataset"])),
                     no_run, no_bin, is_root=False)
    assert out["problems"] == ['train_data_paths="/nonexistent/dataset": missing on this node; valid: paths '
                               'that exist on every node (shared storage, or copied there before the job)']


def test_a_missing_path_is_refused_before_the_account_is_created(tmp_path, monkeypatch):
    """Nothing half-made on a refusing run: no useradd where the job's script is missing."""
    fake = FakeAccounts()
    monkeypatch.setattr(acc, "lookup", fake.lookup)
    target = tmp_path / "logs"
    out = acc.access(params(user="trainer2", create=True, directories=[{"path": str(target)}],
                            job=job(str(tmp_path / "code"), python=sys.executable, script="/nonexistent/p.py")),
                     fake.run, lambda name: "/usr/sbin/" + name, is_root=False)
    assert out["problems"] == ['train_script="/nonexistent/p.py": missing on this node; valid: a file of '
                               'train_code_src (copied into train_code_dir), or a file that exists on every node']
    assert fake.ran == [] and out["account_created"] is False and not target.exists()


def test_without_preflight_a_missing_path_is_the_launchers(tmp_path):
    out = acc.access(params(user=ME, job=job(str(tmp_path / "code"), python="/nonexistent/bin/python",
                                             script="/nonexistent/p.py", refuse_missing=False)),
                     no_run, no_bin, is_root=False)
    assert out["problems"] == []


def test_explicit_checks_without_a_variable_name(tmp_path):
    """Checks of the option ``checks`` need only path and need; a missing path there is preflight's."""
    out = acc.access(params(user=ME, checks=[{"path": str(tmp_path), "need": "rx"},
                                             {"path": str(tmp_path / "gone"), "need": "r"}]),
                     no_run, no_bin, is_root=False)
    assert out["problems"] == [] and [(a["var"], a["ok"]) for a in out["access"]] == [("path", True)]


def test_the_manifest_comes_from_the_probe_where_the_job_has_none():
    assert acc.code_manifest({"manifest": ["a.py"]}, None) == ["a.py"]
    assert acc.code_manifest({}, {"code": {"manifest": {"b.py": {"sha256": "x", "mode": "0644"}}}}) == ["b.py"]
    assert acc.code_manifest({}, {"python": "/p"}) is None
    assert acc.code_manifest({}, None) is None


def test_path_state(tmp_path):
    (tmp_path / "f").write_text("x")
    assert acc.path_state(str(tmp_path / "f")) == "file"
    assert acc.path_state(str(tmp_path)) == "dir"
    assert acc.path_state(str(tmp_path / "nope")) == "missing"
    assert acc.path_state(str(tmp_path / "f" / "below")) == "missing"  # ENOTDIR
    assert acc.path_state("/dev/null") == "other"


# ------------------------------------------------------------------ directories

def test_ensure_directory_changed_only_when_it_changes(tmp_path):
    path = str(tmp_path / "a" / "logs")
    uid, gid = os.geteuid(), os.getegid()
    assert acc.ensure_directory(path, uid, None, 0o750, check_mode=True) is True
    assert not os.path.exists(path)
    assert acc.ensure_directory(path, uid, None, 0o750) is True
    assert os.stat(path).st_mode & 0o7777 == 0o750
    assert acc.ensure_directory(path, uid, None, 0o750) is False
    assert acc.ensure_directory(path, uid, gid, 0o750) is False
    os.chmod(path, 0o755)
    assert acc.ensure_directory(path, uid, None, 0o750) is True
    assert os.stat(path).st_mode & 0o7777 == 0o750
    (tmp_path / "file").write_text("x")
    with pytest.raises(acc.SecurityError, match="is not a directory"):
        acc.ensure_directory(str(tmp_path / "file"), uid, None, 0o750)
    with pytest.raises(acc.SecurityError, match="is not a directory"):
        acc.ensure_directory(str(tmp_path / "file"), uid, None, 0o750, keep_existing=True)
    os.chmod(path, 0o2775)  # kept: an existing directory is left as it is
    assert acc.ensure_directory(path, uid, None, 0o750, keep_existing=True) is False
    assert os.stat(path).st_mode & 0o7777 == 0o2775


def test_a_directory_another_node_makes_meanwhile_is_kept_and_nothing_is_left_beside_it(tmp_path, monkeypatch):
    """Shared storage: every node makes the same train_checkpoint_dir at once. Each makes it under a
    temporary name with its owner and mode, then renames it into place; where another node's is there
    first (and already used), that one stays and the temporary one is removed."""
    path = tmp_path / "ckpt"
    rename = os.rename

    def other_node_first(src, dst):
        os.mkdir(dst)
        (tmp_path / "ckpt" / "latest").write_text("step 5")
        return rename(src, dst)

    monkeypatch.setattr(acc.os, "rename", other_node_first)
    assert acc.ensure_directory(str(path), os.geteuid(), None, 0o750, keep_existing=True) is False
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
    assert (path / "latest").read_text() == "step 5"
    monkeypatch.setattr(acc.os, "rename", rename)
    fresh = tmp_path / "fresh"
    assert acc.ensure_directory(str(fresh), os.geteuid(), None, 0o750, keep_existing=True) is True
    assert fresh.stat().st_mode & 0o7777 == 0o750 and sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "fresh"]


def test_access_makes_the_directories_and_reports_changed(tmp_path):
    dirs = [{"var": "train_log_dir", "path": str(tmp_path / "logs"), "mode": "0750"}]
    first = acc.access(params(user=ME, directories=dirs), no_run, no_bin, is_root=False)
    again = acc.access(params(user=ME, directories=dirs), no_run, no_bin, is_root=False)
    assert first["changed"] is True and first["directories"] == [{"path": dirs[0]["path"], "changed": True}]
    assert again["changed"] is False and again["problems"] == []


# ------------------------------------------------------------------ listener

def test_listener_accepts_one_connection_per_node_then_exits():
    port = free_port()
    pid, error = acc.start_listener("127.0.0.1", port, 2, 20)
    assert error is None and pid in lis.stale_listeners(port)
    for _node in range(2):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    deadline = time.time() + 5
    while lis.stale_listeners(port) and time.time() < deadline:
        time.sleep(0.1)
    assert lis.stale_listeners(port) == []


def test_listener_reports_a_port_in_use():
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    port = busy.getsockname()[1]
    try:
        pid, error = acc.start_listener("127.0.0.1", port, 1, 5)
        assert pid is None and "bind 127.0.0.1 port %d failed" % port in error
        out = acc.access(params(user=ME, listen={"addr": "127.0.0.1", "port": port, "expected": 1, "timeout": 5}),
                         no_run, no_bin, is_root=False)
        assert out["problems"][0].startswith("train_rdzv_port=%d: in use on 127.0.0.1 (" % port)
        assert "; valid: a free port in 1-65535 reachable from all nodes" in out["problems"][0]
    finally:
        busy.close()


def test_a_new_listener_replaces_one_an_earlier_run_left():
    port = free_port()
    old, _error = acc.start_listener("127.0.0.1", port, 5, 60)
    new, error = acc.start_listener("127.0.0.1", port, 1, 20)
    try:
        assert error is None and new != old
        assert lis.stale_listeners(port) == [new]
    finally:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()


def test_torchrun_start_stops_a_listener_that_still_holds_the_rendezvous_port():
    # A listener still waiting for a node would keep the port from the c10d store.
    port = free_port()
    pid, error = acc.start_listener("127.0.0.1", port, 5, 60)
    assert error is None and lis.stale_listeners(port) == [pid]
    assert fw.rdzv_port("127.0.0.1:%d" % port) == port and fw.rdzv_port("[::1]:29400") == 29400
    assert fw.rdzv_port("") is None and job_mod.stop_stale_listener(None) == []
    assert job_mod.stop_stale_listener(port) == [pid]
    assert lis.stale_listeners(port) == []
    probe = socket.socket()
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    probe.bind(("127.0.0.1", port))  # the port is free for the store
    probe.close()


def test_listener_main_exit_codes():
    port = free_port()
    done = subprocess.run([sys.executable, lis.__file__, lis.MARK, "127.0.0.1", str(port), "1", "0.5"],
                          stdout=subprocess.PIPE, check=False, timeout=20)
    assert done.returncode == 4 and done.stdout.decode().strip() == "bound"


# ------------------------------------------------------------------ probe in the same call

def test_probe_runs_after_the_security_checks_with_the_connect(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print(1)\n")
    port = free_port()

    def run(argv, **_kw):
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                              check=False)
        return done.returncode, done.stdout, done.stderr

    out = acc.access(params(user=ME, port=port, listen={"addr": "127.0.0.1", "port": port, "expected": 1,
                                                        "timeout": 20},
                            probe={"python": sys.executable, "script": str(script), "env_files": [],
                                   "connect_host": "127.0.0.1", "connect_port": port, "connect_timeout": 5}),
                     run, no_bin, is_root=False)
    assert out["problems"] == []
    assert out["probe"]["connect"]["ok"] is True
    assert out["probe"]["script"]["exists"] is True and out["probe"]["environment"]["python"]
    deadline = time.time() + 5
    while lis.stale_listeners(port) and time.time() < deadline:
        time.sleep(0.1)
    assert lis.stale_listeners(port) == []


@pytest.mark.parametrize("stat, running", [
    (b"4242 (python3) S 1 4242 4242 0 -1", True),
    (b"4242 (python3) R 1 4242 4242 0 -1", True),
    (b"4242 (python3) Z 1 4242 4242 0 -1", False),
    (b"4242 (python3) X 1 4242 4242 0 -1", False),
    (b"4242 (a) Z (b) S 1 4242 4242 0 -1", True),  # the state follows the last ')' of COMM
    (b"", False),
])
def test_a_killed_listener_counts_as_gone_once_a_zombie(tmp_path, stat, running):
    # stop_stale waits on this, not on an empty cmdline: a dying process's memory (its cmdline) is
    # freed before its socket is closed, and the c10d store's bind then failed with EADDRINUSE.
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "stat").write_bytes(stat)
    assert lis.running(4242, str(tmp_path)) is running
    assert lis.running(4243, str(tmp_path)) is False


def test_a_node_with_rdma_devices_and_limited_locked_memory_gets_a_warning(monkeypatch):
    """The security step's call reports what the launcher would give the job (job_memlock, here a node
    with two RDMA devices and 8 MiB) and warns naming the node and the play's user; nothing is refused."""
    monkeypatch.setattr(acc, "job_memlock", lambda: {"rdma": ["mlx5_0", "mlx5_1"], "limit": 8 << 20})
    module = run_access(params())
    assert module.exited is not None and module.exited["memlock"] == {"rdma": ["mlx5_0", "mlx5_1"], "limit": 8 << 20}
    assert len(module.warnings) == 1 and module.warnings[0].startswith(
        "node1: NCCL over InfiniBand/RoCE (mlx5_0, mlx5_1) registers the job's buffers as locked memory, and the job "
        "gets 8 MiB of it here (the hard limit of %s;" % acc.play_user())
    monkeypatch.setattr(acc, "job_memlock", lambda: {"rdma": ["mlx5_0"], "limit": None})
    assert run_access(params()).warnings == []
