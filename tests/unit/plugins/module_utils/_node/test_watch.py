"""Decisions of the job watcher: the first failure across nodes, lost nodes, the lease, the stop."""
import json
import os

import pytest

from ansible_collections.multinode.training.plugins.module_utils._node import watch as w
from ansible_collections.multinode.training.plugins.module_utils._node import watchlib

# A rank's stderr when the script does not use @record (a third-party test script): the cause
# is the exception line of the last traceback, not torchrun's "no error message".
ASSERT_STDERR = """\
/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py:123: UserWarning: something
  warnings.warn(
Traceback (most recent call last):
  File "/opt/code/test_writes.py", line 40, in <module>
    main()
  File "/opt/code/test_writes.py", line 36, in main
    assert count == 4, f"Only wrote to file {count} times, not 4"
           ^^^^^^^^^^
AssertionError: Only wrote to file 2 times, not 4
"""

CHAINED = """\
Traceback (most recent call last):
  File "a.py", line 1, in <module>
KeyError: 'x'

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "a.py", line 3, in <module>
    raise RuntimeError("wrapped")
RuntimeError: wrapped
[rank2]:[W1121 10:00:00.000] ProcessGroupGloo.cpp:123 warning after the traceback
"""


def test_last_exception_line_from_stderr_without_record():
    assert watchlib.last_exception_line(ASSERT_STDERR) == "AssertionError: Only wrote to file 2 times, not 4"


def test_last_exception_line_takes_the_last_traceback():
    assert watchlib.last_exception_line(CHAINED) == "RuntimeError: wrapped"


def test_last_exception_line_dotted_and_bare():
    text = "Traceback (most recent call last):\n  File \"x\", line 1\ntorch.distributed.DistBackendError: NCCL error\n"
    assert watchlib.last_exception_line(text) == "torch.distributed.DistBackendError: NCCL error"
    assert watchlib.last_exception_line("Traceback (most recent call last):\n  x\nKeyboardInterrupt\n") == "KeyboardInterrupt"


def test_last_exception_line_none_without_traceback():
    assert watchlib.last_exception_line("just a warning\n") is None
    assert watchlib.last_exception_line("") is None


def test_first_failure_is_earliest_across_nodes():
    failures = [
        {"node": "node1", "rank": 0, "time": 105.0, "message": "RuntimeError: Connection closed by peer", "peer": True},
        {"node": "node2", "rank": 3, "time": 100.0, "message": "AssertionError: x"},
        {"node": "node3", "rank": 5, "time": 101.0, "message": "ValueError: y"},
    ]
    assert w.first_failure(failures)["rank"] == 3


def test_first_failure_tie_prefers_first_hand_then_lower_rank():
    failures = [
        {"node": "node1", "rank": 1, "time": 100.000, "peer": True},
        {"node": "node2", "rank": 4, "time": 100.005},
        {"node": "node2", "rank": 2, "time": 100.008},
    ]
    assert w.first_failure(failures)["rank"] == 2
    assert w.first_failure([]) is None
    assert w.first_failure([{"rank": 1, "time": None}, {"rank": 0, "time": 5.0}])["rank"] == 0


def test_lost_nodes_after_silence_not_when_ended():
    nodes = ["n1", "n2", "n3"]
    seen = {"n1": 100.0, "n2": 89.0, "n3": 80.0}
    states = {"n1": "running", "n2": "running", "n3": "succeeded"}
    # n2 silent 11 s > 10 s: lost; n3 silent longer but it ended by itself: not lost.
    assert w.lost_nodes(nodes, seen, states, now=100.0, lost_after=10, started=0) == ["n2"]
    assert w.lost_nodes(nodes, seen, states, now=98.0, lost_after=10, started=0) == []


def test_lost_nodes_never_heard_from_gets_a_startup_grace():
    assert w.lost_nodes(["n1", "n2"], {"n1": 50.0}, {}, now=50.0, lost_after=10, started=25.0) == []
    assert w.lost_nodes(["n1", "n2"], {"n1": 56.0}, {}, now=56.0, lost_after=10, started=25.0) == ["n2"]


def test_lease():
    assert w.lease_expired(60, 100.0, 161.0)
    assert not w.lease_expired(60, 100.0, 159.0)
    assert not w.lease_expired(0, 100.0, 10 ** 9)  # detached: no lease


def test_classify_rank():
    assert watchlib.classify_rank({"pid": 1}, None, True) == "running"
    assert watchlib.classify_rank({"pid": 1}, None, False) == "killed"
    assert watchlib.classify_rank({"pid": 1}, {"exitcode": 0}, False) == "succeeded"
    assert watchlib.classify_rank({"pid": 1}, {"exitcode": 2}, False) == "failed"
    assert watchlib.classify_rank(None, None, False) == "unknown"


def test_local_failure_non_restartable_and_restartable():
    ranks = [{"rank": 2, "local_rank": 0, "state": "running"},
             {"rank": 3, "local_rank": 1, "state": "failed", "exitcode": 1, "time": 5.0, "message": "E: x"}]
    assert w.local_failure(ranks, restartable=False, torchrun_rc=None)["rank"] == 3
    # torchrun restarts the workers: not a failure of the job until torchrun gives up.
    assert w.local_failure(ranks, restartable=True, torchrun_rc=None) is None
    assert w.local_failure(ranks, restartable=True, torchrun_rc=1)["rank"] == 3
    assert w.local_failure([], restartable=True, torchrun_rc=1)["kind"] == "torchrun"
    assert w.local_failure([{"state": "succeeded"}], restartable=False, torchrun_rc=0) is None


def test_stop_decision_order():
    failure = {"node": "n2", "rank": 3, "time": 1.0}
    assert w.stop_decision(None, [failure], ["n3"], False, True)["reason"] == "failure"
    assert w.stop_decision(None, [], ["n3"], False, True) == {"reason": "lost", "nodes": ["n3"]}
    # elastic: a lost node is survivable (the others restart without it)
    assert w.stop_decision(None, [], ["n3"], True, False) is None
    assert w.stop_decision(None, [], [], False, False, hub_lost="n1")["reason"] == "hub_lost"
    assert w.stop_decision(None, [], [], False, True) == {"reason": "lease"}
    assert w.stop_decision(None, [], [], False, False) is None
    kept = {"reason": "lease"}
    assert w.stop_decision(kept, [failure], [], False, False) is kept


def test_describe_stop_lines():
    stop = {"reason": "failure", "failure": {"node": "node2", "rank": 3, "local_rank": 1, "exitcode": 1,
                                             "message": "AssertionError: Only wrote to file 2 times, not 4"}}
    assert w.describe_stop(stop) == ("rank 3 (local_rank 1) on node2 exited 1: "
                                     "AssertionError: Only wrote to file 2 times, not 4")
    assert w.describe_stop({"reason": "lost", "nodes": ["node3"]}, lost_after=10) == \
        "node node3 lost (no heartbeat for 10s)"
    assert "controller lease expired" in w.describe_stop({"reason": "lease"}, lease=60)
    assert "c10d cannot continue" in w.describe_stop({"reason": "hub_lost", "nodes": ["node1"]}, lost_after=10)
    assert w.describe_stop(None) == ""


def test_read_ranks_from_wrapper_records(tmp_path):
    exits = tmp_path / "exits"
    exits.mkdir()
    (exits / "0_0.start").write_text(json.dumps({"pid": os.getpid(), "rank": 0, "local_rank": 0, "restart": 0}))
    (exits / "0_1.start").write_text(json.dumps({"pid": 2 ** 22 + 7, "rank": 1, "local_rank": 1, "restart": 0}))
    (exits / "0_1.exit").write_text(json.dumps({"exitcode": 1, "message": "AssertionError: x", "time": 3.0}))
    ranks = watchlib.read_ranks(str(tmp_path), "n1")
    assert [(r["rank"], r["state"]) for r in ranks] == [(0, "running"), (1, "failed")]
    assert ranks[1]["message"] == "AssertionError: x"


def test_follow_status_renews_lease_and_reports(tmp_path):
    from ansible_collections.multinode.training.plugins.module_utils._torchrun import follow as f
    (tmp_path / "lease").write_text("")
    os.utime(str(tmp_path / "lease"), (1, 1))
    rank0 = tmp_path / "ranks" / "job_x" / "attempt_0" / "0"
    rank0.mkdir(parents=True)
    (rank0 / "stdout.log").write_text("smoke: rank=0 step=1\nsmoke: rank=0 step=2\n")
    (tmp_path / "watch_state.json").write_text(json.dumps({"local": {"running": 2, "restarts": 1}}))
    out = f.status("job-1", str(tmp_path), {"start": 100.0}, now=135.0)
    assert os.path.getmtime(str(tmp_path / "lease")) > 1
    assert out["done"] is False
    assert out["progress"] == "job-1: running, 2 rank(s) running, 1 restart(s), 35s | rank 0: smoke: rank=0 step=2"


def test_follow_add_watch_state_takes_first_failure_and_stderr_cause(tmp_path):
    from ansible_collections.multinode.training.plugins.module_utils._torchrun import follow as f
    stop = {"reason": "failure", "failure": {"node": "node2", "rank": 3, "local_rank": 1, "exitcode": 1,
                                             "message": "AssertionError: x"}}
    (tmp_path / "watch_state.json").write_text(json.dumps({"stop": stop, "stop_line": "rank 3 ... AssertionError: x"}))
    result = {"failures": [{"local_rank": 0, "message": None}], "root_cause_line": "rank 0 ...: no error message",
              "ranks": [{"local_rank": 0, "stderr": str(tmp_path / "stderr.log")}]}
    (tmp_path / "stderr.log").write_text(ASSERT_STDERR)
    f.add_watch_state(str(tmp_path), result)
    assert result["first_failure"]["node"] == "node2"
    assert result["root_cause_line"] == "rank 3 ... AssertionError: x"
    assert result["failures"][0]["message"] == "AssertionError: Only wrote to file 2 times, not 4"


def test_follow_watch_conf_elastic_and_restartable():
    from ansible_collections.multinode.training.plugins.module_utils._torchrun import follow as f
    watch = {"hub_addr": "10.0.0.1", "port": 29401, "node": "n2", "nodes": ["n1", "n2"]}
    conf = f.watch_conf({"nnodes": "2:3", "max_restarts": 2, "watch": watch}, "j", "h")
    assert conf["elastic"] and conf["restartable"] and not conf["hub"] and conf["node"] == "n2"
    assert f.watch_conf({"nnodes": "2", "max_restarts": 0, "watch": None}, "j", "h")["hub"] is True


def test_peer_error_stop_becomes_lost_node():
    ranks = [{"rank": 0, "local_rank": 0, "state": "failed", "exitcode": 1, "time": 3.0,
              "message": "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer"}]
    failure = dict(w.local_failure(ranks, False, None), node="n1")
    assert failure["peer"] is True
    stop = w.stop_decision(None, [failure], [], False, False)
    assert w.refine_stop(stop, []) is stop
    refined = w.refine_stop(stop, ["n3"])
    assert refined["reason"] == "lost" and refined["nodes"] == ["n3"]
    assert w.describe_stop(refined, lost_after=10).startswith("node n3 lost (no heartbeat for 10s); first error elsewhere")
    first_hand = dict(stop, failure=dict(failure, peer=False))
    assert w.refine_stop(first_hand, ["n3"]) is first_hand


def test_caused_by_stop_only_after_the_stop_reached_the_node():
    stop = {"reason": "lease", "received": 100.0}
    # Ranks stopped by the lease stop (SIGTERM: no exit record, or an exit after it) are its consequence.
    assert watchlib.caused_by_stop({"rank": 0, "time": None}, stop)
    assert watchlib.caused_by_stop({"rank": 0, "time": 100.5}, stop)
    # A rank that failed before the stop arrived is a cause; no stop, nothing is a consequence.
    assert not watchlib.caused_by_stop({"rank": 0, "time": 99.0}, stop)
    assert not watchlib.caused_by_stop({"rank": 0, "time": None}, None)
    assert not watchlib.caused_by_stop(None, stop)
    assert not watchlib.caused_by_stop({"rank": 0, "time": 101.0}, {"reason": "lease"})


def _job_dir(tmp_path, job_id, **conf):
    job_dir = tmp_path / job_id
    (job_dir / "exits").mkdir(parents=True)
    watch = {"node": "node1", "job_id": job_id, "nodes": ["node1"], "hub": True, "lease": 1, "fail_grace": 1,
             "interval": 0.2, "lost": 5}
    watch.update(conf)
    (job_dir / "watch.json").write_text(json.dumps(watch))
    (job_dir / "lease").write_text("")
    return job_dir


def test_lease_stop_keeps_the_supervisor_which_records_the_end(tmp_path):
    """The watcher stops the job after the lease; the supervisor (SIGTERMed, never SIGKILLed) records
    result.json. A watcher that cannot read job.json (the module's, root 0640, while the watcher runs as
    the job's account) must still know the supervisor, or it would SIGKILL it with the ranks and no node
    would have a result. Here job.json has no pid at all: the watcher knows the supervisor from its
    command line only."""
    import subprocess
    import sys
    import time

    from ansible_collections.multinode.training.plugins.module_utils._node import supervisor as sup

    job_id = "lease-unit-%d" % os.getpid()
    job_dir = _job_dir(tmp_path, job_id)
    (job_dir / "job.json").write_text(json.dumps({"job_id": job_id}))
    env = dict(os.environ, MULTINODE_TRAINING_JOB=job_id, MULTINODE_TRAINING_JOB_DIR=str(job_dir))
    # The supervisor runs a "torchrun" that ignores SIGTERM (as a blocked agent may).
    child = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"
    supervisor = subprocess.Popen([sys.executable, sup.__file__, str(job_dir), job_id, "0", "1", str(tmp_path), "--",
                                   sys.executable, "-c", child], env=env, start_new_session=True)
    watcher = None
    try:
        time.sleep(1.0)
        old = time.time() - 30
        os.utime(str(job_dir / "lease"), (old, old))
        watcher = subprocess.Popen([sys.executable, w.__file__, str(job_dir), str(supervisor.pid)],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        out = watcher.communicate(timeout=60)[0].decode()
        assert supervisor.wait(timeout=30) == 0, out
        result = json.loads((job_dir / "result.json").read_text())
        assert result["stopped"] is True and "supervisor_lost" not in result
        assert "controller lease expired" in out
        state = json.loads((job_dir / "watch_state.json").read_text())
        assert state["stop"]["reason"] == "lease" and state["final"] is True
        # The stopped ranks are the lease's consequence, not a failure of this node.
        assert state["failures"] == []
        assert sup.find_job_processes(job_id, job_dir=str(job_dir)) == []
    finally:
        for proc in (supervisor, watcher):
            if proc is not None and proc.poll() is None:
                proc.kill()


def test_killed_supervisor_is_recorded_by_the_watcher(tmp_path):
    """A supervisor killed (SIGKILL) without a result: the watcher stops what is left and writes
    result.json in its place, so nothing waits for it until train_timeout."""
    import subprocess
    import sys
    import time

    job_id = "suplost-unit-%d" % os.getpid()
    job_dir = _job_dir(tmp_path, job_id, lease=0)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (job_dir / "job.json").write_text(json.dumps({"job_id": job_id, "pid": dead.pid, "start": time.time()}))
    watcher = w.Watcher(str(job_dir), dead.pid)
    watcher.started -= 60  # past the start-up settle time
    assert watcher.run() == 0
    result = json.loads((job_dir / "result.json").read_text())
    assert result["supervisor_lost"] is True and result["stopped"] is True


def test_nap_lasts_the_interval_unless_poked_and_a_report_to_the_hub_pokes(tmp_path):
    """The loop's nap lasts the interval while nothing happens; another node's new state at the hub
    ends it at once, a heartbeat that repeats the same state does not."""
    import time

    job_dir = _job_dir(tmp_path, "nap-unit", lease=0, nodes=["node1", "node2"])
    watcher = w.Watcher(str(job_dir))
    watcher.interval = 0.6
    start = time.time()
    watcher.nap()
    assert time.time() - start >= 0.55
    watcher.on_message({"node": "node2", "state": "running"})  # the first report is a change
    start = time.time()
    watcher.nap()
    assert time.time() - start < 0.1
    watcher.on_message({"node": "node2", "state": "running"})
    start = time.time()
    watcher.nap()
    assert time.time() - start >= 0.55
    watcher.on_message({"node": "node2", "state": "succeeded"})
    start = time.time()
    watcher.nap()
    assert time.time() - start < 0.1


def test_the_supervisor_wakes_the_watcher_at_the_end(tmp_path):
    """A real watcher process (interval 5 s) and a real supervisor: the watcher writes its final state
    within a fraction of a second of result.json (the supervisor's SIGURG ends its nap), not up to an
    interval later; a SIGURG before the watcher listens does not kill it (ignored by default)."""
    import subprocess
    import sys
    import time

    from ansible_collections.multinode.training.plugins.module_utils._node import supervisor as sup

    job_id = "wake-unit-%d" % os.getpid()
    job_dir = _job_dir(tmp_path, job_id, lease=0, interval=5)
    env = dict(os.environ, MULTINODE_TRAINING_JOB=job_id, MULTINODE_TRAINING_JOB_DIR=str(job_dir))
    supervisor = subprocess.Popen([sys.executable, sup.__file__, str(job_dir), job_id, "0", "1", str(tmp_path), "--",
                                   sys.executable, "-c", "import time; time.sleep(3)"], env=env, start_new_session=True)
    watcher = subprocess.Popen([sys.executable, w.__file__, str(job_dir), str(supervisor.pid)],
                               env=dict(os.environ, MULTINODE_TRAINING_WATCH=job_id), stdout=subprocess.DEVNULL)
    try:
        (job_dir / "job.json").write_text(json.dumps({"job_id": job_id, "pid": supervisor.pid, "start": time.time(),
                                                      "watch_pid": watcher.pid}))
        assert sup.wake_watcher(str(job_dir), job_id) == watcher.pid  # at once: maybe before it listens
        assert supervisor.wait(timeout=30) == 0
        assert watcher.wait(timeout=30) == 0
        ended = json.loads((job_dir / "result.json").read_text())["end"]
        state = json.loads((job_dir / "watch_state.json").read_text())
        assert state["final"] is True
        assert state["time"] - ended < 1.0, state["time"] - ended
    finally:
        for proc in (supervisor, watcher):
            if proc.poll() is None:
                proc.kill()
    # not this job's watcher (another job id in its environment): no signal
    assert sup.wake_watcher(str(job_dir), "other-job") is None


def test_wake_watcher_waits_out_the_empty_environment_right_after_an_exec(tmp_path, monkeypatch):
    """Right after the watcher's exec its /proc/<pid>/environ reads empty for a few ms (tens under
    load; the parent's Popen or spawn has returned by then): the supervisor's wake, at the end of a
    job that ended at once, asked once and dropped the SIGURG. It asks again until the environment
    shows (up to ``settle`` s): a live process whose environment stays empty, or another job's
    watcher, gets no signal."""
    import threading

    from ansible_collections.multinode.training.plugins.module_utils._node import supervisor as sup

    root = tmp_path / "proc"
    (root / "4242").mkdir(parents=True)
    (root / "4242" / "stat").write_bytes(b"4242 (python) S 1 4242 4242")
    (root / "4242" / "environ").write_bytes(b"")
    (tmp_path / "job.json").write_text(json.dumps({"job_id": "j1", "watch_pid": 4242}))
    sent = []
    monkeypatch.setattr(sup.os, "kill", lambda pid, sig: sent.append((pid, sig)))
    timer = threading.Timer(0.2, lambda: (root / "4242" / "environ").write_bytes(b"PATH=/bin\0MULTINODE_TRAINING_WATCH=j1\0"))
    timer.start()
    try:
        assert sup.wake_watcher(str(tmp_path), "j1", proc=str(root), settle=5.0) == 4242
    finally:
        timer.cancel()
    assert sent == [(4242, watchlib.WAKE_SIGNAL)]
    assert sup.wake_watcher(str(tmp_path), "j2", proc=str(root)) is None
    (root / "4242" / "environ").write_bytes(b"")
    assert sup.wake_watcher(str(tmp_path), "j1", proc=str(root), settle=0.3) is None
    (root / "4242" / "stat").write_bytes(b"4242 (python) Z 1 4242 4242")  # gone: not waited for
    (root / "4242" / "environ").write_bytes(b"MULTINODE_TRAINING_WATCH=j1\0")
    assert sup.wake_watcher(str(tmp_path), "j1", proc=str(root), settle=60) is None
    assert sent == [(4242, watchlib.WAKE_SIGNAL)]


def test_the_files_shipped_alone_import_nothing_but_the_standard_library(tmp_path):
    """mt_rank.py and supervisor.py run from the job directory; _node/torchrun.py and supervisor.py
    run beside slurm_node.py on Slurm nodes: each must import on its own, in an isolated python (-I:
    no site-packages, no ansible) with only its own directory on the path. (mt_watch.py imports its
    library beside it: the job directory as the module writes it, test_standalone.py.)"""
    import shutil
    import subprocess
    import sys

    from ansible_collections.multinode.training.plugins.module_utils._node import torchrun as _torchrun
    from ansible_collections.multinode.training.plugins.module_utils._node import rankwrap
    from ansible_collections.multinode.training.plugins.module_utils._node import supervisor as _torchrun_supervisor

    for module in (_torchrun, rankwrap, _torchrun_supervisor):
        alone = tmp_path / module.__name__.rsplit(".", 1)[1]
        alone.mkdir()
        shutil.copy(module.__file__, str(alone / "shipped.py"))
        done = subprocess.run([sys.executable, "-I", "-c", "import sys; sys.path.insert(0, %r); import shipped" % str(alone)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
        assert done.returncode == 0, (module.__name__, done.stdout.decode())


def _hub_answering(stop):
    """A stand-in hub on 127.0.0.1: answers every report with ``stop``; -> (port, reports, server)."""
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    reports = []

    def serve():
        conn, _addr = server.accept()
        with conn, conn.makefile("rb") as reader:
            for raw in reader:
                reports.append(json.loads(raw.decode("utf-8")))
                conn.sendall((json.dumps({"stop": stop, "restart": None}) + "\n").encode("utf-8"))

    threading.Thread(target=serve, daemon=True).start()
    return server.getsockname()[1], reports, server


@pytest.mark.parametrize("hub_stop, expected", [
    ({"reason": "lease"}, "lease"),  # the hub stopped first: this node's killed ranks are its consequence
    (None, "failure"),  # the hub has decided nothing: this node's failure stops its job
])
def test_a_node_takes_the_hubs_stop_before_its_own_killed_ranks(tmp_path, hub_stop, expected):
    """When the first node's lease runs out, its torchrun takes the rendezvous store along, and another
    node's torchrun may kill that node's ranks just before its own lease runs out: 'rank R killed by a
    signal' is then a consequence, not the cause. A node reports to the hub first and takes a stop the
    hub already decided; its own failure stops the job only when none was."""
    port, reports, server = _hub_answering(hub_stop)
    job_dir = _job_dir(tmp_path, "order-unit", hub=False, node="node2", nodes=["node1", "node2"], lease=0,
                       hub_addr="127.0.0.1", port=port, token="t")
    watcher = w.Watcher(str(job_dir))
    killed = {"kind": "rank", "rank": 2, "local_rank": 0, "exitcode": -9, "node": "node2", "time": 1.0,
              "message": "killed by a signal (SIGKILL, OOM kill?) without an exit record"}
    states = iter([{"node": "node2", "state": "running", "failure": killed, "running": 0, "restarts": 0, "ranks": []},
                   {"node": "node2", "state": "stopped", "failure": killed, "running": 0, "restarts": 0, "ranks": []}])
    watcher.local_state = lambda: next(states)
    watcher.kill_local = lambda workers_only=False: None
    watcher.nap = lambda: None
    try:
        assert watcher.run() == 0
    finally:
        server.close()
    assert watcher.stop["reason"] == expected
    assert reports[0]["failure"] == killed  # the hub hears of the failure either way


@pytest.mark.parametrize("node2_renewed", [True, False])
def test_the_lease_is_the_jobs_judged_at_the_hub_from_every_nodes_renewal(tmp_path, node2_renewed):
    """More nodes than Ansible's forks: the controller may poll some nodes only. Each node tells the hub
    how old its own lease is; the hub stops the job (everywhere) only when no node's lease was renewed
    for ``lease`` seconds, and a node never stops on its own lease (a real hub and a real node over a
    socket). The hub's own lease is 30 s old here, past the 20 s lease: node2's fresh renewal keeps the
    job; without it the hub stops the job and node2 stops with the hub's answer."""
    import socket
    import threading
    import time

    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    hub_dir = _job_dir(tmp_path / "n1", "lease-job", nodes=["node1", "node2"], lease=20, port=port, token="t",
                       bind="127.0.0.1")
    node_dir = _job_dir(tmp_path / "n2", "lease-job", hub=False, node="node2", nodes=["node1", "node2"], lease=20,
                        hub_addr="127.0.0.1", port=port, token="t")
    old = time.time() - 30
    os.utime(str(hub_dir / "lease"), (old, old))
    node_mtime = time.time() - 2 if node2_renewed else old
    os.utime(str(node_dir / "lease"), (node_mtime, node_mtime))
    hub, node = w.Watcher(str(hub_dir)), w.Watcher(str(node_dir))
    killed = []
    hub.kill_local = lambda workers_only=False: killed.append("node1")
    node.kill_local = lambda workers_only=False: killed.append("node2")
    threading.Thread(target=hub.serve, args=(port,), daemon=True).start()
    running = {"state": "running", "failure": None, "running": 1, "restarts": 0, "ranks": []}
    hub_local = dict(running, node="node1")
    # node2 reports twice (its lease age each time); the hub judges between the two
    rounds = []

    def node_state():
        rounds.append(len(rounds))
        if len(rounds) == 2:
            hub.hub_tick(hub_local)
        return dict(running, node="node2") if len(rounds) < 3 else dict(running, node="node2", state="succeeded")

    node.local_state = node_state
    node.nap = lambda: None
    ran = []
    threading.Thread(target=lambda: ran.append(node.run()), daemon=True).start()
    deadline = time.time() + 10
    while not ran and time.time() < deadline:
        time.sleep(0.05)
    assert ran == [0]
    assert abs(hub.lease_heard - node_mtime) < 2
    if node2_renewed:
        assert hub.stop is None and node.stop is None and killed == []
        return
    assert hub.stop["reason"] == "lease" and hub.stop["decided_by"] == "node1"
    assert node.stop["reason"] == "lease" and node.stop["decided_by"] == "hub"
    assert "node1" in killed and "node2" in killed


def test_a_node_never_heard_from_is_lost_after_the_start_grace(tmp_path):
    """The launch starts the nodes a few at a time (Ansible's forks): a node not heard from yet is given the
    configured start grace (the rendezvous join timeout), not the 10 s of a node that went quiet."""
    job_dir = _job_dir(tmp_path, "grace-job", nodes=["node1", "node2"], lease=0, start_grace=120)
    hub = w.Watcher(str(job_dir))
    hub.kill_local = lambda workers_only=False: None
    running = {"node": "node1", "state": "running", "failure": None, "running": 1, "restarts": 0, "ranks": []}
    hub.started -= 100  # 100 s after the hub's start, node2 never heard from
    hub.hub_tick(running)
    assert hub.lost == [] and hub.stop is None
    hub.started -= 40  # 140 s > lost (5) + 120
    hub.hub_tick(running)
    assert hub.lost == ["node2"] and hub.stop["reason"] == "lost"


# ---------------------------------------------------------------- elastic: a lost node's restart

def test_a_lost_node_restarts_only_the_ranks_that_may_wait_on_it():
    """node3 last heard from 30 s ago (interval 0.5 s): a rank started before that may be in a group
    with it; a rank started 25 s ago was started by torchrun after the loss (its peer connection
    failed and the agent restarted it): killing it would cost another of max_restarts."""
    now = 1000.0
    ranks = [{"pid": 11, "state": "running", "started": now - 100},        # before the last sight
             {"pid": 12, "state": "running", "started": now - 29.8},       # within one heartbeat of it
             {"pid": 13, "state": "running", "started": now - 25},         # after: spared
             {"pid": 14, "state": "running", "started": None},             # unknown: restarted
             {"pid": 15, "state": "failed", "started": now - 100},         # not running
             {"pid": None, "state": "running", "started": now - 100}]
    assert w.ranks_to_restart(ranks, seen_ago=30, now=now, interval=0.5) == [11, 12, 14]
    # the node never heard from (seen_ago 0): every running rank
    assert w.ranks_to_restart(ranks, seen_ago=0, now=now, interval=0.5) == [11, 12, 13, 14]


def test_the_hub_answers_a_restart_in_seconds_since_the_lost_node_was_heard():
    assert w.restart_reply(None) is None
    assert w.restart_reply({"node": "n3", "seen": 970.0}, now=1000.0) == {"node": "n3", "seen_ago": 30.0}
    assert w.restart_reply({"node": "n3", "seen": None}, now=1000.0) == {"node": "n3", "seen_ago": 0}


def test_an_elastic_hub_restarts_its_ranks_of_before_the_loss_only(tmp_path, monkeypatch):
    """The hub's own node: node3 silent past lost_after; ranks torchrun started after node3's last
    heartbeat are kept, a rank of before it is SIGKILLed, and the node still answered names node3."""
    import time

    job_dir = _job_dir(tmp_path, "elastic-restart", nodes=["node1", "node2", "node3"], elastic=True, lease=0,
                       restartable=True)
    hub = w.Watcher(str(job_dir))
    now = time.time()
    hub.last_seen.update(node2=now, node3=now - 30)
    hub.states.update(node2="running", node3="running")
    killed = []
    hub.kill_local = lambda workers_only=None: killed.append(list(workers_only or []))
    ranks = [{"pid": 21, "state": "running", "started": now - 10}]
    monkeypatch.setattr(w, "read_ranks", lambda job_dir, node=None: ranks)
    local = {"state": "running", "failure": None, "running": 1, "restarts": 1, "ranks": ranks}
    hub.hub_tick(local)
    assert hub.lost == ["node3"] and hub.stop is None and killed == []
    assert hub.events[-1]["text"].endswith("node3: torchrun started them after it was last heard from")
    assert w.restart_reply(hub.restart_requested["node2"])["node"] == "node3"
    assert 29 < w.restart_reply(hub.restart_requested["node2"])["seen_ago"] < 31
    ranks[0]["started"] = now - 60
    hub.restart_requested["node1"] = {"node": "node3", "seen": now - 30}
    hub.hub_tick(local)
    assert killed == [[21]] and hub.events[-1]["text"] == "restarting the ranks on this node without node3"
    ranks[0]["state"] = "failed"
    hub.restart_requested["node1"] = {"node": "node3", "seen": now - 30}
    hub.hub_tick(local)
    assert killed == [[21]] and "none running (torchrun is restarting them)" in hub.events[-1]["text"]


# ---------------------------------------------------------------- a crash loop (no_progress)

def _patterns(pattern=None):
    from ansible_collections.multinode.training.plugins.module_utils._report import steps
    return [regex for _name, regex in steps.compile_patterns(pattern)]


def test_scan_steps_takes_the_highest_step_and_counts_stepless_lines():
    smoke = "smoke: rank=0 step=3 loss=1.0\nsmoke: rank=0 step=12 loss=0.9\nsmoke: rank=0 step=7 loss=0.8\n"
    deepspeed = "[INFO] [logging.py:107:log_dist] [Rank 0] step=40, skipped=0, lr=[0.001]\n"
    trainer = "{'loss': 3.9, 'grad_norm': 1.2, 'epoch': 0.1}\r{'loss': 3.8, 'epoch': 0.2}\n"
    assert w.scan_steps([smoke], _patterns()) == (12, 0)
    assert w.scan_steps([smoke, deepspeed], _patterns()) == (40, 0)
    assert w.scan_steps([trainer], _patterns()) == (None, 2)
    assert w.scan_steps(["Traceback (most recent call last):\n"], _patterns()) == (None, 0)
    # a user's pattern replaces the built-in ones (anchored lines work: compiled with re.M in the watcher)
    import re
    mine = [re.compile(r"^it (?P<step>\d+)", re.M)]
    assert w.scan_steps(["it 5\nit 9\nsmoke: rank=0 step=99\n"], mine) == (9, 0)


def _judge(generations_and_progress, limit, failure=None):
    """Feed crash_loop one look after another -> the stops it returned (None where it did not stop)."""
    loop, stops = {}, []
    for generation, progress in generations_and_progress:
        loop, stop = w.crash_loop(loop, generation, progress, limit, failure)
        stops.append(stop)
    return stops


def test_merged_progress_takes_the_highest_step_and_sums_the_rest():
    assert w.merged_progress({}) == [None, 0, 0]
    assert w.merged_progress({"n1": [40, 0, 1], "n2": [None, 3, 2], "n3": None}) == [40, 3, 3]


def test_crash_loop_stops_after_the_limit_of_attempts_in_a_row_without_progress():
    boom = {"rank": 1, "node": "n1", "exitcode": 1, "message": "RuntimeError: injected failure", "time": 5.0}
    # the first attempt reached step 40; every restart died at step 40 again (no checkpoint to resume from)
    looks = [(1, [12, 0, 0]), (1, [40, 0, 0]), (2, [40, 0, 0]), (3, [40, 0, 0]), (3, [40, 0, 0]), (4, [40, 0, 0])]
    stops = _judge(looks, 2, boom)
    assert stops[:5] == [None] * 5
    assert stops[5]["reason"] == "no_progress" and stops[5]["attempts"] == 2 and stops[5]["step"] == 40
    assert w.describe_stop(stops[5]) == (
        "no progress in 2 attempt(s) in a row (no step past 40, no new checkpoint): stopped instead of restarting "
        "again; the last attempt ended with rank 1 on n1: RuntimeError: injected failure")
    # one attempt short of the limit; the limit off
    assert _judge(looks, 3) == [None] * 6
    assert _judge(looks, 0) == [None] * 6


@pytest.mark.parametrize("third, stopped", [
    ([41, 0, 0], False),  # a step past every earlier attempt's
    ([40, 0, 1], False),  # a new checkpoint
    ([40, 1, 0], False),  # a new step-less step line (the Trainer's log dict)
    ([40, 0, 0], True),
])
def test_crash_loop_a_new_step_checkpoint_or_line_is_progress(third, stopped):
    stops = _judge([(1, [40, 0, 0]), (2, [40, 0, 0]), (3, [40, 0, 0]), (4, third)], 2)
    assert stops[:3] == [None] * 3 and (stops[3] is not None) is stopped


def test_crash_loop_judges_the_first_attempt_against_nothing():
    # a job that dies before its first step line or checkpoint
    stops = _judge([(1, [None, 0, 0]), (2, [None, 0, 0]), (3, [None, 0, 0]), (4, [None, 0, 0])], 3)
    assert stops[:3] == [None] * 3 and stops[3]["attempts"] == 3 and stops[3]["step"] is None
    assert w.describe_stop(stops[3]).startswith(
        "no progress in 3 attempt(s) in a row (no step line, no new checkpoint): stopped instead of restarting")
    # a step line in the first attempt is progress
    assert _judge([(1, [1, 0, 0]), (2, [1, 0, 0])], 1) == [None, None]


def test_stop_decision_takes_a_crash_loop_after_failures_and_lost_nodes():
    stalled = {"reason": "no_progress", "attempts": 3, "step": None, "failure": None}
    failure = {"node": "n1", "rank": 0, "time": 1.0}
    assert w.stop_decision(None, [], [], False, False, stalled=stalled) is stalled
    assert w.stop_decision(None, [failure], [], False, False, stalled=stalled)["reason"] == "failure"
    assert w.stop_decision(None, [], ["n2"], False, False, stalled=stalled)["reason"] == "lost"


def test_follow_watch_conf_carries_the_crash_loop_limit_patterns_and_checkpoint_dir():
    from ansible_collections.multinode.training.plugins.module_utils._torchrun import follow as f
    params = {"nnodes": "2", "max_restarts": 5, "max_no_progress_restarts": 3, "step_pattern": r"it (?P<step>\d+)",
              "env": {"MULTINODE_TRAINING_CHECKPOINT_DIR": "/shared/ckpt"}, "watch": None}
    conf = f.watch_conf(params, "j", "h")
    assert conf["no_progress"] == 3 and conf["step_patterns"] == [r"it (?P<step>\d+)"]
    assert conf["checkpoint_dir"] == "/shared/ckpt"
    builtin = f.watch_conf({"nnodes": "1", "max_restarts": 5, "watch": None}, "j", "h")
    assert builtin["no_progress"] == 0 and len(builtin["step_patterns"]) == 4 and builtin["checkpoint_dir"] == ""


def _rank_group(job_dir, attempt, local, rank, stdout, pid):
    """One rank of a worker group as the rank wrapper and torchrun leave it (no .exit: running or killed)."""
    ranks = job_dir / "ranks" / "run_x" / ("attempt_%d" % attempt) / str(local)
    ranks.mkdir(parents=True, exist_ok=True)
    (ranks / "stdout.log").write_text(stdout)
    (ranks / "stderr.log").write_text("")
    (job_dir / "exits" / ("%d_%d.start" % (attempt, local))).write_text(json.dumps(
        {"rank": rank, "local_rank": local, "restart": attempt, "pid": pid, "time": 1.0 + attempt}))


def _failed(job_dir, attempt, local, time_):
    (job_dir / "exits" / ("%d_%d.exit" % (attempt, local))).write_text(json.dumps(
        {"exitcode": 1, "time": time_, "message": "RuntimeError: attempt at %s" % time_}))


def test_the_watcher_counts_worker_groups_reads_progress_and_stops_a_loop(tmp_path):
    """A node's watcher counts a new worker group when ranks with new pids start after the last group's
    are gone - also where torchrun restarts the ranks without counting it (a membership change leaves
    TORCHELASTIC_RESTART_COUNT as it was: the same attempt names, the log written anew) - reads the
    last group's output to its end then, and the hub (a lone node here) stops the job at the limit."""
    import subprocess
    import sys
    import time

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    old = time.time() - 100
    os.utime(str(ckpt), (old, old))
    job_dir = _job_dir(tmp_path, "loop-unit", restartable=True, no_progress=2, lease=0, checkpoint_dir=str(ckpt),
                       step_patterns=[p.pattern for p in _patterns()])
    watcher = w.Watcher(str(job_dir))
    watcher.kill_local = lambda workers_only=False: None
    procs = []

    def group(attempt, stdout):
        for proc in procs:
            proc.kill()
            proc.wait()
        del procs[:]
        for local in (0, 1):  # the ranks' start records seen one look apart: one group
            procs.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]))
            _rank_group(job_dir, attempt, local, local, stdout, procs[-1].pid)
            watcher.hub_tick(watcher.local_state())

    try:
        group(0, "smoke: rank=0 step=1\nsmoke: rank=0 step=9\n")
        assert watcher.generation == 1 and watcher.progress == [9, 0, 0] and watcher.stop is None
        _failed(job_dir, 0, 1, 10.0)
        (ckpt / "global_step5").mkdir()  # a checkpoint during the first group
        # the second group: torchrun did not count it here (attempt 0 again, its log written anew)
        group(0, "smoke: rank=0 step=1\n")
        assert watcher.generation == 2 and watcher.progress == [9, 0, 1] and watcher.stop is None
        _failed(job_dir, 0, 1, 20.0)
        group(1, "smoke: rank=0 step=9\n")  # no step past 9, no checkpoint: 1 in a row
        assert watcher.generation == 3 and watcher.stop is None
        _failed(job_dir, 1, 0, 30.0)
        group(2, "")  # 2 in a row: stopped
        assert watcher.generation == 4 and watcher.stop["reason"] == "no_progress"
        line = w.describe_stop(watcher.stop)
        assert "no progress in 2 attempt(s) in a row (no step past 9, no new checkpoint)" in line
        assert "the last attempt ended with rank 0 on node1: RuntimeError: attempt at 30.0" in line
        # decided once: a group after the stop is not judged again
        judged = dict(watcher.loop)
        group(3, "")
        assert watcher.generation == 5 and watcher.loop == judged
    finally:
        for proc in procs:
            proc.kill()


# ---------------------------------------------------------------- a hang

def _rank(node, rank, enq, done, where=None, op=None):
    return {"node": node, "rank": rank, "fr": {"0": [enq, done]}, "where": where,
            "stack": [where] if where else None, "op": op, "age": 0}


def test_rank_span():
    assert w.rank_span([0, 1, 2, 5, 7, 8]) == "0-2, 5, 7-8"
    assert w.rank_span([3]) == "3" and w.rank_span([]) == "none" and w.rank_span([None]) == "none"


def test_hang_check_names_the_rank_that_did_not_enter_after_the_timeout():
    op = {"pg": "0", "seq": 57, "name": "gloo:all_reduce"}
    ranks = [_rank("n1", 0, 57, 56, "train.py:40 in step: dist.all_reduce(t)", op),
             _rank("n1", 1, 57, 56, "train.py:40 in step: dist.all_reduce(t)", op),
             _rank("n2", 2, 57, 56, "train.py:40 in step: dist.all_reduce(t)", op),
             _rank("n2", 3, 56, 56, "train.py:42 in main: time.sleep(3600)")]
    record, stop = w.hang_check({}, ranks, 100.0, 60)
    assert stop is None and record["since"] == 100.0
    record, stop = w.hang_check(record, ranks, 159.0, 60)
    assert stop is None  # 59 s: not yet
    record, stop = w.hang_check(record, ranks, 161.0, 60)
    assert stop["reason"] == "hang" and stop["seq"] == 57 and stop["op"] == "gloo:all_reduce"
    assert [r["rank"] for r in stop["missing"]] == [3] and [r["rank"] for r in stop["entered"]] == [0, 1, 2]
    assert w.describe_stop(stop) == ("hang: rank 3 on n2 did not enter gloo:all_reduce #57 that ranks 0-2 have "
                                     "waited in for 61s; its stack: train.py:42 in main: time.sleep(3600)")
    # the same before the timeout once anything changed (a rank completed a collective)
    moved = [dict(r) for r in ranks]
    moved[0] = _rank("n1", 0, 57, 57)
    record, stop = w.hang_check(record, moved, 162.0, 60)
    assert stop is None and record["since"] == 162.0


def test_hang_check_judges_nothing_that_is_not_a_hang():
    record = {}
    # every rank entered the same collective (a network fault): the backend's timeout
    same = [_rank("n1", 0, 57, 56), _rank("n2", 1, 57, 56)]
    for now in (0.0, 1000.0):
        record, stop = w.hang_check(record, same, now, 60)
    assert stop is None
    # a rank whose process group does not run yet (no status): nothing judged, the clock starts again
    record, stop = w.hang_check(record, same + [{"node": "n2", "rank": 2, "fr": None}], 2000.0, 60)
    assert stop is None and record == {"key": None, "since": 2000.0}
    # off
    assert w.hang_check({}, same, 0.0, 0)[1] is None


def test_hang_lines_for_several_ranks_and_a_rank_without_a_sample():
    stop = {"reason": "hang", "op": "nccl:all_reduce", "seq": 9, "waited": 300,
            "missing": [{"node": "n2", "rank": 2, "where": None, "stack": None, "age": 312},
                        {"node": "n3", "rank": 5, "where": None, "stack": None, "age": 4}],
            "entered": [{"node": "n1", "rank": 0}]}
    assert w.describe_stop(stop) == ("hang: ranks 2, 5 on n2, n3 did not enter nccl:all_reduce #9 that rank 0 has "
                                     "waited in for 300s; no stack (no sample from it for 312s: stopped, or holding "
                                     "the GIL)")


def test_read_collectives_takes_each_local_ranks_latest_sample_of_the_latest_attempt(tmp_path):
    samples = tmp_path / "samples"
    samples.mkdir()
    (samples / "0_0.jsonl").write_text(json.dumps({"kind": "proc", "t": 1.0, "fr": {"0": [1, 1]}}) + "\n")
    (samples / "1_0.jsonl").write_text("\n".join(json.dumps(r) for r in [
        {"kind": "proc", "t": 10.0, "fr": {"0": [5, 5]}},
        {"kind": "proc", "t": 12.0, "fr": {"0": [6, 5]}, "where": "a.py:1 in f: x", "stack": ["a.py:1 in f: x"],
         "op": {"pg": "0", "seq": 6, "name": "gloo:all_reduce"}},
        {"kind": "line", "t": 12.5, "text": "step 3"}]) + "\n")
    (samples / "1_1.jsonl").write_text('{"kind": "proc", "t": 11.0}\n{"kind": "pro')  # a line cut short
    ranks = [{"restart": 1, "local_rank": 0, "rank": 2}, {"restart": 1, "local_rank": 1, "rank": 3},
             {"restart": 0, "local_rank": 0, "rank": 0}]
    out = watchlib.read_collectives(str(tmp_path), ranks, "n2", 15.0)
    assert [(r["rank"], r["fr"], r["age"]) for r in out] == [(2, {"0": [6, 5]}, 3), (3, None, 4)]
    assert out[0]["where"] == "a.py:1 in f: x" and out[0]["op"]["name"] == "gloo:all_reduce"
    assert watchlib.read_collectives(str(tmp_path / "none"), ranks, "n2", 15.0) == []


def test_the_hub_judges_a_hang_once_every_node_reported_and_keeps_it(tmp_path):
    job_dir = _job_dir(tmp_path, "hang-unit", nodes=["node1", "node2"], hang=60, lease=0)
    watcher = w.Watcher(str(job_dir))
    op = {"pg": "0", "seq": 8, "name": "gloo:all_reduce"}
    watcher.collectives = [_rank("node1", 0, 8, 7, "smoke_train.py:101 in _steps: dist.all_reduce(x)", op)]
    assert watcher.judge_hang(0.0) is None  # node2 has not reported
    watcher.node_collectives["node2"] = [_rank("node2", 1, 7, 7, "smoke_train.py:96 in _steps: time.sleep(3600)")]
    assert watcher.judge_hang(1.0) is None and watcher.judge_hang(60.0) is None
    stop = watcher.judge_hang(61.5)
    assert stop["reason"] == "hang" and stop["missing"][0]["rank"] == 1
    kept = json.loads((job_dir / "hang.json").read_text())
    assert [r["rank"] for r in kept["ranks"]] == [0, 1] and kept["seq"] == 8
    # a lost node's ranks are not waited for (nor judged)
    watcher.lost.append("node2")
    assert watcher.judge_hang(200.0) is None


def test_follow_watch_conf_carries_the_hang_timeout():
    from ansible_collections.multinode.training.plugins.module_utils._torchrun import follow as f
    assert f.watch_conf({"nnodes": "2", "hang_timeout": 60, "watch": None}, "j", "h")["hang"] == 60
    assert f.watch_conf({"nnodes": "2", "watch": None}, "j", "h")["hang"] == 0


# ---------------------------------------------------------------- the watcher's own reads (what the hub and report get)

def test_the_watcher_reads_its_ranks_samplers_cpu_and_collectives_and_saves_them(tmp_path):
    """A running rank (this process, with a sampler thread that spins 0.3 CPU-s) and its latest sample: the
    node's watcher reads the thread's CPU from /proc into watch_state.json (the report's sampler cost, read from
    outside the rank) and the rank's flight-recorder status for the hub (a hang is judged on it)."""
    import time

    from tests.unit.conftest import busy_sampler_thread

    job_dir = _job_dir(tmp_path, "reads", hang=60, lease=0)
    _rank_group(job_dir, 0, 0, 0, "", os.getpid())
    (job_dir / "samples").mkdir()
    (job_dir / "samples" / "0_0.jsonl").write_text(json.dumps(
        {"kind": "proc", "t": time.time(), "cpu": 1.0, "fr": {"0": [7, 6]}, "where": "train.py:3 in f: x",
         "op": {"pg": "0", "seq": 7, "name": "nccl:all_reduce"}}) + "\n")
    with busy_sampler_thread(0.3):
        watcher = w.Watcher(str(job_dir))
        watcher.save(watcher.local_state())
    state = json.loads((job_dir / "watch_state.json").read_text())
    assert 0.25 <= state["sampler_cpu"]["0_0"] < 5
    [rank] = watcher.collectives
    assert rank.pop("age") >= 0  # seconds since the sample
    assert rank == {"node": "node1", "rank": 0, "local_rank": 0, "fr": {"0": [7, 6]}, "where": "train.py:3 in f: x",
                    "stack": None, "op": {"pg": "0", "seq": 7, "name": "nccl:all_reduce"}}


def test_a_crash_loop_is_judged_once_the_last_node_started_the_new_group(tmp_path):
    """node1 (the hub) started its third worker group, node2 only its second: the attempt that ended is judged
    when node2 starts its third too (its last group's output read to its end), not before."""
    job_dir = _job_dir(tmp_path, "loop-two", nodes=["node1", "node2"], restartable=True, no_progress=2, lease=0)
    watcher = w.Watcher(str(job_dir))
    watcher.generation, watcher.progress = 3, [None, 0, 0]
    watcher.node_generation["node2"], watcher.node_progress["node2"] = 2, [None, 0, 0]
    assert watcher.judge_attempts() is None and watcher.loop["generation"] == 2
    watcher.node_generation["node2"] = 3
    stop = watcher.judge_attempts()
    assert watcher.loop["generation"] == 3 and stop and stop["reason"] == "no_progress"


def test_latest_failure_is_the_latest_first_hand_one():
    """A peer error (a rank that died because another did) comes after its cause: it is named only when
    no failure is first-hand."""
    cause = {"rank": 1, "time": 100.0, "peer": False}
    peer = {"rank": 2, "time": 103.5, "peer": True, "message": "Connection closed by peer"}
    older = {"rank": 1, "time": 50.0, "peer": False}
    assert w.latest_failure([older, peer, cause]) is cause
    assert w.latest_failure([peer, {"rank": 3, "time": 101.0, "peer": True}]) is peer
    assert w.latest_failure([None, {"rank": 0, "time": None}]) is None
    assert w.latest_failure([]) is None


def test_a_crash_loop_names_the_cause_not_a_later_peer_error(tmp_path):
    """Rank 1 on node1 raised; node2's ranks entered the next all-reduce before their agent stopped them and
    died of it seconds later (a peer error). The stop names rank 1, the cause."""
    job_dir = _job_dir(tmp_path, "loop-peer", nodes=["node1", "node2"], restartable=True, no_progress=1, lease=0)
    watcher = w.Watcher(str(job_dir))
    watcher.generation, watcher.progress = 2, [1, 0, 0]
    watcher.loop = {"generation": 1, "mark": [1, 0, 0], "run": 0}
    watcher.last_failure = {"rank": 1, "node": "node1", "exitcode": 1, "time": 100.0, "peer": False,
                            "message": "RuntimeError: injected failure on rank 1 at step 2"}
    watcher.node_generation["node2"], watcher.node_progress["node2"] = 2, [1, 0, 0]
    watcher.node_failure["node2"] = {"rank": 2, "node": "node2", "exitcode": 1, "time": 103.0, "peer": True,
                                     "message": "RuntimeError: Connection closed by peer [10.0.0.2]:1234"}
    stop = watcher.judge_attempts()
    assert stop and stop["reason"] == "no_progress" and stop["failure"]["rank"] == 1
    assert "the last attempt ended with rank 1 on node1: RuntimeError: injected" in w.describe_stop(stop)


def test_groups_that_end_between_two_looks_are_counted_from_their_records(tmp_path):
    """Two worker groups fail between two looks of the watcher (a job that crashes fast on a busy node): their
    start records (restart counts 1 and 2) are there though neither pid was ever seen alive, so the node counts
    both, and the hub counts both ended attempts without progress (the limit is reached on time)."""
    import subprocess
    import sys

    job_dir = _job_dir(tmp_path, "fast-loop", restartable=True, no_progress=3, lease=0)
    watcher = w.Watcher(str(job_dir))
    watcher.kill_local = lambda workers_only=False: None
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _rank_group(job_dir, 0, 0, 0, "", dead.pid)
        watcher.hub_tick(watcher.local_state())
        assert watcher.generation == 1
        _rank_group(job_dir, 1, 0, 0, "", dead.pid + 100000)  # failed before any look: never seen alive
        _rank_group(job_dir, 2, 0, 0, "", alive.pid)
        watcher.hub_tick(watcher.local_state())
        assert watcher.generation == 3 and watcher.loop["run"] == 2 and watcher.stop is None
        _rank_group(job_dir, 3, 0, 0, "", alive.pid + 100001)
        alive.kill()
        alive.wait()
        watcher.hub_tick(watcher.local_state())
        assert watcher.generation == 4 and watcher.stop and watcher.stop["attempts"] == 3
    finally:
        alive.kill()


def test_the_watcher_is_known_by_its_command_line_where_root_cannot_read_its_environment(tmp_path):
    """Root in a container without CAP_SYS_PTRACE (docker's default) cannot read another account's
    /proc/<pid>/environ: the stop must still find the job's watcher (it outlives the job by up to 15 s,
    waiting for the other nodes' ends), by the script it runs - never another job's."""
    proc = tmp_path / "proc"
    (proc / "41").mkdir(parents=True)
    (proc / "41" / "cmdline").write_bytes(b"/opt/venv/bin/python\0/var/log/mt/job-a/mt_watch.py\0"
                                          b"/var/log/mt/job-a\0" b"40\0")
    assert watchlib.watcher_alive({"watch_pid": 41, "job_id": "job-a"}, str(proc))
    assert not watchlib.watcher_alive({"watch_pid": 41, "job_id": "job-b"}, str(proc))
    assert not watchlib.watcher_alive({"watch_pid": 42, "job_id": "job-a"}, str(proc))  # gone
    # readable: the environment's marker decides
    (proc / "41" / "environ").write_bytes(("%s=job-b\0" % watchlib.WATCH_ENV).encode())
    assert watchlib.watcher_alive({"watch_pid": 41, "job_id": "job-b"}, str(proc))
    assert not watchlib.watcher_alive({"watch_pid": 41, "job_id": "job-a"}, str(proc))
