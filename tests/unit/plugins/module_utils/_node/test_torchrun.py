"""Unit tests for plugins/module_utils/_node/torchrun.py and _torchrun/proc.py (torchrun's log: test_agent_log.py).

The torchrun agent logs and error.json files under tests/fixtures/torchrun/ were
recorded from torch 2.13.0+cpu running playbooks/files/smoke_train.py (one node,
and two agents forming a 4-rank job with rank 3 failing at step 2).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from ansible_collections.multinode.training.plugins.module_utils._node import torchrun as tr
from ansible_collections.multinode.training.plugins.module_utils._torchrun import agent_log
from ansible_collections.multinode.training.plugins.module_utils._torchrun import proc
from tests.unit.conftest import FIXTURES

FIX = FIXTURES / "torchrun"


def fixture_text(name):
    return (FIX / name).read_text(encoding="utf-8")


# ------------------------------------------------------------------ nnodes

@pytest.mark.parametrize("value, expected", [
    (2, (2, 2)), ("4", (4, 4)), ("1:4", (1, 4)), (" 2:2 ", (2, 2)), ("1", (1, 1)),
])
def test_parse_nnodes_valid(value, expected):
    assert tr.parse_nnodes(value) == expected


@pytest.mark.parametrize("value, fragment", [
    ("4:2", "MIN (4) is greater than MAX (2)"),
    ("0", "start at 1"),
    ("two", "expected a node count"),
    ("1:", "expected a node count"),
    ("-1", "expected a node count"),
    (True, "expected a node count"),
])
def test_parse_nnodes_invalid(value, fragment):
    with pytest.raises(tr.TorchrunError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        tr.parse_nnodes(value)


@pytest.mark.parametrize("low, high, expected", [(2, 2, "2"), (1, 4, "1:4")])
def test_nnodes_arg(low, high, expected):
    assert tr.nnodes_arg(low, high) == expected


# ------------------------------------------------------------------ endpoints

@pytest.mark.parametrize("host, port, expected", [
    ("10.0.0.11", 29400, "10.0.0.11:29400"),
    ("node1.cluster", "29400", "node1.cluster:29400"),
    ("fd00::11", 29400, "[fd00::11]:29400"),
    ("[fd00::11]", 29400, "[fd00::11]:29400"),
    ("fe80::1%eth0", 1, "[fe80::1%eth0]:1"),
    ("::1", 65535, "[::1]:65535"),
])
def test_format_endpoint(host, port, expected):
    assert tr.format_endpoint(host, port) == expected


@pytest.mark.parametrize("port", [0, 65536, -1, "http", None, True])
def test_format_endpoint_bad_port(port):
    with pytest.raises(tr.TorchrunError, match="1-65535"):
        tr.format_endpoint("10.0.0.1", port)


@pytest.mark.parametrize("endpoint, expected", [
    ("10.0.0.11:29400", "10.0.0.11:29400"),
    ("[fd00::11]:29400", "[fd00::11]:29400"),
    ("node-1:1234", "node-1:1234"),
])
def test_normalize_endpoint(endpoint, expected):
    assert tr.normalize_endpoint(endpoint) == expected


@pytest.mark.parametrize("endpoint, fragment", [
    ("fd00::11", "needs brackets"),
    ("fd00::11:29400", "needs brackets"),
    ("10.0.0.11", "expected host:port"),
    ("10.0.0.11:70000", "outside 1-65535"),
    (":29400", "expected host:port"),
])
def test_normalize_endpoint_invalid(endpoint, fragment):
    with pytest.raises(tr.TorchrunError, match=fragment):
        tr.normalize_endpoint(endpoint)


def test_rdzv_conf_sorted_and_bools():
    assert tr.format_rdzv_conf({"read_timeout": 60, "join_timeout": 300, "is_host": False}) == \
        "is_host=false,join_timeout=300,read_timeout=60"


@pytest.mark.parametrize("conf", [{"join_timeout": "1,2"}, {"a=b": 1}, {"x": "k=v"}])
def test_rdzv_conf_rejects_separators(conf):
    with pytest.raises(tr.TorchrunError):
        tr.format_rdzv_conf(conf)


@pytest.mark.parametrize("job_id, ok", [
    ("job-20261121-a1b2", True), ("a.b_c", True), ("", False), ("../etc", False), ("a b", False),
    ("x" * 129, False), (None, False),
])
def test_validate_job_id(job_id, ok):
    if ok:
        assert tr.validate_job_id(job_id) == job_id
    else:
        with pytest.raises(tr.TorchrunError, match="rdzv_id"):
            tr.validate_job_id(job_id)


# ------------------------------------------------------------------ nproc auto

@pytest.mark.parametrize("fixture, gpus", [
    ("nvidia-smi-L_8gpu.txt", 8), ("nvidia-smi-L_1gpu_mig.txt", 1), ("nvidia-smi-L_none.txt", 0),
])
def test_count_gpus_from_recorded_nvidia_smi(fixture, gpus):
    assert tr.count_gpus_nvidia_smi(fixture_text(fixture)) == gpus


@pytest.mark.parametrize("value, gpus, cpu, expected", [
    ("auto", 8, 2, 8), ("auto", 0, 2, 2), ("auto", None, 3, 3), ("4", 8, None, 4), (2, 0, None, 2),
])
def test_resolve_nproc(value, gpus, cpu, expected):
    assert tr.resolve_nproc(value, gpus, cpu) == expected


@pytest.mark.parametrize("value, gpus, cpu, fragment", [
    ("auto", 0, None, "no GPU found"), ("0", 0, None, "positive"), ("many", 1, None, "auto' or a positive"),
    ("auto", 0, 0, "cpu_nproc=0"),
])
def test_resolve_nproc_invalid(value, gpus, cpu, fragment):
    with pytest.raises(tr.TorchrunError, match=fragment):
        tr.resolve_nproc(value, gpus, cpu)


@pytest.mark.parametrize("gpus, value, visible", [
    (8, None, 8), (8, "0,2", 2), (8, " 0, 2 ,5", 3), (8, "", 0), (8, "-1", 0), (8, "1,-1,2", 1),
    (8, "GPU-8d2c0b6e-aaaa,MIG-1f2e", 2), (8, "0,foo,1", 1), (0, "0,1", 0), (None, "0,1", None),
])
def test_visible_gpus_as_cuda_reads_cuda_visible_devices(gpus, value, visible):
    assert tr.visible_gpus(gpus, value) == visible


def test_auto_counts_only_the_visible_gpus_and_refuses_one_the_node_lacks():
    assert tr.resolve_nproc("auto", tr.visible_gpus(8, "0,2"), 2) == 2   # deepspeed --include host:0,2
    assert tr.resolve_nproc("auto", tr.visible_gpus(8, ""), 2) == 2      # none visible: the CPU count
    with pytest.raises(tr.TorchrunError) as exc:
        tr.visible_gpus(8, "0,8")
    assert str(exc.value) == ('env["CUDA_VISIBLE_DEVICES"]="0,8": GPU 8 is not on this node (8 GPUs), '
                              "nproc_per_node=auto cannot count it; valid: indices 0 to 7 or GPU-/MIG- UUIDs, "
                              "comma-separated")


# ------------------------------------------------------------------ argv

BASE = {"nnodes": "2", "nproc_per_node": 2, "rdzv_id": "job-1", "rdzv_endpoint": "10.0.0.11:29400",
        "script": "/srv/train.py"}

VERBATIM = ["--name", "two words", "it's \"quoted\"", "a;b", "$HOME", "`id`", "x|y", "*", "", "--"]


def test_build_argv_full():
    opts = dict(BASE, args=VERBATIM, rdzv_conf={"join_timeout": 120}, max_restarts=2,
                local_addr="10.0.0.12", log_dir="/var/log/j/ranks", tee=True)
    argv = tr.build_argv("/venv/bin/python", opts)
    assert argv == [
        "/venv/bin/python", "-m", "torch.distributed.run",
        "--nnodes", "2", "--nproc_per_node", "2", "--rdzv_backend", "c10d", "--rdzv_id", "job-1",
        "--rdzv_endpoint", "10.0.0.11:29400", "--rdzv_conf", "join_timeout=120",
        "--max_restarts", "2", "--local_addr", "10.0.0.12",
        "--log_dir", "/var/log/j/ranks", "--redirects", "3", "--tee", "3",
        "/srv/train.py"] + VERBATIM


def test_args_reach_script_verbatim_through_real_exec(tmp_path):
    """The tail of the argv, executed without a shell, is exactly what the script sees."""
    argv = tr.build_argv(sys.executable, dict(BASE, args=VERBATIM))
    script_args = argv[argv.index("/srv/train.py") + 1:]
    out = subprocess.run([sys.executable, "-c", "import json,sys; print(json.dumps(sys.argv[1:]))"] + script_args,
                         check=True, capture_output=True, text=True).stdout
    assert json.loads(out) == VERBATIM


def test_build_argv_module_elastic_ipv6_static_rank():
    opts = dict(BASE, script=None, module="pkg.train", nnodes="1:4", rdzv_endpoint="[fd00::11]:29400",
                node_rank=3, rdzv_backend="static")
    argv = tr.build_argv("py", opts)
    assert argv[argv.index("--nnodes") + 1] == "1:4"
    assert argv[argv.index("--rdzv_endpoint") + 1] == "[fd00::11]:29400"
    assert argv[argv.index("--rdzv_backend") + 1] == "static"
    assert argv[argv.index("--node_rank") + 1] == "3"
    assert argv[-2:] == ["-m", "pkg.train"]


@pytest.mark.parametrize("change, fragment", [
    ({"args": "--lr 1e-3"}, "must be a list"),
    ({"args": {"lr": 1}}, "must be a list"),
    ({"nnodes": "3:2"}, "greater than MAX"),
    ({"rdzv_endpoint": None}, "rdzv_endpoint is required"),
    ({"rdzv_endpoint": "10.0.0.1:0"}, "outside 1-65535"),
    ({"node_rank": 2}, "valid 0..1"),
    ({"script": None}, "script or module"),
    ({"rdzv_id": "a/b"}, "rdzv_id"),
])
def test_build_argv_bad_input(change, fragment):
    with pytest.raises(tr.TorchrunError, match=fragment):
        tr.build_argv("py", dict(BASE, **change))


def test_local_rank_arg_is_the_rank_wrappers_option_before_the_script():
    from ansible_collections.multinode.training.plugins.module_utils._node import rankwrap

    assert tr.LOCAL_RANK_ARG == rankwrap.LOCAL_RANK_ARG
    argv = tr.build_argv("py", dict(BASE, args=["--lr", "1"], wrapper="/j/mt_rank.py", local_rank_arg=True))
    assert argv[-5:] == ["/j/mt_rank.py", "--local-rank-arg", "/srv/train.py", "--lr", "1"]
    argv = tr.build_argv("py", dict(BASE, script=None, module="pkg.train", wrapper="/j/mt_rank.py", local_rank_arg=True))
    assert argv[-4:] == ["/j/mt_rank.py", "--local-rank-arg", "-m", "pkg.train"]
    assert "--local-rank-arg" not in tr.build_argv("py", dict(BASE, wrapper="/j/mt_rank.py", local_rank_arg=False))
    with pytest.raises(tr.TorchrunError, match="local_rank_arg=true needs the rank wrapper"):
        tr.build_argv("py", dict(BASE, local_rank_arg=True))


def test_single_node_needs_no_endpoint():
    argv = tr.build_argv("py", dict(BASE, nnodes=1, rdzv_endpoint=None))
    assert "--rdzv_endpoint" not in argv


# ------------------------------------------------------------------ secrets

@pytest.mark.parametrize("key, secret", [
    ("HF_TOKEN", True), ("WANDB_API_KEY", True), ("aws_secret_access_key", True), ("DB_PASSWORD", True),
    ("MY_PASSWD", True), ("NCCL_DEBUG", False), ("MONKEY_BUSINESS", True), ("PATH", False),
])
def test_is_secret_key(key, secret):
    assert tr.is_secret_key(key) is secret


def test_secret_values_and_mask():
    env = {"HF_TOKEN": "hf_abc123", "WANDB_API_KEY": "abc", "NCCL_DEBUG": "INFO", "EMPTY_SECRET": ""}
    secrets = tr.secret_values(env)
    assert secrets == ["hf_abc123", "abc"]  # longest first, empty values skipped
    argv = ["python", "--token=hf_abc123", "INFO", "xabcx"]
    masked = tr.mask(argv, secrets)
    assert masked == ["python", "--token=" + tr.MASK, "INFO", "x" + tr.MASK + "x"]
    assert not any("abc" in item for item in masked)
    assert tr.mask("line with hf_abc123 inside", secrets) == "line with %s inside" % tr.MASK


# ------------------------------------------------------------------ env files

def test_parse_env_file_fixture():
    assert tr.parse_env_file(fixture_text("nccl.env")) == {
        "NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_DISABLE": "1", "NCCL_DEBUG": "INFO",
        "NCCL_IB_HCA": "mlx5_0,mlx5_1"}


@pytest.mark.parametrize("text, line", [("NCCL_DEBUG INFO\n", 1), ("A=1\n1BAD=2\n", 2), ("# c\n=x\n", 2)])
def test_parse_env_file_errors_name_the_line(text, line):
    with pytest.raises(tr.TorchrunError, match="/etc/x.env line %d" % line):
        tr.parse_env_file(text, "/etc/x.env")


# ------------------------------------------------------------------ torchrun output

def test_root_cause_across_nodes_prefers_first_hand_failure():
    node0 = agent_log.parse_agent_log(fixture_text("agent_2node_node0_peer_failures.log"))
    node1 = agent_log.parse_agent_log(fixture_text("agent_2node_node1_root_cause.log"))
    failures = []
    for parsed in (node0, node1):
        for entry in [parsed["root_cause"]] + parsed["failures"]:
            # the peer errors on node0 are stamped *earlier* on purpose: preference beats time
            stamp = 100.0 if entry["rank"] in (0, 1) else 101.0
            failures.append(dict(entry, timestamp=stamp, peer=tr.is_peer_error(entry["message"], entry["exitcode"])))
    root = tr.pick_root_cause(failures)
    assert (root["rank"], root["exitcode"]) == (3, 1)
    assert "injected failure on rank 3" in tr.summarize_failure("node2", root)
    assert tr.summarize_failure("node2", root).startswith("rank 3 (local_rank 1) on node2 exited 1")


def test_root_cause_earliest_when_all_peer_or_none():
    assert tr.pick_root_cause([]) is None
    a = {"rank": 0, "timestamp": 5.0, "peer": True}
    b = {"rank": 1, "timestamp": 3.0, "peer": True}
    assert tr.pick_root_cause([a, b])["rank"] == 1


def test_rank_results():
    failures = [{"local_rank": 1, "exitcode": 1}, {"local_rank": 0, "exitcode": -15}]
    ranks = tr.rank_results([0, 1], [2, 3], failures, 1)
    assert [(r["rank"], r["exitcode"], r["state"]) for r in ranks] == [(2, -15, "terminated"), (3, 1, "failed")]
    ok = tr.rank_results([0, 1], [0, 1], [], 0)
    assert [r["state"] for r in ok] == ["succeeded", "succeeded"]
    assert [r["state"] for r in tr.rank_results([0], [], [], None)] == ["unknown"]
    # torchrun stopped (rc 1) after its ranks ended: a rank whose wrapper recorded exit 0 succeeded
    stopped = tr.rank_results([0, 1], [0, 1], [], 1, {0: 0, 1: 3})
    assert [(r["exitcode"], r["state"]) for r in stopped] == [(0, "succeeded"), (None, "unknown")]


def test_tail():
    assert tr.tail("\n".join(str(i) for i in range(50)), 3) == "47\n48\n49"


# ------------------------------------------------------------------ processes (real ones)

def _supervise(tmp_path, job_id, timeout, argv, extra_env=None):
    job_dir = str(tmp_path / job_id)
    os.makedirs(job_dir)
    env = dict(os.environ, MULTINODE_TRAINING_JOB=job_id, MULTINODE_TRAINING_JOB_DIR=job_dir, **(extra_env or {}))
    popen = subprocess.Popen([sys.executable, proc.supervisor.__file__, job_dir, job_id, str(timeout), "1",
                              job_dir, "--"]
                             + argv, env=env, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return popen, job_dir


def test_supervisor_records_rc(tmp_path):
    popen, job_dir = _supervise(tmp_path, "ok-1", 0, [sys.executable, "-c", "import sys; sys.exit(3)"])
    popen.wait(timeout=30)
    result = json.load(open(os.path.join(job_dir, "result.json")))
    assert result["rc"] == 3 and result["timed_out"] is False and result["end"] >= result["start"]


def test_supervisor_timeout_kills_new_session_grandchild(tmp_path):
    """A child in a session of its own (like torchrun's workers) is still found and killed."""
    job_id = "to-%d" % os.getpid()
    code = ("import subprocess,sys,time; subprocess.Popen([sys.executable,'-c','import time; time.sleep(120)'],"
            "start_new_session=True); time.sleep(120)")
    popen, job_dir = _supervise(tmp_path, job_id, 1, [sys.executable, "-c", code])
    popen.wait(timeout=30)
    result = json.load(open(os.path.join(job_dir, "result.json")))
    assert result["timed_out"] is True
    assert result["leftovers_killed"], "the grandchild in its own session should have been killed"
    deadline = time.time() + 5
    while proc.find_job_processes(job_id) and time.time() < deadline:
        time.sleep(0.1)
    assert proc.find_job_processes(job_id) == []


def test_stop_job_kills_everything_and_reports(tmp_path):
    job_id = "stop-%d" % os.getpid()
    code = ("import signal,subprocess,sys,time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
            "subprocess.Popen([sys.executable,'-c','import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
            "time.sleep(120)'], start_new_session=True); time.sleep(120)")
    popen, job_dir = _supervise(tmp_path, job_id, 0, [sys.executable, "-c", code])
    deadline = time.time() + 10
    while len(proc.find_job_processes(job_id)) < 3 and time.time() < deadline:
        time.sleep(0.1)
    assert len(proc.find_job_processes(job_id, job_dir=job_dir)) == 3  # supervisor, child, grandchild
    assert proc.find_job_processes(job_id, job_dir=job_dir + "-other") == []
    killed, survivors = proc.stop_job(job_id, pgid=popen.pid, grace=0.5, job_dir=job_dir)
    popen.wait(timeout=10)
    assert len(killed) == 3 and survivors == []
    assert proc.find_job_processes(job_id) == []


def test_stop_job_signals_no_group_whose_leader_is_not_the_job_s(tmp_path):
    """job.json's pgid is the account's to rewrite: pointed at a process group outside the job, the
    stop leaves that group alone and still stops the job's own processes."""
    job_id = "stopg-%d" % os.getpid()
    outsider = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    popen, job_dir = _supervise(tmp_path, job_id, 0, [sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        deadline = time.time() + 10
        while len(proc.find_job_processes(job_id, job_dir=job_dir)) < 2 and time.time() < deadline:
            time.sleep(0.1)
        assert proc.stop_job(job_id, pgid="not a pid", grace=0.5, job_dir=job_dir + "-none") == ([], [])
        killed, survivors = proc.stop_job(job_id, pgid=outsider.pid, grace=0.5, job_dir=job_dir)
        popen.wait(timeout=10)
        assert outsider.poll() is None, "a process group outside the job was signalled"
        assert outsider.pid not in killed
        assert len(killed) == 2 and survivors == []
    finally:
        outsider.kill()
        outsider.wait(timeout=10)


def _fake_proc(tmp_path, pid, environ):
    root = tmp_path / "proc"
    (root / str(pid)).mkdir(parents=True)
    (root / str(pid) / "stat").write_bytes(b"%d (python) S 1 %d %d" % (pid, pid, pid))
    (root / str(pid) / "environ").write_bytes(environ)
    return root


def test_leads_the_job_waits_out_the_empty_environment_right_after_an_exec(tmp_path):
    root = _fake_proc(tmp_path, 4242, b"")
    marked = b"MULTINODE_TRAINING_JOB=j1\0MULTINODE_TRAINING_JOB_DIR=/logs/j1\0"
    timer = threading.Timer(0.2, lambda: (root / "4242" / "environ").write_bytes(marked))
    timer.start()
    try:
        assert proc.leads_the_job(4242, [], "j1", str(root), "/logs/j1", settle=5.0)
    finally:
        timer.cancel()
    # another process's environment, one that stays empty, a pid that is gone, the scan's own find
    (root / "4242" / "environ").write_bytes(b"PATH=/usr/bin\0")
    assert not proc.leads_the_job(4242, [], "j1", str(root), "/logs/j1")
    (root / "4242" / "environ").write_bytes(b"")
    began = time.time()
    assert not proc.leads_the_job(4242, [], "j1", str(root), "/logs/j1", settle=0.3)
    assert time.time() - began < 3
    assert not proc.leads_the_job(4343, [], "j1", str(root), "/logs/j1")
    assert proc.leads_the_job(4343, [4343], "j1", str(root), "/logs/j1")


def test_stop_job_stops_a_leader_the_scan_missed_right_after_its_exec(tmp_path, monkeypatch):
    """The scan finds nothing (the leader's environment still reads empty), leads_the_job then sees
    the markers: the group is signalled, not left running."""
    root = _fake_proc(tmp_path, 4242, b"")
    marked = b"MULTINODE_TRAINING_JOB=j1\0MULTINODE_TRAINING_JOB_DIR=/logs/j1\0"
    sent = []
    monkeypatch.setattr(proc, "_signal", lambda pid, sig, group=False: sent.append((pid, sig, group)) or True)
    timer = threading.Timer(0.2, lambda: (root / "4242" / "environ").write_bytes(marked))
    timer.start()
    try:
        killed, survivors = proc.stop_job("j1", pgid=4242, grace=0.3, proc=str(root), job_dir="/logs/j1")
    finally:
        timer.cancel()
    assert (4242, signal.SIGTERM, True) in sent
    assert 4242 in killed and survivors == [4242]  # a fake process: it never goes away


@pytest.mark.parametrize("env, message", [
    ({"BAD KEY": "1"}, 'env["BAD KEY"]: \'BAD KEY\' is not a variable name'),
    ({"1X": "1"}, "is not a variable name"),
    ({"A": "x\nB=2"}, 'env["A"]: the value holds a newline or NUL'),
    ({"A": "x\x00"}, "newline or NUL"),
])
def test_check_env_refuses_names_and_multiline_values(env, message):
    with pytest.raises(tr.TorchrunError) as exc:
        tr.check_env(env)
    assert message in str(exc.value)


def test_check_env_accepts_names_numbers_and_null():
    tr.check_env({"A": "1", "B_2": 3, "C": None})
