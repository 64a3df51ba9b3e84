"""Unit tests for plugins/module_utils/_train_access.py (module train_access: the security step and
preflight's probe in one call per node) and _train_listener.py (the reachability check's listener).

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

from ansible_collections.multinode.training.plugins.module_utils import _train_access as acc
from ansible_collections.multinode.training.plugins.module_utils import _torchrun_job as job_mod
from ansible_collections.multinode.training.plugins.module_utils import _train_listener as lis

ME = pwd.getpwuid(os.geteuid()).pw_name
MY_GROUP = grp.getgrgid(os.getegid()).gr_name


def free_port():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def params(**over):
    p = dict(user=None, group=None, create=False, user_groups=[], checks=[], directories=[], port=29400,
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


@pytest.mark.parametrize("group, own_group_exists, groups, expected", [
    ("", False, [], ["-s", "/usr/sbin/nologin", "-m", "-r", "mtrain"]),
    ("train", False, ["video", "render"], ["-g", "train", "-G", "video,render", "-s", "/usr/sbin/nologin", "-m",
                                           "-r", "mtrain"]),
    # a group named like the account exists: useradd would fail to create it (ansible.builtin.user: -N)
    ("", True, ["video"], ["-N", "-G", "video", "-s", "/usr/sbin/nologin", "-m", "-r", "mtrain"]),
    ("train", True, [], ["-g", "train", "-s", "/usr/sbin/nologin", "-m", "-r", "mtrain"]),
])
def test_useradd_argv(group, own_group_exists, groups, expected):
    assert acc.useradd_argv("/usr/sbin/useradd", "mtrain", group, groups, own_group_exists) == \
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
    assert fake.ran == [["/usr/sbin/useradd", "-G", MY_GROUP, "-s", "/usr/sbin/nologin", "-m", "-r",
                         "no-such-user-xyz"]]
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
            "train_user=%s: cannot enter train_code_dir=%s (permission denied); valid: paths the account can "
            "reach (group or mode)" % (user, str(locked).lower())]
        assert out["access"][0]["ok"] is False
    finally:
        locked.chmod(0o700)


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
    assert job_mod.rdzv_port("127.0.0.1:%d" % port) == port and job_mod.rdzv_port("[::1]:29400") == 29400
    assert job_mod.rdzv_port("") is None and job_mod.stop_stale_listener(None) == []
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
    assert lis._running(4242, str(tmp_path)) is running
    assert lis._running(4243, str(tmp_path)) is False
