"""Unit tests for plugins/module_utils/_train/security.py and the firewall keeper.

tests/fixtures/nft/ holds `nft -j list tables` recorded on Debian bookworm (nft 1.0.6).
Where this machine has nft, the rendered scripts are checked by nft itself (`nft -c`).
"""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import time

import pytest

from ansible_collections.multinode.training.plugins.module_utils._train import security as sec
from ansible_collections.multinode.training.plugins.module_utils._node import torchrun as tr
from ansible_collections.multinode.training.plugins.module_utils._node import supervisor as _torchrun_supervisor

SUPERVISOR = _torchrun_supervisor.__file__
from tests.unit.conftest import FIXTURES

FIX = FIXTURES / "nft"


# ------------------------------------------------------------------ user

@pytest.mark.parametrize("requested, user, uid, expected", [
    ("", "root", 0, {"user": "mtrain", "create": True, "drop": True}),
    ("", "alice", 1000, {"user": "alice", "create": False, "drop": False}),
    ("alice", "alice", 1000, {"user": "alice", "create": False, "drop": False}),
    ("trainer", "root", 0, {"user": "trainer", "create": True, "drop": True}),
    (" svc_ml-1 ", "root", 0, {"user": "svc_ml-1", "create": True, "drop": True}),
])
def test_decide_user(requested, user, uid, expected):
    assert sec.decide_user(requested, user, uid) == expected


@pytest.mark.parametrize("requested, user, uid, fragment", [
    ("root", "root", 0, "train_user=root: the job (your script and everything it imports) would run as root"),
    ("root", "alice", 1000, "would run as root"),
    ("", "root", 0, None),  # the default is never root
    ("Bad User", "root", 0, "train_user='Bad User': cannot be created, not a valid account name"),
    ("a/b", "root", 0, "cannot be created"),
    ("x" * 33, "root", 0, "cannot be created"),
    ("bob", "alice", 1000, "train_user=bob: the play runs as alice, which cannot switch"),
])
def test_decide_user_refused(requested, user, uid, fragment):
    if fragment is None:
        assert sec.decide_user(requested, user, uid)["user"] != "root"
        return
    with pytest.raises(sec.SecurityError) as info:
        sec.decide_user(requested, user, uid)
    assert fragment in str(info.value)


def test_decide_user_root_allowed():
    assert sec.decide_user("root", "root", 0, allow_root=True) == {"user": "root", "create": False, "drop": False}
    # A root play that connected as root and names no user still gets the dedicated account.
    assert sec.decide_user("", "root", 0, allow_root=True)["user"] == "mtrain"


# ------------------------------------------------------------------ what the job opens

JOB = {"python": "/v/bin/python", "venv": "/v", "script": "/c/train.py", "chdir": "", "env_files": [],
       "configs": {}, "code_dir": "/c", "sync_code": True, "refuse_missing": True}


def job(**over):
    return dict(JOB, **over)


def by_var(checks):
    return {c["var"]: c for c in checks}


@pytest.mark.parametrize("path, directory, expected", [
    ("/c/train.py", "/c", "train.py"),
    ("/c/", "/c", ""),
    ("/c/sub/../train.py", "/c/", "train.py"),
    ("/code/train.py", "/c", None),
    ("/tmp/p.py", "/c", None),
    ("", "/c", None),
])
def test_inside(path, directory, expected):
    assert sec.inside(path, directory) == expected


def test_job_checks_every_path_the_job_opens_and_who_opens_it():
    checks = sec.job_checks(job(chdir="/work", configs={"train_deepspeed_config": "/ctl/ds.json",
                                                        "train_accelerate_config": ""},
                                env_files=[{"var": "train_env_files", "path": "/etc/a.env"},
                                           {"var": "train_nccl", "path": "/etc/nccl.env"}]),
                            ["train.py"])
    assert [(c["var"], c["path"], c["need"], c["kind"], c["who"], c["provided"], c["missing"]) for c in checks] == [
        ("train_python", "/v/bin/python", "x", "file", "account", False, "refuse"),
        ("train_code_dir", "/", "rx", "dir", "account", False, "skip"),        # made by the step where missing
        ("train_script", "/c/train.py", "r", "file", "account", True, "refuse"),  # the copy makes it
        ("train_chdir", "/work", "rx", "dir", "account", False, "refuse"),
        ("train_deepspeed_config", "/c/ds.json", "r", "file", "account", True, "refuse"),
        ("train_env_files", "/etc/a.env", "r", "file", "self", False, "refuse"),  # the launcher reads them
        ("train_nccl", "/etc/nccl.env", "r", "file", "self", False, "refuse"),
    ]


@pytest.mark.parametrize("over, manifest, provided", [
    ({}, ["train.py"], {"train_script": True}),
    # a script outside train_code_dir is never the copy's (say a 0700 temp directory of root's)
    ({"script": "/tmp/tmp.x/p.py"}, ["p.py"], {"train_script": False}),
    # below train_code_dir but not in train_code_src: must be there now
    ({"script": "/c/other.py"}, ["train.py"], {"train_script": False}),
    ({"sync_code": False}, ["train.py"], {"train_script": False}),
    # the manifest is not known here (no probe: slurm, env): below train_code_dir is the copy's
    ({"script": "/c/other.py"}, None, {"train_script": True}),
    # a working directory the copy makes (a directory of train_code_src), the code directory itself
    ({"chdir": "/c/sub"}, ["sub/x.py"], {"train_chdir": True}),
    ({"chdir": "/c/sub"}, ["subx.py"], {"train_chdir": False}),
    ({"chdir": "/c"}, [], {"train_chdir": True}),
    ({"chdir": "/c/"}, [], {"train_chdir": True}),
    ({"chdir": "/c", "sync_code": False}, [], {"train_chdir": False}),
])
def test_job_checks_what_the_code_copy_provides(over, manifest, provided):
    checks = by_var(sec.job_checks(job(**over), manifest))
    assert {var: checks[var]["provided"] for var in provided} == provided


def test_job_checks_module_job_no_chdir_no_code():
    checks = sec.job_checks(job(script="", sync_code=False, refuse_missing=False))
    assert [(c["var"], c["missing"]) for c in checks] == [("train_python", "skip")]
    # config files travel into train_code_dir without the code: the way there is checked
    with_config = sec.job_checks(job(script="", sync_code=False, configs={"train_accelerate_config": "/a/acc.yaml"}))
    assert [c["var"] for c in with_config] == ["train_python", "train_code_dir", "train_accelerate_config"]
    assert with_config[2]["path"] == "/c/acc.yaml" and with_config[2]["provided"] is True


def test_venv_checks():
    assert sec.venv_checks("/v/bin/python", "/v", False, []) == []
    checks = sec.venv_checks("/v/bin/python", "/v/", True, ["/v/lib/python3.11/site-packages"])
    assert [(c["var"], c["path"], c["need"], c["part_of"]) for c in checks] == [
        ("train_venv", "/v/pyvenv.cfg", "r", "train_python"),
        ("train_venv", "/v/lib/python3.11/site-packages", "rx", "train_python")]
    # train_python set apart from train_venv: its own venv, named by train_python
    assert {c["var"] for c in sec.venv_checks("/other/bin/python3", "/v", True, [])} == {"train_python"}


def state(check, st, **extra):
    return dict(check, state=st, **extra)


def test_path_problems_missing_kind_and_self():
    c = by_var(sec.job_checks(job(script="/tmp/x/p.py", chdir="/w",
                                  env_files=[{"var": "train_env_files", "path": "/etc/a.env"}]), ["train.py"]))
    lines = sec.path_problems([
        state(c["train_python"], "missing"),
        state(c["train_code_dir"], "missing"),          # made by the step: no problem
        state(c["train_script"], "dir"),
        state(c["train_chdir"], "file"),
        state(c["train_env_files"], "file", ok=False, error=None, reader="root"),
    ])
    assert lines == [
        'train_python="/v/bin/python": missing on this node; valid: the venv that multinode.training.'
        'wheel_distribute installs (tag prepare)',
        'train_script="/tmp/x/p.py": not a regular file on this node; valid: a file of train_code_src (copied '
        'into train_code_dir), or a file that exists on every node',
        'train_chdir="/w": not a directory on this node; valid: an existing directory on every node, or one that '
        'train_code_src brings into train_code_dir, or empty (the directory of train_script)',
        'train_env_files="/etc/a.env": cannot be read on this node by root, which reads it for the job '
        '(Permission denied); valid: a file the play\'s user can read (mode 0600 is fine: the account of the '
        'job need not read it)',
    ]
    # where the launcher checks for itself (no preflight follows): missing and odd kinds are its to report
    skip = by_var(sec.job_checks(job(refuse_missing=False, chdir="/w"), ["train.py"]))
    assert sec.path_problems([state(skip["train_python"], "missing"), state(skip["train_chdir"], "file")]) == []
    # what the copy provides is not looked at; a path stat refused (unknown) is the account's check
    assert sec.path_problems([state(c["train_script"], "missing", provided=True),
                              state(c["train_chdir"], "unknown")]) == []


def test_account_problems_name_account_variable_and_path():
    lines = sec.account_problems("mtrain", [
        {"var": "train_python", "path": "/v/bin/python", "need": "x", "ok": False, "error": "Permission denied"},
        {"var": "train_venv", "path": "/v/pyvenv.cfg", "need": "r", "ok": False, "part_of": "train_python"},
        {"var": "train_script", "path": "/tmp/tmp.x/p.py", "need": "r", "ok": False, "error": "Permission denied"},
        {"var": "train_chdir", "path": "/root", "need": "rx", "ok": False, "error": None},
        {"var": "train_code_dir", "path": "/opt", "need": "rx", "ok": True, "error": None},
        {"var": "extra", "path": "/d", "need": "w", "ok": False, "error": None},
    ])
    assert lines == [
        "train_user=mtrain: cannot execute train_python=/v/bin/python (Permission denied); valid: a venv the "
        "account can enter and run (group or mode; the one multinode.training.wheel_distribute installs is)",
        # the venv's pyvenv.cfg is not said again where its python is refused
        "train_user=mtrain: cannot read train_script=/tmp/tmp.x/p.py (Permission denied); valid: a file the "
        "account can read (group or mode), or train_code_src to copy it into train_code_dir",
        "train_user=mtrain: cannot enter train_chdir=/root (Permission denied); valid: a directory the account "
        "can enter (group or mode), or empty (the directory of train_script)",
        "train_user=mtrain: cannot write extra=/d (Permission denied); valid: paths the account can reach "
        "(group or mode)",
    ]
    # its python runs, its venv's files do not reach the account: said once
    assert sec.account_problems("mtrain", [
        {"var": "train_python", "path": "/v/bin/python", "need": "x", "ok": True},
        {"var": "train_venv", "path": "/v/pyvenv.cfg", "need": "r", "ok": False, "part_of": "train_python"},
        {"var": "train_venv", "path": "/v/lib/python3.11/site-packages", "need": "rx", "ok": False,
         "part_of": "train_python"},
    ]) == ["train_user=mtrain: cannot read train_venv=/v/pyvenv.cfg (Permission denied); valid: a venv the "
           "account can enter and run (group or mode; the one multinode.training.wheel_distribute installs is)"]


# ------------------------------------------------------------------ ports

@pytest.mark.parametrize("text, expected", [
    ("", {22}),
    ("#Port 22\nPermitRootLogin no\n", {22}),
    ("Port 2222\n", {2222}),
    ("port 22\nPort 2200 # second\n", {22, 2200}),
])
def test_parse_sshd_ports(text, expected):
    assert sec.parse_sshd_ports(text) == expected


def test_port_problem():
    assert sec.port_problem(29400, {22}) is None
    message = sec.port_problem(22, {22, 2222})
    assert message.startswith("train_rdzv_port=22: collides with ssh (ports 22,2222 on this node); valid:")
    assert "collides" in sec.port_problem("2222", [2222])


# ------------------------------------------------------------------ firewall decision

@pytest.mark.parametrize("requested, nft, iptables, root, enabled, fragment", [
    ("auto", "/usr/sbin/nft", None, True, True, "nftables table per job"),
    ("auto", None, None, True, False, "train_firewall=auto: off, neither nft nor iptables found"),
    ("auto", None, "/usr/sbin/iptables", True, False, "only iptables found"),
    ("auto", "/usr/sbin/nft", None, False, False, "does not run as root"),
    (False, "/usr/sbin/nft", None, True, False, "open to any host"),
    ("auto", "/usr/sbin/nft", None, True, False, "nft cannot change the ruleset here (Operation not permitted"),
    ("true", "/usr/sbin/nft", None, True, True, "nftables"),
    (True, "/usr/sbin/nft", "/usr/sbin/iptables", True, True, "nftables"),
])
def test_decide_firewall(requested, nft, iptables, root, enabled, fragment):
    error = "Operation not permitted" if enabled is False and "cannot change" in fragment else None
    decision = sec.decide_firewall(requested, nft, iptables, root, error)
    assert decision["enabled"] is enabled
    assert fragment in decision["note"]


@pytest.mark.parametrize("nft, iptables, root, fragment", [
    (None, None, True, "train_firewall=true: neither nft nor iptables found"),
    (None, "/usr/sbin/iptables", True, "train_firewall=true: only iptables found (/usr/sbin/iptables)"),
    ("/usr/sbin/nft", None, False, "train_firewall=true: the play does not run as root"),
])
def test_decide_firewall_true_refused(nft, iptables, root, fragment):
    with pytest.raises(sec.SecurityError, match=r"valid: install nftables"):
        sec.decide_firewall("true", nft, iptables, root)
    with pytest.raises(sec.SecurityError) as info:
        sec.decide_firewall(True, nft, iptables, root)
    assert fragment in str(info.value)


def test_decide_firewall_nft_not_permitted():
    with pytest.raises(sec.SecurityError, match=r"nft cannot change the ruleset here \(netlink: Error: Operation"):
        sec.decide_firewall("true", "/usr/sbin/nft", None, True, "netlink: Error: Operation not permitted")


def test_firewall_bad_value():
    with pytest.raises(sec.SecurityError, match="train_firewall='maybe': valid: auto, true, false"):
        sec.normalize_firewall("maybe")


# ------------------------------------------------------------------ nftables rendering

def test_table_name_distinct_and_valid():
    a, b = sec.table_name("verify-abc"), sec.table_name("verify.abc")
    assert a != b
    assert a.startswith("mt_verify_abc_") and len(a) == len("mt_verify_abc_") + 8
    assert sec.table_name("x" * 128).count("x") == 40


def test_split_members():
    assert sec.split_members(["172.18.0.3", "172.18.0.2", "[fd00::1]", "172.18.0.3"]) == \
        (["172.18.0.2", "172.18.0.3"], ["fd00::1"])
    with pytest.raises(sec.SecurityError, match="firewall member 'node1': not an IP address"):
        sec.split_members(["node1"])


def test_render_table():
    script = sec.render_table("mt_j_1", 29400, ["10.0.0.2", "10.0.0.1"], 60)
    lines = script.splitlines()
    # Replaces a table of the same name in the same transaction, and nothing else.
    assert lines[:3] == ["add table inet mt_j_1", "delete table inet mt_j_1", "table inet mt_j_1 {"]
    assert "  set members4 { type ipv4_addr; elements = { 10.0.0.1, 10.0.0.2 }; }" in lines
    assert "  set members6 { type ipv6_addr; }" in lines
    assert "  set guard { type inet_service; flags timeout; elements = { 29400 timeout 60s }; }" in lines
    # Members pass, everyone else is reset; only the guarded port is matched.
    rules = [line.strip() for line in lines if "dport" in line]
    assert rules == ["tcp dport @guard ip saddr @members4 accept",
                     "tcp dport @guard ip6 saddr @members6 accept",
                     "tcp dport @guard counter reject with tcp reset"]
    assert "policy accept" in script


def test_render_refresh_and_delete():
    assert sec.render_refresh("mt_j_1", 29400, 30) == \
        "flush set inet mt_j_1 guard\nadd element inet mt_j_1 guard { 29400 timeout 30s }\n"
    assert sec.render_delete("mt_j_1") == "add table inet mt_j_1\ndelete table inet mt_j_1\n"


@pytest.mark.skipif(not shutil.which("nft") or os.geteuid() != 0, reason="needs nft and root (nft -c)")
def test_nft_accepts_the_scripts():
    table = sec.table_name("unit-test-check")
    for script in (sec.render_table(table, 29400, ["10.0.0.1", "fd00::2"], 60),
                   sec.render_table(table, [29400, 29401], ["10.0.0.1", "fd00::2"], 60), sec.render_delete(table)):
        done = subprocess.run(["nft", "-c", "-f", "-"], input=script.encode(), capture_output=True, check=False)
        if b"Operation not permitted" in done.stderr:
            pytest.skip("nft -c needs CAP_NET_ADMIN here")
        assert done.returncode == 0, done.stderr


def test_parse_tables_fixture():
    tables = sec.parse_tables((FIX / "list_tables.json").read_text())
    assert tables == [("inet", "filter"), ("ip", "nat"), ("inet", "mt_verify_abc_6df0ddbd"),
                      ("inet", "mt_other_job_12345678")]
    assert sec.job_tables(tables) == ["mt_verify_abc_6df0ddbd", "mt_other_job_12345678"]
    assert sec.job_tables(tables, "verify-abc") == ["mt_verify_abc_6df0ddbd"]
    assert sec.job_tables(tables, "verify-abd") == []
    assert sec.parse_tables((FIX / "list_tables_none.json").read_text()) == []
    assert sec.parse_tables("") == []


# ------------------------------------------------------------------ secrets rule

@pytest.mark.parametrize("key, secret", [
    ("HF_TOKEN", True), ("WANDB_API_KEY", True), ("aws_secret_access_key", True), ("DB_PASSWORD", True),
    ("NCCL_SOCKET_IFNAME", False), ("MASTER_PORT", False), ("LOGLEVEL", False),
])
def test_secret_keys(key, secret):
    assert tr.is_secret_key(key) is secret


# ------------------------------------------------------------------ keeper (a real process, a stand-in nft)

def _fake_nft(tmp_path):
    log = tmp_path / "nft.log"
    nft = tmp_path / "nft"
    nft.write_text("#!/bin/sh\n{ echo \"== $*\"; cat; } >> %s\n" % log)
    nft.chmod(nft.stat().st_mode | stat.S_IEXEC)
    return str(nft), log


def _wait_for(predicate, limit=10.0):
    deadline = time.time() + limit
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def test_keeper_refreshes_then_deletes_when_the_supervisor_ends(tmp_path):
    nft, log = _fake_nft(tmp_path)
    supervisor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(2.5)"])
    keeper = subprocess.Popen([sys.executable, SUPERVISOR, "keep", nft, str(supervisor.pid),
                               str(tmp_path / "result.json"), "3", sec.render_refresh("mt_t_1", 29400, 3),
                               sec.render_delete("mt_t_1")])
    try:
        assert keeper.wait(timeout=15) == 0
    finally:
        supervisor.wait()
    text = log.read_text()
    assert "flush set inet mt_t_1 guard" in text  # renewed at least once while the supervisor lived
    assert text.rstrip().endswith("delete table inet mt_t_1")


def test_keeper_deletes_once_result_json_exists(tmp_path):
    nft, log = _fake_nft(tmp_path)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    keeper = subprocess.Popen([sys.executable, SUPERVISOR, "keep", nft, str(sleeper.pid),
                               str(tmp_path / "result.json"), "60", "refresh\n", sec.render_delete("mt_t_2")])
    try:
        time.sleep(1.0)
        assert keeper.poll() is None
        (tmp_path / "result.json").write_text("{}")
        assert keeper.wait(timeout=10) == 0
        assert _wait_for(lambda: "delete table inet mt_t_2" in log.read_text())
    finally:
        sleeper.kill()
        sleeper.wait()


def test_render_table_guards_the_watch_port_too():
    script = sec.render_table("mt_j_1", [29400, 29401], ["10.0.0.1"], 60)
    assert "  set guard { type inet_service; flags timeout; elements = { 29400 timeout 60s, 29401 timeout 60s }; }" \
        in script.splitlines()
    assert sec.render_refresh("mt_j_1", [29401, 29400], 30) == \
        "flush set inet mt_j_1 guard\nadd element inet mt_j_1 guard { 29400 timeout 30s, 29401 timeout 30s }\n"
    with pytest.raises(sec.SecurityError, match="no port to guard"):
        sec.render_table("mt_j_1", [], ["10.0.0.1"], 60)
