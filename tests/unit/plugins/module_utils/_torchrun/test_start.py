"""Unit tests for the torchrun module's start: its decisions (plugins/module_utils/_torchrun/start.py: what it
refuses and with which message, the environment, argv, account and record it plans) and the sequence that runs
them with the module (_torchrun/job.py ``run_module``), on a stand-in module: nothing is spawned."""
from __future__ import annotations

import grp
import json
import os
import pwd
import shutil
import socket
import sys

import pytest

from ansible_collections.multinode.training.plugins.module_utils._node.torchrun import MASK
from ansible_collections.multinode.training.plugins.module_utils._torchrun import job as job_mod
from ansible_collections.multinode.training.plugins.module_utils._torchrun import start as start_mod
from ansible_collections.multinode.training.plugins.module_utils._torchrun.errors import JobError
from ansible_collections.multinode.training.plugins.module_utils._torchrun.job import ARGUMENT_SPEC
from ansible_collections.multinode.training.plugins.module_utils._train.security import render_delete, table_name
from tests.unit.conftest import FIXTURES
from tests.unit.plugins.module_utils.stand_in import Exit, StandInModule

ME = pwd.getpwuid(os.geteuid()).pw_name
NOBODY = "mt-no-such-user-%d" % os.getpid()
HOST = socket.gethostname()


def _params(**given):
    """The module's options: ARGUMENT_SPEC's defaults with ``given`` over them."""
    return dict({name: option.get("default") for name, option in ARGUMENT_SPEC.items()}, **given)


def _refusal(call, *args):
    with pytest.raises(JobError) as refused:
        call(*args)
    return str(refused.value)


# ------------------------------------------------------------------ the refusals of O(state)

@pytest.mark.parametrize("state, job, has_code, follow_limit, message", [
    ("status", None, True, 0, "job_id=j1: no such job on n1 (no /l/j1/job.json); valid: the id of a job started "
                              "on this node"),
    ("finished", None, True, 30, "job_id=j1: no such job on n1 (no /l/j1/job.json); valid: the id of a job "
                                 "started on this node"),
    ("finished", None, False, 0, "job j1 was never started on n1 and neither script nor module is set"),
    ("finished", None, True, 0, None),
    ("started", None, False, 0, None),
    ("stopped", None, False, 30, None),
    ("status", {"pid": 1}, False, 0, None),
    ("finished", {"pid": 1}, False, 30, None),
])
def test_check_state_refuses_what_this_node_has_no_job_for(state, job, has_code, follow_limit, message):
    args = (state, job, has_code, follow_limit, "j1", "/l/j1/job.json", "n1")
    if message is None:
        assert start_mod.check_state(*args) is None
    else:
        assert _refusal(start_mod.check_state, *args) == message


def test_started_again_runs_on_or_refuses_a_reused_id():
    assert start_mod.started_again("j1", "/l/j1", "n1", True) == "job j1 is running already"
    assert _refusal(start_mod.started_again, "j1", "/l/j1", "n1", False) == (
        "job id j1 was used before on n1 (/l/j1): rendezvous ids must not be reused, pick a new one")


# ------------------------------------------------------------------ the inputs on the node

def test_check_start_names_each_missing_input(tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("")
    ok = _params(python=sys.executable, script="train.py", chdir=str(code), args=["--x", "1"])
    assert start_mod.check_start(ok, "n1") == (sys.executable, str(code))
    assert _refusal(start_mod.check_start, dict(ok, python=None, venv="/nonexistent/venv"), "n1") == (
        "python /nonexistent/venv/bin/python not found or not executable on n1: is the venv there (role "
        "multinode.training.wheel_distribute, variable venv/python)?")
    assert _refusal(start_mod.check_start, dict(ok, chdir=str(tmp_path / "none")), "n1") == (
        "chdir %s is not a directory on n1" % (tmp_path / "none"))
    assert _refusal(start_mod.check_start, dict(ok, script="other.py"), "n1") == (
        "script %s does not exist on n1" % (code / "other.py"))
    assert _refusal(start_mod.check_start, dict(ok, script="/srv/train.py"), "n1") == (
        "script /srv/train.py does not exist on n1")
    assert _refusal(start_mod.check_start, dict(ok, args="--x 1"), "n1") == (
        "args='--x 1' on n1: must be a list; each item reaches the script as one argument")
    # O(module) instead of a script: no file to look for
    assert start_mod.check_start(_params(python=sys.executable, module="pkg.train"), "n1") == (sys.executable, None)


def test_job_env_and_plan_argv_name_the_node():
    assert _refusal(start_mod.job_env, _params(env_files=["/nonexistent.env"]), "j1", "/l/j1", "n1") == (
        "env_files: /nonexistent.env does not exist (for the NCCL file: apply role multinode.training.nccl_tuning "
        "first) (on n1)")
    params = _params(script="/srv/train.py", rdzv_id="j1")
    env = start_mod.job_env(params, "j1", "/l/j1", "n1")[0]
    assert _refusal(start_mod.plan_argv, params, "py", "j1", "/l/j1", env, 0, "n1") == (
        "nproc_per_node=auto: no GPU found on this node and cpu_nproc is not set (on n1)")
    assert _refusal(start_mod.plan_argv, dict(params, nnodes="2", nproc_per_node="1"), "py", "j1", "/l/j1", env,
                    None, "n1") == "rdzv_endpoint is required when nnodes='2' spans more than one node (on n1)"


def test_plan_argv_runs_the_script_through_the_rank_wrapper_with_the_jobs_rendezvous():
    params = _params(script="/srv/train.py", nnodes="2", nproc_per_node="auto", cpu_nproc=3, job_id="j1",
                     rdzv_endpoint="10.0.0.1:29400", args=["--steps", "5"])
    env = {"CUDA_VISIBLE_DEVICES": "0,1"}
    argv, nproc = start_mod.plan_argv(params, "/venv/bin/python", "j1", "/l/j1", env, 8, "n1")
    assert nproc == 2
    assert argv[:3] == ["/venv/bin/python", "-m", "torch.distributed.run"]
    assert argv[argv.index("--rdzv_id") + 1] == "j1"  # rdzv_id unset: the job id
    assert argv[argv.index("--rdzv_endpoint") + 1] == "10.0.0.1:29400"
    assert argv[argv.index("--log_dir") + 1] == "/l/j1/ranks"
    assert argv[-4:] == ["/l/j1/mt_rank.py", "/srv/train.py", "--steps", "5"]
    # without GPUs: cpu_nproc ranks
    assert start_mod.plan_argv(params, "/venv/bin/python", "j1", "/l/j1", {}, 0, "n1")[1] == 3


# ------------------------------------------------------------------ the account and the record

def test_resolve_account_names_what_is_missing(monkeypatch):
    assert start_mod.resolve_account(None, None, "n1") is None
    assert start_mod.resolve_account(ME, None, "n1") is None  # the module's own user: nothing to switch
    assert _refusal(start_mod.resolve_account, NOBODY, None, "n1") == (
        "user=%s (train_user) does not exist on n1" % NOBODY)
    assert _refusal(start_mod.resolve_account, ME, NOBODY, "n1") == (
        "group=%s (train_group) does not exist on n1" % NOBODY)
    other = [entry for entry in pwd.getpwall() if entry.pw_uid != os.geteuid()][0]
    monkeypatch.setattr(os, "geteuid", lambda: 4242)
    assert _refusal(start_mod.resolve_account, other.pw_name, None, "n1") == (
        "user=%s (train_user) on n1: the module runs as uid 4242 and cannot switch; run it with become"
        % other.pw_name)


def test_resolve_account_of_another_user_as_root(monkeypatch):
    other = [entry for entry in pwd.getpwall() if entry.pw_uid != 0][0]
    group = grp.getgrgid(0).gr_name
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    account = start_mod.resolve_account(other.pw_name, group, "n1")
    assert (account["name"], account["uid"], account["gid"], account["home"]) == (
        other.pw_name, other.pw_uid, 0, other.pw_dir)
    assert 0 in account["groups"]


def test_job_record_masks_secrets_and_names_the_account():
    params = _params(timeout=60, stop_grace=5)
    argv = ["py", "-m", "torch.distributed.run", "/srv/train.py", "--token", "s3cret"]
    job = start_mod.job_record(params, "j1", "n1", argv, ["s3cret"], 2, None, None)
    assert job == {"job_id": "j1", "cmd": argv[:-1] + [MASK], "nproc_per_node": 2, "timeout": 60, "stop_grace": 5,
                   "host": "n1", "user": ME}
    account = {"name": "mtrain", "uid": 1, "gid": 1, "groups": [1], "home": "/home/mtrain"}
    job = start_mod.job_record(params, "j1", "n1", argv, [], 8, 8, account)
    assert (job["user"], job["gpu_count"], job["cmd"]) == ("mtrain", 8, argv)


# ------------------------------------------------------------------ the sequence in job.py, on a stand-in module

class _Node(StandInModule):
    """The torchrun module on a node: ``tools`` maps a binary to its path (None: not installed); every
    get_bin_path and run_command is recorded, run_command answers from ``answers`` in order."""

    def __init__(self, check_mode=False, tools=None, answers=(), **params):
        super().__init__(ARGUMENT_SPEC, check_mode=check_mode, **params)
        self.no_log_values = set()
        self.tools = tools or {}
        self.answers = list(answers)
        self.calls = []

    def get_bin_path(self, name):
        self.calls.append(name)
        return self.tools.get(name)

    def run_command(self, argv, **kwargs):
        self.calls.append((argv, kwargs.get("data")))
        return self.answers.pop(0)


def _run(module):
    with pytest.raises(Exit):
        job_mod.run_module(module)
    return module.result


def test_a_refusal_of_the_start_returns_the_result_so_far(tmp_path):
    logs = str(tmp_path / "logs")
    result = _run(_Node(state="started", job_id="j1", log_dir=logs, python="/nonexistent/python",
                        script="/srv/train.py"))
    assert result == {"failed": True, "changed": False, "job_id": "j1", "job_dir": os.path.join(logs, "j1"),
                      "msg": "python /nonexistent/python not found or not executable on %s: is the venv there (role "
                             "multinode.training.wheel_distribute, variable venv/python)?" % HOST}
    assert not os.path.exists(logs)


def test_check_mode_plans_the_start_and_starts_nothing(tmp_path):
    (tmp_path / "train.py").write_text("")
    logs = str(tmp_path / "logs")
    module = _Node(check_mode=True, state="started", job_id="j1", log_dir=logs, python=sys.executable,
                   script=str(tmp_path / "train.py"), nproc_per_node="2", env={"HF_TOKEN": "s3cret"},
                   args=["--token", "s3cret"])
    result = _run(module)
    assert result["changed"] is True and "failed" not in result
    assert (result["pid"], result["nproc_per_node"], result["user"], result["firewall_table"]) == (None, 2, ME, None)
    assert result["cmd"][-2:] == ["--token", MASK]
    assert "s3cret" in module.no_log_values
    assert module.calls == [] and not os.path.exists(logs)  # no nvidia-smi for a fixed count, no nft


def test_check_mode_with_the_firewall_guard_needs_nft_and_root(tmp_path, monkeypatch):
    (tmp_path / "train.py").write_text("")
    options = dict(check_mode=True, state="started", job_id="j1", log_dir=str(tmp_path / "logs"),
                   python=sys.executable, script=str(tmp_path / "train.py"), nproc_per_node="auto", cpu_nproc=1,
                   firewall_allow=["10.0.0.1"])
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    module = _Node(tools={"nft": None}, **options)
    assert _run(module)["msg"] == ("firewall_allow (train_firewall) on %s: needs nft (package nftables) and root; "
                                   "found nft=None, uid 0" % HOST)
    assert module.calls == ["nvidia-smi", "nft"]
    result = _run(_Node(tools={"nft": "/usr/sbin/nft"}, **options))
    assert result["firewall_table"] == table_name("j1") and result["nproc_per_node"] == 1


def test_a_launch_that_fails_removes_the_firewall_guard_first(tmp_path, monkeypatch):
    """A job directory that exists (a reused id without job.json) fails the launch after the guard was made:
    the guard's table is deleted, then the module fails naming the directory."""
    (tmp_path / "train.py").write_text("")
    job_dir = tmp_path / "logs" / "j1"
    job_dir.mkdir(parents=True)
    table = table_name("j1")
    listed = json.dumps({"nftables": [{"table": {"family": "inet", "name": table}}]})
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    module = _Node(state="started", job_id="j1", log_dir=str(tmp_path / "logs"), python=sys.executable,
                   script=str(tmp_path / "train.py"), nproc_per_node="1", firewall_allow=["10.0.0.1"],
                   rdzv_endpoint="10.0.0.1:29400", nnodes="2", tools={"nft": "/usr/sbin/nft"},
                   answers=[(0, "", ""), (0, listed, ""), (0, "", "")])
    result = _run(module)
    assert result["msg"].startswith("cannot create job directory %s on %s: " % (job_dir, HOST))
    assert result["msg"].endswith("(a reused job id?)") and result["job_id"] == "j1"
    made, listing, deleted = [call for call in module.calls if isinstance(call, tuple)]
    assert made[0] == ["/usr/sbin/nft", "-f", "-"] and "add table inet %s" % table in made[1]
    assert listing[0] == ["/usr/sbin/nft", "-j", "list", "tables"]
    assert deleted == (["/usr/sbin/nft", "-f", "-"], render_delete(table))
    # the guard's tool and table, the launch's failure, then the guard's removal: find the tool, list, delete
    assert [call if isinstance(call, str) else call[0][1] for call in module.calls] == ["nft", "-f", "nft", "-j", "-f"]


def test_a_start_of_a_finished_job_id_is_refused(tmp_path):
    job_dir = tmp_path / "logs" / "fixture-ok-14063"
    shutil.copytree(str(FIXTURES / "torchrun" / "jobs" / "ok_1node"), str(job_dir))
    result = _run(_Node(state="started", job_id="fixture-ok-14063", log_dir=str(tmp_path / "logs")))
    assert result["msg"] == ("job id fixture-ok-14063 was used before on %s (%s): rendezvous ids must not be "
                             "reused, pick a new one" % (HOST, job_dir))
    assert (result["pid"], result["nproc_per_node"]) == (31892, 2)
