"""The stdout callback multinode.training.phases (plugins/callback/phases.py): the phase of each task of the
collection's playbooks, one line per phase with its time and changes, the messages, warnings and failures
under it with their host, Ansible's own recap, a failed play's cause last; -v is Ansible's default output."""
from __future__ import annotations

import datetime
import json
import re

import pytest

from ansible import context
from ansible.executor.stats import AggregateStats
from ansible.module_utils.common.collections import ImmutableDict
from ansible.plugins.callback.default import CallbackModule as Default

from ansible_collections.multinode.training.plugins.callback import phases
from tests.unit.conftest import FIXTURES

PHASE_LINE = re.compile(r"^(?P<name>[a-z]+( check)?) +(?P<seconds>\d+\.\d) s  (?P<status>ok|changed \(\d+\)|FAILED on .+)$")
RECAP_LINE = re.compile(r"^\S+ +: ok=\d+ +changed=\d+ +unreachable=\d+ +failed=\d+ +skipped=\d+ +rescued=\d+ +ignored=\d+ *$")


class Display(object):
    """Ansible's Display as the callback uses it: every line kept, in order."""

    def __init__(self, verbosity=0):
        self.verbosity = verbosity
        self.lines = []

    def display(self, msg, color=None, stderr=False, screen_only=False, log_only=False, newline=True, caplevel=None):
        if not log_only:
            self.lines.extend(msg.split("\n"))

    def banner(self, msg, color=None, cows=True):
        self.lines.extend(["", "%s %s" % (msg, "*" * max(3, 79 - len(msg)))])


class Role(object):
    def __init__(self, name):
        self.name = name

    def get_name(self):
        return self.name


class Task(object):
    """The attributes of a task the callback (and the default callback, with -v) reads."""

    def __init__(self, name, role=None, path="", tags=(), action="ansible.builtin.set_fact", uuid=None):
        self.name = name
        self._role = Role("multinode.training." + role) if role else None
        self.path = path
        self.tags = list(tags)
        self.action = action
        self._uuid = uuid or name
        self.loop = None
        self.delegate_to = None
        self.no_log = False
        self.check_mode = False
        self.args = {}
        self.ignore_unreachable = False

    def get_name(self):
        return ("%s : %s" % (self._role.get_name(), self.name)) if self._role else self.name

    def get_path(self):
        return self.path


class Host(object):
    def __init__(self, name):
        self.name = name

    def get_name(self):
        return self.name


class Result(object):
    def __init__(self, task, host, data):
        self.task = task
        self.host = Host(host)
        self.result = dict(data)
        self.task_name = task.name
        self.warnings = []
        self.deprecations = []


class Play(object):
    strategy = "linear"
    check_mode = False

    def get_name(self):
        return "Train | prepare the nodes, launch, collect, report"


class Clock(object):
    """One second per call."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        self.now += 1.0
        return self.now


OPTIONS = {"show_messages": True, "show_custom_stats": False, "check_mode_markers": False,
           "display_failed_stderr": False, "display_ok_hosts": True, "display_skipped_hosts": True,
           "show_per_host_start": False, "show_task_path_on_failure": False, "result_format": "yaml",
           "pretty_results": None}


@pytest.fixture(autouse=True)
def cliargs(monkeypatch):
    monkeypatch.setattr(context, "CLIARGS", ImmutableDict(check=False))


def make(cls=phases.CallbackModule, verbosity=0):
    callback = cls(clock=Clock()) if cls is phases.CallbackModule else cls()
    callback._display = Display(verbosity)
    callback._plugin_options = dict(OPTIONS)
    return callback


def run(callback, events, stats):
    """Replay ``events`` (task, [(host, result data, kind)]) into the callback, then the stats -> its lines."""
    callback.v2_playbook_on_play_start(Play())
    for task, results in events:
        callback.v2_playbook_on_task_start(task, False)
        for host, data, kind in results:
            result = Result(task, host, data)
            if kind == "failed":
                callback.v2_runner_on_failed(result, ignore_errors=data.get("_ignored", False))
            elif kind == "skipped":
                callback.v2_runner_on_skipped(result)
            else:
                callback.v2_runner_on_ok(result)
    callback.v2_playbook_on_stats(stats)
    return callback._display.lines


def stats(**per_host):
    """{host: {ok: n, changed: n, failures: n, ...}} -> AggregateStats."""
    out = AggregateStats()
    for host, counts in per_host.items():
        out.processed[host] = 1
        for what, count in counts.items():
            for _i in range(count):
                out.increment(what, host)
    return out


TRAIN = "/c/roles/train/tasks/"
VALIDATE = Task("Train | validate the variables of the roles this play runs", path="/c/playbooks/train.yml:33",
                tags=["always", "validate"], action="multinode.training.validate")
FACTS = Task("Train | facts (addresses, interfaces, the connecting user)", path="/c/playbooks/train.yml:70",
             tags=["always"], action="multinode.training.node_facts")
GUARD = Task("Guard | probe the node against the manifest", "wheel_distribute",
             "/c/roles/wheel_distribute/tasks/guard.yml:3", action="multinode.training.wheel_distribute")
CONSISTENCY = Task("Report | consistency across nodes", "wheel_distribute",
                   "/c/roles/wheel_distribute/tasks/report.yml:20", action="ansible.builtin.debug")
NCCL = Task("Write the NCCL system configuration", "nccl_tuning", "/c/roles/nccl_tuning/tasks/configure.yml:9",
            action="ansible.builtin.template")
SECURITY = Task("Security | port, firewall, account, access, directories (one call)", "train",
                TRAIN + "security.yml:41", action="multinode.training.train_node")
START = Task("Launch | start torchrun on every node at once and wait there, job j1", "train",
             TRAIN + "launch.yml:73", tags=["train", "train_launch"], action="multinode.training.torchrun")
OUTCOME = Task("The job's outcome across the nodes (once, for every node)", "train", TRAIN + "launch.yml:165",
               tags=["train", "train_launch", "train_collect", "train_report"])
SUMMARY = Task("Report | job summary", "train", TRAIN + "report.yml:2", action="ansible.builtin.debug")
STOP = Task("Launch | stop the job on every node after a failure anywhere", "train", TRAIN + "launch.yml:199",
            action="multinode.training.torchrun")
FAILED = Task("Report | the job failed", "train", TRAIN + "report.yml:20", action="ansible.builtin.fail")

OK_EVENTS = [
    (VALIDATE, [("node1", {"changed": False}, "ok")]),
    (FACTS, [("node1", {"changed": False}, "ok"), ("node2", {"changed": False}, "ok")]),
    (GUARD, [("node1", {"changed": False}, "ok"), ("node2", {"changed": False}, "ok")]),
    (CONSISTENCY, [("node1", {"msg": ["torch: 2.13.0+cpu on all 2 nodes", "deepspeed: 0.19.8 on all 2 nodes"]},
                    "ok")]),
    (NCCL, [("node1", {"changed": True}, "ok"), ("node2", {"changed": False}, "ok")]),
    (SECURITY, [("node1", {"changed": False}, "ok"), ("node2", {"changed": False}, "ok")]),
    (START, [("node1", {"changed": True}, "ok"), ("node2", {"changed": True}, "ok")]),
    (OUTCOME, [("node1", {"changed": False}, "ok")]),
    (SUMMARY, [("node1", {"msg": ["job j1: world size 4 on 2 node(s)", "node1: rc 0, ranks 0,1, 60.2 s"]}, "ok")]),
]
OK_STATS = {"node1": {"ok": 9, "changed": 2}, "node2": {"ok": 5, "changed": 1}}


@pytest.mark.parametrize("task, phase", [
    (VALIDATE, "validate"),
    (FACTS, None),  # the phase before it (validate)
    (GUARD, "distribute"),
    (NCCL, "nccl"),
    (SECURITY, "preflight"),
    (Task("This node's interface, IP version and job account (no node touched)", "train", TRAIN + "node.yml:10"),
     "preflight"),
    (Task("Fabric | the node-by-node matrix", "train", TRAIN + "fabric.yml:110"), "fabric check"),
    (START, "launch"),
    (Task("Launch | note that the job failed on this node", "train", TRAIN + "launch.yml:140"), "launch"),
    (OUTCOME, "launch"),
    (Task("Collect | fetch the archives", "train", TRAIN + "collect.yml:38"), "collect"),
    (SUMMARY, "report"),
    (Task("Report | write the HTML job report", "train", TRAIN + "report_html.yml:8"), "report"),
    (Task("Wait | the job on every node, job j1", "train", TRAIN + "attach.yml:55"), "launch"),
    (Task("Slurm | check the request with sinfo, render the batch script, sbatch", "train", TRAIN + "slurm.yml:46"),
     "launch"),
    (Task("Slurm | fetch the job directory to <train_runs_dir>/<job id>/", "train", TRAIN + "slurm.yml:117"), "collect"),
    (Task("Slurm | job summary", "train", TRAIN + "slurm.yml:137"), "report"),
    (Task("Slurm | shared directories (jobs, helpers)", "train", TRAIN + "slurm.yml:11"), "preflight"),
    (Task("Install gcc and g++", "toolchain", "/c/roles/toolchain/tasks/install.yml:3"), "toolchain"),
    (Task("Probe python, torch and the source", "deepspeed_build", "/c/roles/deepspeed_build/tasks/probe.yml:2"),
     "preflight"),
    (Task("Build the wheel with ops", "deepspeed_build", "/c/roles/deepspeed_build/tasks/build.yml:40"), "build"),
    (Task("Train | NCCL environment file on every node", path="/c/playbooks/train.yml:92", tags=["nccl"]), "nccl"),
    (Task("Stop | stop it; nothing of it may survive", "train", TRAIN + "stop.yml:34"), "stop"),
])
def test_the_phase_of_a_task_comes_from_its_role_file_name_or_tags(task, phase):
    assert phases.phase_of(phases.task_role(task), phases.task_file(task), phases.task_name(task), task.tags) == phase


def test_a_successful_play_is_a_line_per_phase_its_messages_and_ansible_s_recap():
    lines = run(make(), OK_EVENTS, stats(**OK_STATS))
    heads = [PHASE_LINE.match(line) for line in lines]
    assert [(m.group("name"), m.group("status")) for m in heads if m] == [
        ("validate", "ok"), ("distribute", "ok"), ("nccl", "changed (1)"), ("preflight", "ok"),
        ("launch", "changed (2)"), ("report", "ok")]
    # validate ran its task and the facts (the phase before a task of none): 2 clock ticks per task start
    assert float(heads[0].group("seconds")) > 0
    # the messages of debug tasks, under their phase, as lines (no YAML quoting)
    distribute = next(i for i, line in enumerate(lines) if line.startswith("distribute "))
    assert lines[distribute + 1:distribute + 3] == [
        "  torch: 2.13.0+cpu on all 2 nodes", "  deepspeed: 0.19.8 on all 2 nodes"]
    assert "  job j1: world size 4 on 2 node(s)" in lines
    # Ansible's own recap, line for line, and nothing after it
    recap = lines[lines.index(next(line for line in lines if line.startswith("PLAY RECAP"))) - 1:]
    assert recap == run_default_recap(stats(**OK_STATS))
    assert [line for line in lines if RECAP_LINE.match(line)] == [line for line in recap if RECAP_LINE.match(line)]
    assert len(lines) == 6 + 2 + 2 + 5  # phases, messages, the recap (blank, banner, 2 hosts, blank)


def run_default_recap(stats_):
    default = make(Default)
    default.v2_playbook_on_stats(stats_)
    return default._display.lines


def test_a_failed_play_names_the_cause_last_with_host_phase_and_task():
    message = ("Training job j1 failed on node2: rank 3 (local_rank 1) on node2 exited 1: "
               "RuntimeError: injected failure on rank 3 at step 2")
    events = OK_EVENTS[:6] + [
        (START, [("node1", {"changed": True, "failed": True, "msg": "job j1 stopped on node1: rank 3 failed"},
                  "failed"),
                 ("node2", {"changed": True, "failed": True, "msg": "job j1 failed on node2: " + message}, "failed")]),
        # the report of a success, skipped, does not split the launch in two
        (SUMMARY, [("node1", {"skipped": True}, "skipped"), ("node2", {"skipped": True}, "skipped")]),
        (STOP, [("node1", {"changed": False}, "ok"), ("node2", {"changed": False}, "ok")]),
        (FAILED, [("node1", {"failed": True, "msg": message + "\nranks stopped as a consequence: 0, 1, 2"}, "failed"),
                  ("node2", {"failed": True, "msg": message + "\nranks stopped as a consequence: 0, 1, 2"}, "failed")]),
    ]
    lines = run(make(), events, stats(node1={"ok": 6, "failures": 1, "rescued": 1},
                                      node2={"ok": 5, "failures": 1, "rescued": 1}))
    # the launch's failures (rescued) under the launch line, with host and task, in full
    assert [line.endswith("FAILED on node1, node2") for line in lines if line.startswith("launch ")] == [True]
    assert "  FAILED node2: Launch | start torchrun on every node at once and wait there, job j1: job j1 failed on " \
           "node2: " + message in lines
    # after the recap: each failed host's last failure, the phase, the task and the message in full
    assert lines[-4:] == [
        "FAILED node1 in report (Report | the job failed): " + message,
        "  ranks stopped as a consequence: 0, 1, 2",
        "FAILED node2 in report (Report | the job failed): " + message,
        "  ranks stopped as a consequence: 0, 1, 2"]
    assert RECAP_LINE.match(lines[-6]) and RECAP_LINE.match(lines[-7])


def test_an_ignored_failure_is_shown_in_its_phase_but_is_not_the_cause():
    task = Task("Launch | stop the job on every node after a failure anywhere", "train", TRAIN + "launch.yml:199")
    lines = run(make(), [(task, [("node1", {"failed": True, "msg": "gone", "_ignored": True}, "failed")])],
                stats(node1={"ok": 1, "ignored": 1}))
    assert "  failed (ignored) node1: %s: gone" % task.name in lines
    assert RECAP_LINE.match(lines[-2]) and lines[-1] == ""


def test_warnings_are_printed_in_full_with_their_host():
    task = START
    callback = make()
    callback.v2_playbook_on_play_start(Play())
    callback.v2_playbook_on_task_start(task, False)
    result = Result(task, "node2", {"changed": True, "warnings": ["x"]})
    result.warnings = ["job j1: the ranks on node2 succeeded; torchrun's exit barrier was abandoned after 30s"]
    callback.v2_runner_on_ok(result)
    callback.v2_playbook_on_stats(stats(node2={"ok": 1, "changed": 1}))
    assert "  [WARNING] node2: job j1: the ranks on node2 succeeded; torchrun's exit barrier was abandoned after " \
           "30s" in callback._display.lines


def test_the_build_phase_is_named_cached_when_it_changed_nothing():
    build = Task("Build the wheel with ops", "deepspeed_build", "/c/roles/deepspeed_build/tasks/build.yml:40",
                 action="ansible.builtin.command")
    cached = run(make(), [(build, [("localhost", {"changed": False}, "ok")])], stats(localhost={"ok": 1}))
    built = run(make(), [(build, [("localhost", {"changed": True}, "ok")])], stats(localhost={"ok": 1, "changed": 1}))
    assert PHASE_LINE.match(cached[0]).group("name") == "cached"
    assert PHASE_LINE.match(built[0]).group("name") == "build"


def test_a_phase_of_skipped_tasks_only_prints_nothing():
    fabric = Task("Fabric check (train_fabric_check; every node, nothing of the job started)", "train",
                  TRAIN + "launch.yml:36", tags=["train", "train_launch", "train_fabric"])
    lines = run(make(), [OK_EVENTS[0], (fabric, [("node1", {"skipped": True}, "skipped")])],
                stats(node1={"ok": 1, "skipped": 1}))
    assert [m.group("name") for m in map(PHASE_LINE.match, lines) if m] == ["validate"]


def test_with_v_the_output_is_ansible_s_default():
    events = OK_EVENTS[:2]
    ours = run(make(verbosity=1), events, stats(node1={"ok": 2}, node2={"ok": 1}))
    default = make(Default, verbosity=1)
    assert ours == run(default, events, stats(node1={"ok": 2}, node2={"ok": 1}))
    assert any(line.startswith("TASK [Train | validate the variables") for line in ours)


# ------------------------------------------------------------------ recorded runs (tests/fixtures/callback)

def _epoch(stamp):
    return datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc).timestamp()


def replay(name):
    """A recorded run (ansible.posix.json, trimmed by tests/fixtures/callback/trim.py) through the callback on
    its own clock -> (the callback's lines, the lines the actions printed while it ran)."""
    run = json.loads((FIXTURES / "callback" / name).read_text())
    clock = Clock()
    callback = phases.CallbackModule(clock=clock)
    callback._display = Display()
    callback._plugin_options = dict(OPTIONS)
    for play in run["plays"]:
        callback.v2_playbook_on_play_start(Play())
        for recorded in play["tasks"]:
            role, _sep, name = recorded["name"].rpartition(" : ")
            action = next((r.get("action") for r in recorded["hosts"].values() if r.get("action")), "")
            task = Task(name, role.rsplit(".", 1)[-1] or None, recorded["path"], recorded["tags"], action)
            clock.now = _epoch(recorded["start"]) - 1.0  # Clock adds one second per call
            callback.v2_playbook_on_task_start(task, False)
            for host, data in recorded["hosts"].items():
                result = Result(task, host, data)
                if data.get("unreachable"):
                    callback.v2_runner_on_unreachable(result)
                elif data.get("failed"):
                    callback.v2_runner_on_failed(result)
                elif data.get("skipped"):
                    callback.v2_runner_on_skipped(result)
                else:
                    callback.v2_runner_on_ok(result)
    last = max(_epoch(t["end"]) for play in run["plays"] for t in play["tasks"] if t["end"])
    clock.now = last - 1.0
    callback.v2_playbook_on_stats(stats(**{host: {"ok": c["ok"], "changed": c["changed"], "failures": c["failures"],
                                                  "skipped": c["skipped"], "rescued": c["rescued"]}
                                           for host, c in run["stats"].items()}))
    return callback._display.lines, run["printed"]


def phase_names(lines):
    return [m.group("name") for m in map(PHASE_LINE.match, lines) if m]


def test_a_recorded_train_yml_on_the_embedded_default_is_at_most_60_lines_with_the_job_s():
    lines, printed = replay("train_ok.json")
    assert phase_names(lines) == ["validate", "distribute", "nccl", "preflight", "launch", "report"]
    # every line is a phase line, a message under one (indented), or the recap
    recap = lines.index(next(line for line in lines if line.startswith("PLAY RECAP"))) - 1
    assert all(PHASE_LINE.match(line) or line.startswith("  ") for line in lines[:recap])
    assert lines[recap:] == run_default_recap(stats(localhost={"ok": 35, "changed": 2, "skipped": 27}))
    # the job's lines came as it ran: rank 0's steps among them
    assert sum("localhost:0 smoke: rank=0 step=" in line for line in printed) == 5
    assert "  nccl.conf: NCCL_SOCKET_IFNAME='=eth0' (exact name match)" in lines
    assert any(line.startswith("  job report: ") for line in lines)
    assert len(lines) + len(printed) <= 60, (len(lines), len(printed))


def test_a_recorded_failed_train_yml_ends_with_the_cause():
    lines, printed = replay("train_failed.json")
    assert phase_names(lines) == ["validate", "distribute", "nccl", "preflight", "launch", "report"]
    launch = next(line for line in lines if line.startswith("launch "))
    assert launch.endswith("FAILED on localhost")
    assert RECAP_LINE.match(lines[-3]) and lines[-2] == ""
    assert lines[-1].startswith("FAILED localhost in report (Report | the job failed): Training job ")
    assert "rank 1 (local_rank 1) on localhost exited 1: RuntimeError: injected failure on rank 1 at step 2" in lines[-1]
    assert len(lines) + len(printed) <= 60, (len(lines), len(printed))


def test_a_recorded_build_re_run_is_a_cached_build():
    lines, _printed = replay("build_warm.json")
    assert phase_names(lines) == ["validate", "preflight", "toolchain", "cached"]
    assert any(line.startswith("  ") and "reused: same build key" in line for line in lines)
