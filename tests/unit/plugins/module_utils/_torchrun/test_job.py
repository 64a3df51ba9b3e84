"""Unit tests for plugins/module_utils/_torchrun/ (the torchrun module's job logic: start.py, jobdir.py,
firewall.py, proc.py, wait.py, collect.py), on recorded job directories.

tests/fixtures/torchrun/jobs/ holds two job directories copied from real runs of
`ansible-playbook train.yml --skip-tags prepare,nccl` (embedded default: one node,
2 CPU ranks, torch 2.13.0+cpu, train_user mtrain):
  ok_1node/   the smoke job with DeepSpeed ZeRO-2, succeeded;
  fail_rank1/ the smoke job with `--skip-deepspeed --fail-rank 1`: rank 1 raised at step 1.
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import time

import pytest

from ansible_collections.multinode.training.plugins.module_utils._node import watchlib as _watchlib
from ansible_collections.multinode.training.plugins.module_utils._torchrun import firewall, jobdir, proc
from ansible_collections.multinode.training.plugins.module_utils._torchrun import follow as fol
from ansible_collections.multinode.training.plugins.module_utils._torchrun import start as start_mod
from ansible_collections.multinode.training.plugins.module_utils._torchrun import wait as wait_mod
from ansible_collections.multinode.training.plugins.module_utils._node import supervisor as sup
from ansible_collections.multinode.training.plugins.module_utils._node.torchrun import TorchrunError
from ansible_collections.multinode.training.plugins.module_utils._torchrun.collect import collect, rank_dirs, read_json
from ansible_collections.multinode.training.plugins.module_utils._torchrun import job as job_mod
from ansible_collections.multinode.training.plugins.module_utils._torchrun.errors import JobError
from ansible_collections.multinode.training.plugins.module_utils._torchrun.job import ARGUMENT_SPEC
from tests.unit.conftest import FIXTURES
from tests.unit.plugins.module_utils.stand_in import Exit, StandInModule

JOBS = FIXTURES / "torchrun" / "jobs"


def job_copy(tmp_path, name):
    target = tmp_path / name
    shutil.copytree(str(JOBS / name), str(target))
    return str(target)


def load(job_dir, name):
    return read_json(os.path.join(job_dir, name))


def _params(**given):
    """The module's options: ARGUMENT_SPEC's defaults with ``given`` over them."""
    return dict({name: option.get("default") for name, option in ARGUMENT_SPEC.items()}, **given)


# ------------------------------------------------------------------ collect on recorded job directories

def test_rank_dirs_of_a_recorded_job():
    dirs = rank_dirs(str(JOBS / "ok_1node"))
    assert sorted(dirs) == [0, 1]
    assert dirs[1].endswith(os.path.join("attempt_0", "1"))


def test_collect_success():
    job_dir = str(JOBS / "ok_1node")
    out = collect(job_dir, load(job_dir, "job.json"), load(job_dir, "result.json"), 10, "vm")
    assert out["rc"] == 0 and out["world_size"] == 2 and out["group_rank"] == 0
    assert [(r["local_rank"], r["rank"], r["state"]) for r in out["ranks"]] == [(0, 0, "succeeded"), (1, 1, "succeeded")]
    assert out["failures"] == [] and "root_cause" not in out
    assert out["duration"] == pytest.approx(26.904, abs=0.01)
    assert all(os.path.isfile(r["stdout"]) for r in out["ranks"])


def test_collect_failure_names_rank_message_and_tail():
    job_dir = str(JOBS / "fail_rank1")
    out = collect(job_dir, load(job_dir, "job.json"), load(job_dir, "result.json"), 5, "vm")
    assert out["rc"] == 1
    assert out["root_cause"]["rank"] == 1 and out["root_cause"]["exitcode"] == 1
    assert out["root_cause"]["message"] == "RuntimeError: injected failure on rank 1 at step 1"
    assert out["root_cause"]["peer"] is False
    assert out["root_cause_line"] == "rank 1 (local_rank 1) on vm exited 1: RuntimeError: injected failure on rank 1 at step 1"
    assert out["root_cause"]["error_file"].endswith(os.path.join("attempt_0", "1", "error.json"))
    assert len(out["log_tail"].splitlines()) == 5 and "injected failure" in out["log_tail"]
    states = {r["local_rank"]: r["state"] for r in out["ranks"]}
    assert states[1] == "failed"


def test_collect_names_a_failure_only_the_ranks_own_record_holds(tmp_path):
    """A torchrun that a signal ended before its summary (slurm_2node_signalled/n2, see its record.py): the
    rank wrapper's exit record names the failure. A succeeded job names none, and neither does a rank
    that left no record (rank 2 here, killed), nor one whose failure torchrun's summary already names."""
    job_dir = job_copy(tmp_path, "slurm_2node_signalled")
    node = os.path.join(job_dir, "n2")
    out = collect(node, load(node, "job.json"), load(node, "result.json"), 5, "n2")
    assert out["rc"] == 1
    assert [(f["rank"], f["local_rank"], f["exitcode"], f["peer"]) for f in out["failures"]] == [(3, 1, 1, False)]
    assert out["root_cause_line"] == "rank 3 (local_rank 1) on n2 exited 1: RuntimeError: injected failure on rank 3 at step 2"
    assert out["root_cause"]["timestamp"] == pytest.approx(1796191510.17, abs=0.01)
    assert "injected failure" in out["log_tail"]
    assert collect(node, load(node, "job.json"), dict(load(node, "result.json"), rc=0), 5, "n2")["failures"] == []
    shutil.rmtree(os.path.join(node, "exits"))
    assert collect(node, load(node, "job.json"), load(node, "result.json"), 5, "n2")["root_cause"] is None
    # a failure torchrun's summary names is read from there (error file, time), not twice
    recorded = job_copy(tmp_path, "fail_rank1")
    os.makedirs(os.path.join(recorded, "exits"))
    for kind, data in (("start", {"pid": 0, "rank": 1, "local_rank": 1}),
                       ("exit", {"exitcode": 1, "message": "RuntimeError: injected failure on rank 1 at step 1",
                                 "time": 1.0, "rank": 1, "local_rank": 1})):
        with open(os.path.join(recorded, "exits", "0_1." + kind), "w") as handle:
            json.dump(data, handle)
    out = collect(recorded, load(recorded, "job.json"), load(recorded, "result.json"), 5, "vm")
    assert len(out["failures"]) == 1 and out["root_cause"]["error_file"] and "source" not in out["root_cause"]


def test_collect_without_result_json_reports_unknown():
    job_dir = str(JOBS / "ok_1node")
    out = collect(job_dir, load(job_dir, "job.json"), None, 5, "vm")
    assert out["rc"] is None and out["duration"] is None
    assert out["root_cause"] is None and out["root_cause_line"] == "torchrun failed on vm (no rank failure recorded; see torchrun.log)"


# ------------------------------------------------------------------ verdict

def _collected(name):
    job_dir = str(JOBS / name)
    job = load(job_dir, "job.json")
    data = load(job_dir, "result.json")
    return job, job_dir, data, collect(job_dir, job, data, 5, "vm")


def test_verdict_success():
    job, job_dir, data, result = _collected("ok_1node")
    assert wait_mod.verdict(job, "vm", job_dir, result, data, False, False, 3600, 30) == (False, None, None)
    assert result["exit_barrier_abandoned"] is False


def test_verdict_failure_message_names_rank_and_error():
    job, job_dir, data, result = _collected("fail_rank1")
    failed, msg, warning = wait_mod.verdict(job, "vm", job_dir, result, data, False, False, 3600, 30)
    assert failed and warning is None
    assert msg == ("job fixture-fail-1 failed on vm: rank 1 (local_rank 1) on vm exited 1: "
                   "RuntimeError: injected failure on rank 1 at step 1")


def test_verdict_missing_result_names_supervisor_and_log():
    job, job_dir, _data, result = _collected("ok_1node")
    failed, msg, _warning = wait_mod.verdict(job, "vm", job_dir, result, None, False, False, 3600, 30)
    assert failed and "supervisor (pid %s) ended without recording a result" % job["pid"] in msg
    assert msg.endswith(job_dir + "/torchrun.log")


def test_verdict_gave_up_is_a_timeout():
    job, job_dir, data, result = _collected("ok_1node")
    failed, msg, _warning = wait_mod.verdict(job, "vm", job_dir, result, None, True, False, 60, 30)
    assert failed and msg == "job fixture-ok-14063 timed out after 60s on vm and was stopped"
    assert result["timed_out"] is True


def test_verdict_abandoned_barrier_without_failures_is_success_with_warning():
    job, job_dir, data, result = _collected("ok_1node")
    result.update(rc=-15, stopped=True)
    for entry in result["ranks"]:
        entry.update(state="terminated", exitcode=-15)
    failed, msg, warning = wait_mod.verdict(job, "vm", job_dir, result, data, False, True, 3600, 30)
    assert not failed and msg is None and "exit barrier was abandoned after 30s" in warning
    assert result["rc"] == 0 and {r["state"] for r in result["ranks"]} == {"succeeded"}


def test_verdict_abandoned_barrier_with_a_failure_still_fails():
    job, job_dir, data, result = _collected("fail_rank1")
    failed, msg, warning = wait_mod.verdict(job, "vm", job_dir, result, data, False, True, 3600, 30)
    assert failed and "injected failure" in msg and warning is None


def test_verdict_stopped_without_failures():
    job, job_dir, data, result = _collected("ok_1node")
    result.update(rc=-15, stopped=True)
    failed, msg, _warning = wait_mod.verdict(job, "vm", job_dir, result, dict(data, rc=-15), False, False, 0, 30)
    assert failed and msg == "job fixture-ok-14063 was stopped on vm (rc -15)"


def test_limits_are_the_modules_else_the_starts():
    assert wait_mod.limits(_params(timeout=0, stop_grace=15), {"timeout": 3600, "stop_grace": 30}) == (3600, 30)
    assert wait_mod.limits(_params(timeout=60, stop_grace=15), {"timeout": 3600}) == (60, 15)
    assert wait_mod.limits(_params(timeout=0, stop_grace=15), {}) == (0, 15)


def test_survivors_are_named_with_their_count():
    described = [{"pid": 7, "cmdline": "python train.py"}]
    assert wait_mod.survived("j1", "vm", described) == (
        "job j1: 1 process(es) survived SIGKILL on vm: [{'pid': 7, 'cmdline': 'python train.py'}]")


def test_a_stop_records_the_end_only_where_the_supervisor_did_not(tmp_path):
    job_dir = job_copy(tmp_path, "ok_1node")
    before = load(job_dir, "result.json")
    wait_mod.record_stop({"job_id": "j", "start": 5.0}, job_dir, [1])
    assert load(job_dir, "result.json") == before
    os.unlink(os.path.join(job_dir, "result.json"))
    wait_mod.record_stop({"job_id": "j", "start": 5.0}, job_dir, [1, 2])
    record = load(job_dir, "result.json")
    assert (record["rc"], record["stopped"], record["leftovers_killed"], record["start"]) == (None, True, [1, 2], 5.0)


# ------------------------------------------------------------------ environment, GPUs, argv

def test_build_env_files_then_env_then_markers(tmp_path):
    extra = tmp_path / "extra.env"
    extra.write_text("NCCL_DEBUG=WARN\nHF_TOKEN=s3cr3t\n")
    env, secrets = start_mod.build_env([str(FIXTURES / "torchrun" / "nccl.env"), str(extra)],
                                       {"A": 1, "B": None, "API_KEY": "k"}, "j1", "/logs/j1",
                                       {"PATH": "/usr/bin", "NCCL_DEBUG": "TRACE"})
    assert env["NCCL_SOCKET_IFNAME"] == "eth0" and env["NCCL_IB_HCA"] == "mlx5_0,mlx5_1"
    assert env["NCCL_DEBUG"] == "WARN"  # the later file wins over the first and over the node's environment
    assert env["A"] == "1" and env["B"] == "" and env["PATH"] == "/usr/bin"
    assert env["MULTINODE_TRAINING_JOB"] == "j1" and env["MULTINODE_TRAINING_JOB_DIR"] == "/logs/j1"
    assert env["TORCHELASTIC_ERROR_FILE"] == "/logs/j1/torchrun_error.json"
    assert env["LOGLEVEL"] == "INFO" and env["PYTHONUNBUFFERED"] == "1"
    assert sorted(secrets) == ["k", "s3cr3t"]


def test_build_env_reads_an_env_file_that_is_a_link(tmp_path):
    """An env file is the operator's, not the job's: a link (a mounted secret, ..data/env) is read,
    unlike a link in the job directory."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "env").write_text("HF_TOKEN=s3cr3t\n")
    os.symlink(str(tmp_path / "data" / "env"), str(tmp_path / "secret.env"))
    env, secrets = start_mod.build_env([str(tmp_path / "secret.env")], {}, "j1", "/logs/j1", {})
    assert env["HF_TOKEN"] == "s3cr3t" and secrets == ["s3cr3t"]


def test_build_env_keeps_a_loglevel_the_user_set():
    env, secrets = start_mod.build_env([], {"LOGLEVEL": "WARNING"}, "j", "/d", {"PYTHONUNBUFFERED": "0"})
    assert env["LOGLEVEL"] == "WARNING" and env["PYTHONUNBUFFERED"] == "0" and secrets == []


def test_build_env_turns_the_flight_recorder_on_for_every_job():
    env = start_mod.build_env([], {}, "j", "/d", {})[0]
    # GPU timing stays the user's choice: it has stopped NCCL kernels overlapping with compute
    assert env["TORCH_FR_BUFFER_SIZE"] == "2000" and "TORCH_NCCL_ENABLE_TIMING" not in env
    mine = start_mod.build_env([], {"TORCH_FR_BUFFER_SIZE": "50", "TORCH_NCCL_ENABLE_TIMING": "1"}, "j", "/d", {})[0]
    assert mine["TORCH_FR_BUFFER_SIZE"] == "50" and mine["TORCH_NCCL_ENABLE_TIMING"] == "1"


def test_build_env_unshares_the_rendezvous_store_only_for_a_restartable_job():
    # pytorch #135712: a restarted group reads the previous group's keys from the shared store.
    static = start_mod.build_env([], {}, "j", "/d", {})[0]
    restartable = start_mod.build_env([], {}, "j", "/d", {}, max_restarts=2)[0]
    user_choice = start_mod.build_env([], {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "0"}, "j", "/d", {},
                                      max_restarts=2)[0]
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in static
    assert restartable["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    assert user_choice["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "0"


def test_build_env_refuses_missing_file_and_bad_names(tmp_path):
    with pytest.raises(TorchrunError, match="env_files: /nonexistent.env does not exist"):
        start_mod.build_env(["/nonexistent.env"], {}, "j", "/d", {})
    bad = tmp_path / "bad.env"
    bad.write_text("this is not an assignment\n")
    with pytest.raises(TorchrunError, match="^env_files: .*bad.env"):
        start_mod.build_env([str(bad)], {}, "j", "/d", {})
    with pytest.raises(TorchrunError, match="is not a variable name"):
        start_mod.build_env([], {"BAD KEY": "1"}, "j", "/d", {})


@pytest.mark.parametrize("fixture, expected", [
    ("nvidia-smi-L_8gpu.txt", 8), ("nvidia-smi-L_1gpu_mig.txt", 1), ("nvidia-smi-L_none.txt", 0),
])
def test_gpu_count_from_nvidia_smi(fixture, expected):
    text = (FIXTURES / "torchrun" / fixture).read_text()
    assert start_mod.gpu_count(0, text, proc_gpus="/nonexistent") == expected


def test_gpu_count_falls_back_to_the_driver_then_zero(tmp_path):
    for name in ("0000:3b:00.0", "0000:5e:00.0"):
        (tmp_path / name).mkdir()
    assert start_mod.gpu_count(None, "", proc_gpus=str(tmp_path)) == 2
    assert start_mod.gpu_count(9, "garbage", proc_gpus=str(tmp_path / "none")) == 0


@pytest.mark.parametrize("env, env_file, nproc", [
    ({}, None, 8), ({"CUDA_VISIBLE_DEVICES": "0,2"}, None, 2), ({}, "CUDA_VISIBLE_DEVICES=5\n", 1),
    ({"CUDA_VISIBLE_DEVICES": ""}, None, 3),
])
def test_auto_starts_a_rank_per_gpu_the_jobs_environment_shows(tmp_path, monkeypatch, env, env_file, nproc):
    """deepspeed --include node:0,2 as train_env CUDA_VISIBLE_DEVICES (a host variable): nvidia-smi lists all 8,
    the ranks see 2; none visible: cpu_nproc."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)  # the job's environment starts from the module's
    files = []
    if env_file:
        (tmp_path / "gpus.env").write_text(env_file)
        files = [str(tmp_path / "gpus.env")]
    gpus = start_mod.gpu_count(0, (FIXTURES / "torchrun" / "nvidia-smi-L_8gpu.txt").read_text())
    params = _params(script="/srv/train.py", env=env, env_files=files, cpu_nproc=3, rdzv_id="j1", local_rank_arg=True)
    job_env, _secrets = start_mod.job_env(params, "j1", str(tmp_path / "j1"), "node1")
    argv, got = start_mod.plan_argv(params, "py", "j1", str(tmp_path / "j1"), job_env, gpus, "node1")
    assert (got, gpus) == (nproc, 8)
    assert argv[argv.index("--nproc_per_node") + 1] == str(nproc)
    assert argv[-3:] == [str(tmp_path / "j1" / "mt_rank.py"), "--local-rank-arg", "/srv/train.py"]
    params = _params(script="/srv/train.py", env={"CUDA_VISIBLE_DEVICES": "0,9"}, rdzv_id="j1")
    job_env = start_mod.job_env(params, "j1", str(tmp_path / "j1"), "node1")[0]
    with pytest.raises(JobError) as refused:
        start_mod.plan_argv(params, "py", "j1", str(tmp_path / "j1"), job_env, gpus, "node1")
    assert str(refused.value).startswith('env["CUDA_VISIBLE_DEVICES"]="0,9": GPU 9 is not on this node (8 GPUs)')
    assert str(refused.value).endswith(" (on node1)")


def test_supervisor_and_keeper_argv():
    argv = jobdir.supervisor_argv("/venv/bin/python", "/logs/j", "j", 60, 15, "", ["/venv/bin/python", "-m", "x"])
    assert argv == ["/venv/bin/python", "/logs/j/supervisor.py", "/logs/j", "j", "60", "15", "/logs/j", "--",
                    "/venv/bin/python", "-m", "x"]
    keeper = firewall.keeper_argv("/usr/bin/python3", "/usr/sbin/nft", 42, "/logs/j/result.json", 60, "r", "d")
    # root's keeper never runs a file of the job directory (its user may write there)
    assert keeper[:3] == ["/usr/bin/python3", "-I", "-c"] and "def keep(" in keeper[3]
    assert keeper[4:] == ["keep", "/usr/sbin/nft", "42", "/logs/j/result.json", "60", "r", "d"]


def test_write_json_is_atomic_and_sets_mode(tmp_path):
    path = str(tmp_path / "job.json")
    jobdir.write_json(path, {"b": 1, "a": 2}, 0o640)
    assert json.load(open(path)) == {"a": 2, "b": 1}
    assert oct(os.stat(path).st_mode & 0o777) == "0o640" and not os.path.exists(path + ".tmp")


def test_read_tail(tmp_path):
    path = tmp_path / "log"
    path.write_text("x" * 100 + "END")
    assert _watchlib.read_tail(str(path), 3) == "END"
    assert _watchlib.read_tail(str(tmp_path / "missing")) == ""


# ------------------------------------------------------------------ liveness and waiting (real processes)

def _start_supervisor(job_dir, job_id, argv, timeout=0):
    env = dict(os.environ, MULTINODE_TRAINING_JOB=job_id, MULTINODE_TRAINING_JOB_DIR=job_dir)
    log = open(os.path.join(job_dir, "torchrun.log"), "ab")
    try:
        return subprocess.Popen([sys.executable, sup.__file__, job_dir, job_id, str(timeout), "1", job_dir, "--"] + argv,
                                env=env, start_new_session=True, stdout=log, stderr=subprocess.STDOUT)
    finally:
        log.close()


def _visible(popen, job_id, job_dir, limit=10.0):
    """Wait until the scan sees the supervisor just started (right after an exec the kernel shows its
    environment empty for a moment), for tests that date the job back past the spawn's settle time."""
    deadline = time.time() + limit
    while popen.pid not in sup.find_job_processes(job_id, job_dir=job_dir) and time.time() < deadline:
        time.sleep(0.02)
    assert popen.pid in sup.find_job_processes(job_id, job_dir=job_dir)


def test_job_alive(tmp_path):
    job_dir = str(tmp_path / "alive")
    os.makedirs(job_dir)
    job_id = "alive-%d" % os.getpid()
    popen = _start_supervisor(job_dir, job_id, [sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _visible(popen, job_id, job_dir)
        assert proc.job_alive(popen.pid, job_id, job_dir)
        assert not proc.job_alive(popen.pid, job_id, job_dir + "-other")  # the pid is not this job's
        # a live pid without the marker counts only right after the spawn
        other = os.getpid()
        assert proc.job_alive(other, job_id, job_dir, started=time.time())
        assert not proc.job_alive(other, job_id, job_dir, started=time.time() - 60)
    finally:
        os.killpg(popen.pid, 15)
        popen.wait(timeout=20)
    assert not proc.job_alive(popen.pid, job_id, job_dir)
    assert not proc.job_alive(None, job_id, job_dir)


def test_wait_for_end_returns_at_once_for_a_recorded_finished_job(tmp_path):
    job_dir = job_copy(tmp_path, "ok_1node")
    job = load(job_dir, "job.json")
    started = time.time()
    assert wait_mod.wait_for_end(job["job_id"], job_dir, job, 3600, 15, 30) == (False, False)
    assert time.time() - started < 1


def test_wait_for_end_abandons_the_exit_barrier_when_local_ranks_succeeded(tmp_path):
    """torchrun.log says the local worker group succeeded while the agent waits for other nodes:
    after barrier_grace the job is stopped and reported as an abandoned barrier."""
    job_dir = job_copy(tmp_path, "ok_1node")
    os.remove(os.path.join(job_dir, "result.json"))
    job_id = "barrier-%d" % os.getpid()
    popen = _start_supervisor(job_dir, job_id, [sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        job = {"job_id": job_id, "pid": popen.pid, "pgid": popen.pid, "start": time.time()}
        began = time.time()
        assert wait_mod.wait_for_end(job_id, job_dir, job, 0, 1, 1, poll=0.1) == (False, True)
        assert time.time() - began < 15
        popen.wait(timeout=20)
    finally:
        if popen.poll() is None:
            os.killpg(popen.pid, 9)
    assert sup.find_job_processes(job_id) == []
    assert load(job_dir, "result.json")["stopped"] is True


def test_wait_for_end_gives_up_after_the_deadline(tmp_path):
    job_dir = str(tmp_path / "late")
    os.makedirs(job_dir)
    job_id = "late-%d" % os.getpid()
    popen = _start_supervisor(job_dir, job_id, [sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        # started long ago: timeout 1 + grace 1 + 30 s of slack are over
        _visible(popen, job_id, job_dir)
        job = {"job_id": job_id, "pid": popen.pid, "pgid": popen.pid, "start": time.time() - 40}
        assert wait_mod.wait_for_end(job_id, job_dir, job, 1, 1, 30, poll=0.1) == (True, False)
        popen.wait(timeout=20)
    finally:
        if popen.poll() is None:
            os.killpg(popen.pid, 9)
    assert sup.find_job_processes(job_id) == []


def test_write_json_never_writes_through_links_the_account_planted(tmp_path):
    """Root rewrites job.json / result.json in a directory the job's account owns: links planted at
    the old temporary name and at the name itself (to a file of root's) are never written through
    or chowned through; the file is replaced, the victim keeps its content, mode and owner."""
    victim = tmp_path / "shadow"
    victim.write_text("root:secret\n")
    os.chmod(str(victim), 0o600)
    path = str(tmp_path / "result.json")
    os.symlink(str(victim), path + ".tmp")
    os.symlink(str(victim), path)
    owner = (os.getuid(), os.getgid()) if os.geteuid() != 0 else (65534, 65534)
    jobdir.write_json(path, {"rc": None}, 0o640, owner)
    assert not os.path.islink(path) and read_json(path) == {"rc": None}
    st = os.stat(path)
    assert (st.st_uid, st.st_gid) == owner and st.st_mode & 0o777 == 0o640
    assert victim.read_text() == "root:secret\n"
    vst = os.stat(str(victim))
    assert (vst.st_uid, vst.st_gid) == (os.getuid(), os.getgid()) and vst.st_mode & 0o777 == 0o600
    assert sorted(os.listdir(str(tmp_path))) == ["result.json", "result.json.tmp", "shadow"]


def test_a_stop_writes_no_result_into_a_link_that_replaced_the_job_directory(tmp_path):
    """The account may replace its job directory with a link to one of root's: the stop's record of
    the end (result.json) is not written there."""
    elsewhere = tmp_path / "etc"
    elsewhere.mkdir()
    job_dir = str(tmp_path / "job")
    os.symlink(str(elsewhere), job_dir)
    assert jobdir.real_directory(job_dir) is None
    assert jobdir.real_directory(str(elsewhere)) is not None

    class Module(StandInModule):
        def get_bin_path(self, *_args, **_kwargs):
            return None

    job = {"job_id": "gone-%d" % os.getpid(), "start": time.time() - 5}
    with pytest.raises(Exit):
        job_mod.stop(Module(ARGUMENT_SPEC, stop_grace=1), job["job_id"], job_dir, job, {}, "node1")
    assert os.listdir(str(elsewhere)) == []


def test_write_json_keeps_owner_and_mode_across_rewrites(tmp_path):
    """job.json is rewritten after the watcher starts; it must stay the job account's (0640): the
    watcher (running as that account) reads the supervisor's pid from it."""
    path = str(tmp_path / "job.json")
    owner = (os.getuid(), os.getgid()) if os.geteuid() != 0 else (65534, 65534)
    for data in ({"pid": 1}, {"pid": 1, "watch_pid": 2}):
        jobdir.write_json(path, data, 0o640, owner)
        st = os.stat(path)
        assert (st.st_uid, st.st_gid) == owner and st.st_mode & 0o777 == 0o640
        assert read_json(path) == data
    assert not os.path.exists(path + ".tmp")


def test_guarded_ports_rendezvous_and_the_hub_watch_port():
    argv = ["python", "-m", "torch.distributed.run", "--rdzv_endpoint", "10.0.0.1:29400", "x.py"]
    assert firewall.guarded_ports(argv, {"hub": True, "port": 29401}) == [29400, 29401]
    # Only the hub listens on the watch port.
    assert firewall.guarded_ports(argv, {"hub": False, "port": 29401}) == [29400]
    assert firewall.guarded_ports(argv, None) == [29400]
    assert firewall.guarded_ports(["x.py"], None) == []


# ------------------------------------------------------------------ root in the account's directories
# The job's account owns log_dir, so it may rename or replace the job directory, or any file in it
# once it is the account's, at any moment (with inotify, right after root made it). Root must never
# create, write, hand over (chown) or read a file of root's through such a name.

ACCOUNT = (65534, 65534)


def _owner():
    return ACCOUNT if os.geteuid() == 0 else None


def test_make_job_dir_is_new_root_only_and_refuses_a_reused_id(tmp_path):
    job_dir = str(tmp_path / "logs" / "j1")  # log_dir made when missing
    fd = jobdir.make_job_dir(job_dir)
    try:
        st = os.fstat(fd)
        assert st.st_uid == os.geteuid() and st.st_mode & 0o777 == 0o700
        assert os.path.samestat(st, os.lstat(job_dir))
    finally:
        os.close(fd)
    with pytest.raises(FileExistsError):
        jobdir.make_job_dir(job_dir)
    # a link planted at the name beforehand is not followed (mkdir does not create through it)
    os.symlink(str(tmp_path), str(tmp_path / "logs" / "j2"))
    with pytest.raises(FileExistsError):
        jobdir.make_job_dir(str(tmp_path / "logs" / "j2"))


@pytest.mark.parametrize("swap", ["link", "other_owner"])
def test_make_job_dir_refuses_a_directory_replaced_while_it_was_made(tmp_path, monkeypatch, swap):
    """Between root's mkdir and its open the account renames the new directory away and puts a
    link to one of root's directories there (or a directory of its own)."""
    if swap == "other_owner" and os.geteuid() != 0:
        pytest.skip("needs root to make a directory of another user's")
    victim = tmp_path / "etc"
    victim.mkdir()
    job_dir = str(tmp_path / "job")
    real_mkdir = os.mkdir

    def mkdir_then_swap(path, mode=0o777, **kwargs):
        real_mkdir(path, mode, **kwargs)
        os.rename(path, path + ".moved")
        if swap == "link":
            os.symlink(str(victim), path)
        else:
            real_mkdir(path, 0o700)
            os.chown(path, *ACCOUNT)

    monkeypatch.setattr(os, "mkdir", mkdir_then_swap)
    with pytest.raises(OSError):
        jobdir.make_job_dir(job_dir)
    assert os.listdir(str(victim)) == []


def test_fill_job_dir_writes_nothing_through_a_name_swapped_for_a_link(tmp_path):
    """Once root has the new directory open, the account may swap its name for a link to root's
    /etc: every file, the owner change and job.json still go into the directory root made."""
    victim = tmp_path / "etc"
    victim.mkdir()
    (victim / "passwd").write_text("root:x:0:0\n")
    before = os.stat(str(victim))
    job_dir = str(tmp_path / "job")
    fd = jobdir.make_job_dir(job_dir)
    try:
        os.rename(job_dir, job_dir + ".moved")
        os.symlink(str(victim), job_dir)
        params = {"watch": {"node": "n1", "token": "t" * 32}, "nnodes": "1", "max_restarts": 0}
        log_fd, watch_fd = jobdir.fill_job_dir(fd, params, "j", "n1", _owner())
        os.close(log_fd)
        os.close(watch_fd)
        jobdir.write_json(os.path.join(job_dir, "job.json"), {"pid": 1}, 0o640, _owner(), fd)
    finally:
        os.close(fd)
    assert sorted(os.listdir(str(victim))) == ["passwd"]
    assert (os.stat(str(victim)).st_uid, os.stat(str(victim)).st_mode) == (before.st_uid, before.st_mode)
    made = job_dir + ".moved"
    assert sorted(os.listdir(made)) == sorted(["exits", "job.json", "lease", fol.RANK_WRAPPER,
                                               jobdir.SUPERVISOR_FILE, "torchrun.log", "watch.json", "watch.log",
                                               fol.WATCHER, fol.WATCH_LIBRARY, fol.SAMPLER])
    uid = _owner()[0] if _owner() else os.geteuid()
    assert os.stat(made).st_uid == uid and os.stat(made).st_mode & 0o777 == 0o750
    assert all(os.lstat(os.path.join(made, n)).st_uid == uid for n in os.listdir(made))
    assert os.stat(os.path.join(made, "watch.json")).st_mode & 0o777 == 0o600
    assert os.stat(str(victim / "passwd")).st_uid == os.geteuid()


def test_write_json_writes_nothing_into_a_job_directory_that_became_a_link(tmp_path):
    victim = tmp_path / "etc"
    victim.mkdir()
    job_dir = tmp_path / "job"
    os.symlink(str(victim), str(job_dir))
    with pytest.raises(OSError):
        jobdir.write_json(str(job_dir / "job.json"), {"pid": 1}, 0o640, _owner())
    assert os.listdir(str(victim)) == []


def test_job_files_are_read_without_following_a_link_or_waiting_on_a_fifo(tmp_path):
    from ansible_collections.multinode.training.plugins.module_utils._torchrun.collect import read_text
    secret = tmp_path / "shadow"
    secret.write_text("root:secret\n")
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    os.symlink(str(secret), str(job_dir / "torchrun.log"))
    os.mkfifo(str(job_dir / "stderr.log"))
    (job_dir / "result.json").write_text('{"rc": 0}')
    assert read_text(str(job_dir / "torchrun.log")) == "" and _watchlib.read_tail(str(job_dir / "torchrun.log")) == ""
    began = time.time()
    assert read_text(str(job_dir / "stderr.log")) == "" and _watchlib.read_tail(str(job_dir / "stderr.log")) == ""
    assert time.time() - began < 2
    assert read_json(str(job_dir / "result.json")) == {"rc": 0}
    assert read_json(str(job_dir / "torchrun.log")) is None


def _other_jobs_ranks(tmp_path, job_dir):
    """A copy of the job's ``ranks`` tree elsewhere, every file's text replaced by another job's
    secret (the files root would read through a link the account put in place of ``ranks``)."""
    other = tmp_path / "other-job-ranks"
    shutil.copytree(os.path.join(job_dir, "ranks"), str(other))
    for root, _dirs, files in os.walk(str(other)):
        for name in files:
            text = json.dumps({"message": {"message": "SECRET OF ANOTHER JOB", "extraInfo": {}}}) \
                if name == "error.json" else "SECRET OF ANOTHER JOB\n"
            with open(os.path.join(root, name), "w") as handle:
                handle.write(text)
    return other


@pytest.mark.parametrize("owner, followed", [(ACCOUNT[0], False), (0, True)])
def test_collect_reads_nothing_through_a_directory_the_account_swapped_for_a_link(tmp_path, owner, followed):
    """The account owns its job directory: ``ranks`` swapped for a link of its own (to another
    job's ranks, files of the same names) is not read through; a link of root's is (the rule)."""
    job_dir = job_copy(tmp_path, "fail_rank1")
    other = _other_jobs_ranks(tmp_path, job_dir)
    shutil.rmtree(os.path.join(job_dir, "ranks"))
    os.symlink(str(other), os.path.join(job_dir, "ranks"))
    os.lchown(os.path.join(job_dir, "ranks"), owner, owner)
    out = collect(job_dir, load(job_dir, "job.json"), load(job_dir, "result.json"), 5, "vm")
    assert ("SECRET OF ANOTHER JOB" in json.dumps(out)) is followed
    assert out["rc"] == 1  # the job directory's own files are still read


def test_a_job_directory_swapped_for_a_link_of_the_accounts_is_not_read(tmp_path):
    job_dir = job_copy(tmp_path, "ok_1node")
    moved = str(tmp_path / "elsewhere")
    os.rename(job_dir, moved)
    os.symlink(moved, job_dir)
    os.lchown(job_dir, *ACCOUNT)
    assert read_json(os.path.join(job_dir, "result.json")) is None
    assert read_json(os.path.join(moved, "result.json"))["rc"] == 0


def where(path):
    """The directory open_dir opened for ``path`` (its name, from /proc), or None."""
    from ansible_collections.multinode.training.plugins.module_utils._node.watchlib import open_dir
    fd = open_dir(path)
    if fd is None:
        return None
    try:
        return os.readlink("/proc/self/fd/%d" % fd)
    finally:
        os.close(fd)


def test_open_dir_follows_roots_links_only(tmp_path):
    real = tmp_path / "real"
    (real / "sub").mkdir(parents=True)
    (real / "sub" / "f").write_text("x")
    os.symlink(str(real), str(tmp_path / "roots"))
    os.symlink(str(real), str(tmp_path / "accounts"))
    os.lchown(str(tmp_path / "accounts"), *ACCOUNT)

    assert where(str(tmp_path / "roots" / "sub")) == str(real / "sub")
    assert where(str(tmp_path / "accounts" / "sub")) is None
    assert where(str(real / "sub" / "f")) is None  # a file is no directory
    assert where(str(real / "missing")) is None
    assert where(str(real / "sub" / ".." / "sub")) == str(real / "sub")
    assert where("/") == "/"


def _fds():
    return sorted(os.listdir("/proc/self/fd"))


def test_open_dir_walks_the_target_of_roots_link_the_same_way(tmp_path):
    """A link of root's is followed by walking its target name by name: an account's link on the
    target's way is refused there as well (the kernel, resolving the whole target, would follow
    it); relative targets, chains of root's links and loops; no descriptor is left open."""
    from ansible_collections.multinode.training.plugins.module_utils._node.watchlib import MAX_LINKS
    real = tmp_path / "real"
    (real / "sub").mkdir(parents=True)
    home = tmp_path / "home"  # the account's directory, where it put a link of its own
    home.mkdir()
    os.symlink(str(real), str(home / "logs"))
    os.lchown(str(home / "logs"), *ACCOUNT)
    os.symlink(str(home / "logs"), str(tmp_path / "through-accounts"))  # root's, absolute target
    os.symlink("real", str(tmp_path / "relative"))  # root's, relative target
    os.symlink("../real/./sub", str(home / "up"))  # root's, relative with ..
    os.symlink(str(tmp_path / "relative"), str(tmp_path / "chain"))  # root's link to root's link
    os.symlink("loop-b", str(tmp_path / "loop-a"))
    os.symlink("loop-a", str(tmp_path / "loop-b"))

    before = _fds()
    assert where(str(tmp_path / "through-accounts" / "sub")) is None
    assert os.path.isdir(str(tmp_path / "through-accounts" / "sub"))  # where the kernel would have gone
    assert where(str(tmp_path / "relative" / "sub")) == str(real / "sub")
    assert where(str(home / "up")) == str(real / "sub")
    assert where(str(tmp_path / "chain" / "sub")) == str(real / "sub")
    assert where(str(tmp_path / "loop-a")) is None
    deep = tmp_path / "deep"
    deep.mkdir()
    previous = str(real)
    for n in range(MAX_LINKS + 1):
        os.symlink(previous, str(deep / str(n)))
        previous = str(deep / str(n))
    assert where(str(deep / str(MAX_LINKS - 1))) == str(real)
    assert where(str(deep / str(MAX_LINKS))) is None
    assert _fds() == before


def test_open_dir_closes_what_it_opened_when_a_step_fails(tmp_path, monkeypatch):
    from ansible_collections.multinode.training.plugins.module_utils._node import watchlib
    (tmp_path / "a" / "b").mkdir(parents=True)
    real_fstat = os.fstat
    calls = []

    def failing_fstat(fd):
        calls.append(fd)
        if len(calls) == 3:
            raise OSError(5, "EIO")
        return real_fstat(fd)

    before = _fds()
    monkeypatch.setattr(watchlib.os, "fstat", failing_fstat)
    assert watchlib.open_dir(str(tmp_path / "a" / "b")) is None
    monkeypatch.setattr(watchlib.os, "fstat", real_fstat)
    assert len(calls) == 3 and _fds() == before


def test_collect_reads_no_error_file_outside_the_job_directory(tmp_path):
    """torchrun.log is the account's: an error_file line naming a file elsewhere (root's) is not
    read; the rank's own error.json in the job directory is."""
    elsewhere = tmp_path / "secret.json"
    elsewhere.write_text(json.dumps({"message": {"message": "SECRET OF ROOT", "extraInfo": {}}}))
    job_dir = job_copy(tmp_path, "fail_rank1")
    log = os.path.join(job_dir, "torchrun.log")
    with open(log) as handle:
        text = handle.read()
    recorded = "/var/log/multinode-training/fixture-fail-1/ranks/fixture-fail-1_rlt1mchz/attempt_0/1/error.json"
    assert recorded in text
    with open(log, "w") as handle:
        handle.write(text.replace(recorded, str(elsewhere)))
    out = collect(job_dir, load(job_dir, "job.json"), load(job_dir, "result.json"), 5, "vm")
    assert "SECRET" not in json.dumps(out)
    assert out["root_cause"]["error_file"].startswith(job_dir + os.sep)
    assert out["root_cause"]["message"] == "RuntimeError: injected failure on rank 1 at step 1"
    from ansible_collections.multinode.training.plugins.module_utils._torchrun.collect import inside
    assert inside(job_dir, os.path.join(job_dir, "ranks", "e.json")) == os.path.join(job_dir, "ranks", "e.json")
    assert inside(job_dir, os.path.join(job_dir, "..", "x.json")) is None
    assert inside(job_dir, job_dir + "-other/e.json") is None
    assert inside(job_dir, None) is None


def limits_of(pid):
    """'Max locked memory' of a process as /proc shows it: (soft, hard) as strings."""
    with open("/proc/%d/limits" % pid) as handle:
        line = next(text for text in handle if text.startswith("Max locked memory"))
    return tuple(line.split()[3:5])


def may_raise_limits():
    """CAP_SYS_RESOURCE (bit 24) in this process's effective set: root on a host has it, root in a
    default Docker container (a molecule node, this test host) has not."""
    with open("/proc/self/status") as handle:
        caps = next(int(text.split()[1], 16) for text in handle if text.startswith("CapEff:"))
    return bool(caps & (1 << 24))


def run_python(script, *args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run([sys.executable, "-c", script] + list(args), env=env, check=True, capture_output=True,
                          text=True).stdout.split()


def test_spawned_job_gets_the_most_locked_memory_the_launcher_may_give(tmp_path):
    # The module with the soft limit a fresh ssh session gets without a limits.d entry (64 KiB here):
    # the job it starts, as another account, has no limit where the launcher may lift it (root on a
    # host), else its hard limit as the soft one too - what NCCL over InfiniBand needs.
    script = (
        "import os, resource, sys\n"
        "from ansible_collections.multinode.training.plugins.module_utils._torchrun import proc\n"
        "hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]\n"
        "resource.setrlimit(resource.RLIMIT_MEMLOCK, (64 << 10, hard))\n"
        "out = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o644)\n"
        "pid = proc.spawn(['/bin/sleep', '30'], {}, out, {'uid': 65534, 'gid': 65534, 'groups': []})\n"
        "print(pid, resource.getrlimit(resource.RLIMIT_MEMLOCK)[0], hard)\n")
    pid, own, hard = run_python(script, str(tmp_path / "out"))
    try:
        assert int(own) == 64 << 10
        if may_raise_limits() or int(hard) == resource.RLIM_INFINITY:
            assert limits_of(int(pid)) == ("unlimited", "unlimited")
        else:
            assert limits_of(int(pid)) == (hard, hard)
    finally:
        os.kill(int(pid), 9)


def test_without_privilege_the_soft_limit_rises_to_the_hard_one():
    script = (
        "import os, resource\n"
        "from ansible_collections.multinode.training.plugins.module_utils._torchrun import proc\n"
        "hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]\n"
        "resource.setrlimit(resource.RLIMIT_MEMLOCK, (64 << 10, hard))\n"
        "os.setgid(65534)\n"
        "os.setuid(65534)\n"
        "print(hard, *proc.lift_memlock())\n")
    hard, soft_now, hard_now = run_python(script)
    assert soft_now == hard_now == hard
