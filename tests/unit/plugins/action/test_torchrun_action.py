"""The torchrun action's start-then-wait (O(state=started) with O(follow), the launch's one task per node):
the start's own result where it failed or left no job, else the wait on that job (plugins/action/torchrun.py,
_torchrun.follow.wait_args)."""
from __future__ import annotations

import pytest

from ansible_collections.multinode.training.plugins.action import torchrun as action
from ansible_collections.multinode.training.plugins.module_utils._torchrun import bounded as bounded_mod
from ansible_collections.multinode.training.plugins.module_utils._torchrun import follow as fol
from tests.unit.conftest import StuckNode

START = {"state": "started", "script": "/c/train.py", "args": ["--steps", "2"], "nnodes": "2", "rdzv_id": "job-1",
         "rdzv_endpoint": "10.0.0.1:29400", "log_dir": "/var/log/mt", "timeout": 600, "stop_grace": 5,
         "env": {"HF_TOKEN": "secret"}, "watch": {"hub": True}}


class _Action(object):
    """What _start_and_follow asks of the action: the module call (recorded, answering ``started``) and
    the follow loop (recorded, answering ``waited``)."""

    def __init__(self, started, waited):
        self.started = started
        self.waited = waited
        self.made = []
        self.followed = []

    def _execute_module(self, module_name=None, module_args=None, task_vars=None):
        self.made.append((module_name, module_args))
        return dict(self.started)

    def _follow(self, args, poll, collect_to, task_vars, first=True):
        self.followed.append((args, poll, collect_to, first))
        return dict(self.waited)


def test_a_started_job_is_waited_for_in_the_same_task():
    node = _Action({"changed": True, "pid": 42, "job_dir": "/var/log/mt/job-1"},
                   {"changed": False, "rc": 0, "done": True, "collected": True})
    out = action.ActionModule._start_and_follow(node, dict(START), 15.0, "/runs/job-1/n1", {})
    assert node.made == [("multinode.training.torchrun", START)]
    # the wait: the same job, log directory, timeout and stop grace - nothing of the start's job options;
    # not a short first poll (the start's answer made the first progress line)
    assert node.followed == [({"state": "finished", "job_id": "job-1", "log_dir": "/var/log/mt", "timeout": 600,
                               "stop_grace": 5}, 15.0, "/runs/job-1/n1", False)]
    assert out == {"changed": True, "rc": 0, "done": True, "collected": True}


@pytest.mark.parametrize("started", [
    {"failed": True, "msg": "chdir /nope is not a directory on n1"},
    {"failed": True, "msg": "job id job-1 was used before on n1", "pid": 7},
    {"skipped": True},
    {"changed": False, "msg": "no pid: nothing runs"},
])
def test_a_start_that_failed_or_left_no_job_is_the_task_s_result(started):
    node = _Action(started, {"changed": False, "done": True})
    assert action.ActionModule._start_and_follow(node, dict(START), 15.0, None, {}) == started
    assert node.followed == []


def test_wait_args_take_the_job_id_over_the_rendezvous_id_and_leave_out_what_is_unset():
    assert fol.wait_args(dict(START, job_id="job-2", timeout=None)) == {
        "state": "finished", "job_id": "job-2", "log_dir": "/var/log/mt", "stop_grace": 5}
    assert fol.wait_args({"rdzv_id": "r"}) == {"state": "finished", "job_id": "r"}


def test_the_started_line_names_the_job_its_pid_ranks_and_logs():
    started = {"changed": True, "job_id": "job-1", "pid": 42, "job_dir": "/var/log/mt/job-1", "nproc_per_node": 2}
    assert fol.started_line(started) == "job-1: started, pid 42, 2 local rank(s), logs in /var/log/mt/job-1"
    assert fol.started_line(dict(started, nproc_per_node=None), "4") == (
        "job-1: started, pid 42, 4 local rank(s), logs in /var/log/mt/job-1")
    assert fol.started_line(dict(started, nproc_per_node=None)) == "job-1: started, pid 42, logs in /var/log/mt/job-1"


class _Polled(object):
    """What _follow asks of the action: module calls that answer from ``answers`` (recording the windows
    asked for; an exception is raised) and no node."""

    _progress = staticmethod(action.ActionModule._progress)
    _poll = action.ActionModule._poll
    _answers = action.ActionModule._answers

    def __init__(self, answers, runs_commands=True):
        self.answers = list(answers)
        self.windows = []
        self.probes = []
        self.runs_commands = runs_commands

        class _Shell(object):
            tmpdir = None

        class _Conn(object):
            _shell = _Shell()
        self._connection = _Conn()

    def _execute_module(self, module_name=None, module_args=None, task_vars=None):
        assert module_name == "multinode.training.torchrun"
        self.windows.append(module_args["follow_limit"])
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return dict(answer)

    def _remove_tmp_path(self, path):
        pass

    def _low_level_execute_command(self, cmd, sudoable=True):
        """A command on the node, run through the connection (no become): echoed where the node runs
        commands; the docker connection's answer for a container that is not running where it does not."""
        self.probes.append((cmd, sudoable))
        if self.runs_commands:
            return {"rc": 0, "stdout": cmd.split(" ", 1)[1] + "\n", "stderr": ""}
        return {"rc": 1, "stdout": "", "stderr": "Error response from daemon: Container 94fa is not running\n"}


@pytest.mark.parametrize("first, windows", [
    (True, [1.0, 15.0]),    # attach: a short first poll, whose progress is the first line
    (False, [15.0, 15.0]),  # after a start (which printed the first line): up to the next line at once
])
def test_the_first_window_is_short_only_without_a_started_line(first, windows):
    node = _Polled([{"progress": "p", "done": False}, {"done": True, "rc": 0}])
    assert action.ActionModule._follow(node, {"job_id": "job-1"}, 15.0, None, {}, first=first) == {
        "done": True, "rc": 0}
    assert [round(w) for w in node.windows] == windows


def test_a_call_that_died_without_an_answer_is_polled_once_more():
    lost = {"failed": True, "module_stdout": "", "msg": "MODULE FAILURE"}
    node = _Polled([lost, {"done": True, "rc": 0}])
    assert action.ActionModule._follow(node, {"job_id": "job-1"}, 15.0, None, {}) == {"done": True, "rc": 0}
    # twice, on a node that still runs commands: the module's own failure (it crashed there)
    node = _Polled([lost, lost])
    assert action.ActionModule._follow(node, {"job_id": "job-1"}, 15.0, None, {}) == lost
    assert len(node.windows) == 2
    assert node.probes == [("echo " + action.ALIVE, False)]


def test_a_node_that_answers_no_call_and_runs_no_command_is_lost_as_on_any_connection():
    # docker with pipelining: a killed container fails the module call (no result), not the connection
    lost = {"failed": True, "module_stdout": "", "rc": 1, "msg": "Module result deserialization failed",
            "module_stderr": "Error response from daemon: Container 94fa is not running\n"}
    node = _Polled([lost, lost], runs_commands=False)
    assert action.ActionModule._follow(node, {"job_id": "job-1"}, 15.0, None, {"inventory_hostname": "n3"}) == {
        "failed": True, "no_answer": True, "module_stdout": "",
        "msg": "lost the connection to n3 during the wait: Error response from daemon: Container 94fa is not running"}


def test_a_node_lost_during_a_poll_is_a_failed_wait_not_an_unreachable_host():
    from ansible.errors import AnsibleConnectionFailure

    gone = AnsibleConnectionFailure("container gone")
    node = _Polled([gone, gone])
    out = action.ActionModule._follow(node, {"job_id": "job-1"}, 15.0, None, {"inventory_hostname": "n2"})
    assert out["failed"] is True and "done" not in out
    assert out["msg"] == "lost the connection to n2 during the wait: container gone"
    assert out["no_answer"] is True


class _Stopping(_Polled):
    """The stop's one call (no follow_limit): answers from ``answers``."""

    def _execute_module(self, module_name=None, module_args=None, task_vars=None):
        assert module_name == "multinode.training.torchrun" and module_args["state"] == "stopped"
        return dict(self.answers.pop(0))


def test_the_stop_on_a_node_that_is_gone_is_an_unreachable_node_a_crashed_stop_a_failure():
    from ansible.errors import AnsibleConnectionFailure

    no_result = {"failed": True, "module_stdout": "", "rc": 1, "msg": "Module result deserialization failed",
                 "module_stderr": "Error response from daemon: Container 94fa is not running\n"}
    stop = {"state": "stopped", "job_id": "job-1"}
    with pytest.raises(AnsibleConnectionFailure, match="^n3 does not answer: Error response from daemon: Container "
                       "94fa is not running$"):
        action.ActionModule._call(_Stopping([no_result], runs_commands=False), stop, {"inventory_hostname": "n3"})
    # the node runs commands: the stop module itself failed there (a traceback), and that is the result
    crashed = dict(no_result, module_stderr="Traceback (most recent call last): ...")
    assert action.ActionModule._call(_Stopping([crashed]), stop, {"inventory_hostname": "n3"}) == crashed
    # an answer, failed or not, is the result; nothing is probed
    node = _Stopping([{"failed": True, "msg": "pid 7 survived SIGKILL"}], runs_commands=False)
    assert action.ActionModule._call(node, stop, {}) == {"failed": True, "msg": "pid 7 survived SIGKILL"}
    assert node.probes == []


class _Display(object):
    def __init__(self):
        self.lines = []

    def display(self, msg, **kwargs):
        self.lines.append(msg)


class _Live(object):
    def notice(self, polled):
        return None

    def line(self, polled):
        return " | step 3, loss 0.5"


def test_streamed_lines_are_printed_with_node_and_rank_and_the_next_poll_starts_after_them(monkeypatch):
    shown = _Display()
    monkeypatch.setattr(action, "display", shown)
    args = {"stream_ranks": ["0"], "stream_offsets": {}, "stream_tail": 10}
    polled = {"done": False, "stream": [[0, "smoke: rank=0 step=1 loss=12.9"], [0, "warning: x"]],
              "stream_offsets": {"0/0/stdout": 120, "0/0/stderr": 11}}
    action.ActionModule._stream("node1", polled, args)
    assert shown.lines == ["node1:0 smoke: rank=0 step=1 loss=12.9", "node1:0 warning: x"]
    # neither goes into the task's result; the tail was for the first poll only
    assert "stream" not in polled and "stream_offsets" not in polled
    assert args == {"stream_ranks": ["0"], "stream_offsets": {"0/0/stdout": 120, "0/0/stderr": 11}, "stream_tail": 0}
    # a poll that died without an answer keeps the offsets
    action.ActionModule._stream("node1", {"failed": True, "module_stdout": ""}, args)
    assert args["stream_offsets"] == {"0/0/stdout": 120, "0/0/stderr": 11}


@pytest.mark.parametrize("streamed, expected", [
    (True, "[node1] j1: running, 2 rank(s) running, 0 restart(s), 20s | step 3, loss 0.5"),
    (False, "[node1] j1: running, 2 rank(s) running, 0 restart(s), 20s | rank 0: smoke: rank=0 step=3 | step 3, loss 0.5"),
])
def test_the_progress_line_leaves_out_a_streamed_local_rank_0_s_last_line(monkeypatch, streamed, expected):
    shown = _Display()
    monkeypatch.setattr(action, "display", shown)
    polled = {"progress": "j1: running, 2 rank(s) running, 0 restart(s), 20s | rank 0: smoke: rank=0 step=3",
              "rank0_line": "smoke: rank=0 step=3"}
    action.ActionModule._progress("node1", polled, 0.0, 15.0, _Live(), streamed)
    assert shown.lines == [expected]


def test_a_node_without_a_recorder_is_said_once_before_its_progress_line(monkeypatch):
    from ansible_collections.multinode.training.plugins.module_utils._torchrun.live import Live

    shown = _Display()
    monkeypatch.setattr(action, "display", shown)
    off = "torch 2.7.1+cu126 records no collectives for backend gloo (its recorder came with torch 2.8)"
    polled = {"progress": "j1: running, 2 rank(s) running, 0 restart(s), 20s", "live": {"fr_off": off}}
    live = Live("node1", None, None)
    action.ActionModule._progress("node1", polled, 0.0, 15.0, live)
    action.ActionModule._progress("node1", polled, 0.0, 15.0, live)
    assert shown.lines == ["[node1] hang detection off on node1: %s; the straggler is named by the CPU figure" % off,
                           "[node1] j1: running, 2 rank(s) running, 0 restart(s), 20s",
                           "[node1] j1: running, 2 rank(s) running, 0 restart(s), 20s"]


def test_wait_args_carry_the_streamed_ranks():
    assert fol.wait_args(dict(START, stream_ranks=["0"]))["stream_ranks"] == ["0"]


def test_a_poll_that_gets_no_answer_fails_the_wait_on_that_node_naming_it(monkeypatch):
    import time
    monkeypatch.setattr(action, "POLL_SLACK", 1)
    started = time.monotonic()
    out = action.ActionModule._poll(StuckNode(), {"state": "finished"}, 1.0, {}, "node2")
    assert time.monotonic() - started < 5
    assert out["failed"] and out["msg"].startswith("node2 did not answer a poll within 2 s")


def test_poll_slack_sets_the_bound_and_travels_to_the_wait():
    import time
    started = time.monotonic()
    out = action.ActionModule._poll(StuckNode(), {"state": "finished", "poll_slack": 1}, 1.0, {}, "node2")
    assert time.monotonic() - started < 5  # not POLL_SLACK (300 s)
    assert out["failed"] and out["msg"].startswith("node2 did not answer a poll within 2 s")
    assert fol.wait_args(dict(START, poll_slack=20))["poll_slack"] == 20


def test_bounded_keeps_a_timer_that_was_already_running():
    import signal
    import time

    fired = []
    previous = signal.signal(signal.SIGALRM, lambda *_: fired.append(time.monotonic()))
    try:
        signal.alarm(3)
        assert bounded_mod.bounded(lambda: "answer", 60) == "answer"
        assert 1 <= signal.alarm(0) <= 3  # the task's own timer, armed again with what was left
        signal.alarm(1)  # due before the bound: it fires as it would have, the call goes on
        started = time.monotonic()
        assert bounded_mod.bounded(lambda: time.sleep(1.5) or "late", 60) == "late"
        assert fired and fired[0] - started < 1.4
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_bounded_off_the_main_thread_runs_the_call_unbounded():
    import threading

    got = []
    thread = threading.Thread(target=lambda: got.append(bounded_mod.bounded(lambda: "answer", 1)))
    thread.start()
    thread.join(10)
    assert got == ["answer"]
