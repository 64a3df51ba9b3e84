# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stdout callback: one line per phase of the collection's playbooks, the job's output as it comes."""
from __future__ import annotations

DOCUMENTATION = r"""
---
name: phases
type: stdout
short_description: One line per phase (validate, build, distribute, launch, ...), the job's output as it comes
version_added: "0.2.0"
author:
  - multinode.training maintainers (@multinode)
description:
  - Prints one line per phase of the collection's playbooks - validate, toolchain, build (or cached),
    distribute, nccl, preflight, fabric check, launch, collect, report - with the seconds it took and
    whether it changed anything, instead of a banner and a line per task and host.
  - Under its phase line come the messages the playbooks print for the user (the build summary, the
    comparison across nodes, the network found, the job's summary and report), every warning and every
    failed task's message in full, each with its host.
  - What actions print while they run - the job's start, its progress lines and the output of the ranks
    chosen with C(train_stream_ranks) (C(<node>:<rank> <line>)) - appears as it comes, before the line of
    its phase (the launch).
  - The play recap is Ansible's own, line for line. After it, a failed play repeats each failed host's
    last failure (phase, task and message), so that the last lines name the cause.
  - The phase of a task comes from its role, its tasks file, the prefix of its name (C(Launch |),
    C(Report |)) or its tags; a task with none of these belongs to the phase before it.
  - With C(-v) or more, Ansible's default output comes back whole (this plugin extends
    P(ansible.builtin.default#callback)).
extends_documentation_fragment:
  - ansible.builtin.default_callback
  - ansible.builtin.result_format_callback
options:
  show_messages:
    description:
      - Print the messages of C(ansible.builtin.debug) tasks under their phase line. V(false) - phase lines,
        warnings, failures, the job's output and the recap only.
    type: bool
    default: true
    ini:
      - section: multinode_training_phases
        key: show_messages
    env:
      - name: MULTINODE_TRAINING_PHASES_SHOW_MESSAGES
requirements:
  - set as the stdout callback (C(stdout_callback) in C(ansible.cfg), or C(ANSIBLE_STDOUT_CALLBACK))
"""

EXAMPLES = r"""
# ansible.cfg (this repository's sets it):
#   [defaults]
#   stdout_callback = multinode.training.phases
#
# An installed collection, one run:
#   ANSIBLE_STDOUT_CALLBACK=multinode.training.phases ansible-playbook multinode.training.train -i hosts.yml
#
# What a successful run on one node prints:
#   validate        1.1 s  ok
#   distribute      3.0 s  ok
#     torch: 2.13.0+cpu on all 1 nodes
#   ...
#   [localhost] 20261126T141745Z-s5dgj6wj: started, pid 4560, 2 local rank(s), logs in /var/log/...
#   localhost:0 smoke: rank=0 step=1 loss=12.946398 world_size=2
#   launch         58.2 s  changed
#   report          2.0 s  changed
#     job report: /home/me/runs/20261126T141745Z-s5dgj6wj/report.html
"""

import os
import time

from ansible import constants as C
from ansible.plugins.callback.default import CallbackModule as DefaultCallback

# Roles whose every task is one phase; deepspeed_build's probe files are its preflight, the rest its build.
ROLE_PHASE = {"toolchain": "toolchain", "wheel_distribute": "distribute", "nccl_tuning": "nccl"}
BUILD_PREFLIGHT_FILES = ("preflight.yml", "probe.yml", "source_probe.yml")
# The train role's tasks files, and the prefixes of its task names (launch.yml, attach.yml, slurm.yml hold
# several phases).
TRAIN_FILE_PHASE = {
    "validate.yml": "validate", "node.yml": "preflight", "address.yml": "preflight", "security.yml": "preflight",
    "preflight.yml": "preflight", "sync.yml": "preflight", "fabric.yml": "fabric check",
    "fabric_check.yml": "fabric check", "collect.yml": "collect", "report.yml": "report",
    "report_html.yml": "report", "env.yml": "launch", "stop.yml": "stop",
}
PREFIX_PHASE = {
    "validate": "validate", "address": "preflight", "security": "preflight", "preflight": "preflight",
    "fabric": "fabric check", "fabric check": "fabric check", "launch": "launch", "wait": "launch",
    "attach": "launch", "env": "launch", "collect": "collect", "report": "report", "stop": "stop",
}
# Slurm | ... tasks (one play on the submit host): the words that place them.
SLURM_WORDS = (("validate", "validate"), ("sbatch", "launch"), ("wait", "launch"), ("cancel", "launch"),
               ("fetch", "collect"), ("fabric", "report"), ("summary", "report"), ("last lines", "report"),
               ("report", "report"), ("failed", "report"), ("slurm | job ", "launch"))
# Tags, in the order that decides a task tagged with several (the launch's outcome is tagged with all
# of train_launch, train_collect and train_report).
TAG_PHASE = (("validate", "validate"), ("toolchain", "toolchain"), ("deepspeed_build", "build"),
             ("prepare", "distribute"), ("wheel_distribute", "distribute"), ("nccl", "nccl"),
             ("nccl_tuning", "nccl"), ("train_preflight", "preflight"), ("train_fabric", "fabric check"),
             ("train_launch", "launch"), ("train_collect", "collect"), ("train_report", "report"))
DEBUG_ACTIONS = ("debug", "ansible.builtin.debug", "ansible.legacy.debug")
NAME_WIDTH = 12


def task_role(task):
    """The short name of the task's role ('train' for multinode.training.train), '' outside a role."""
    role = getattr(task, "_role", None)
    name = role.get_name() if role is not None else ""
    return (name or "").rsplit(".", 1)[-1]


def task_file(task):
    """The base name of the file that defines the task ('' when Ansible does not know it)."""
    path = task.get_path() if hasattr(task, "get_path") else ""
    return os.path.basename((path or "").rsplit(":", 1)[0])


def task_name(task):
    """The task's name without its role (``Launch | job 123``)."""
    return (task.get_name() or "").strip().split(" : ", 1)[-1]


def phase_of(role, filename, name, tags):
    """The phase of a task -> its name, or None (the task belongs to the phase before it)."""
    if role in ROLE_PHASE:
        return ROLE_PHASE[role]
    if role == "deepspeed_build":
        return "preflight" if filename in BUILD_PREFLIGHT_FILES else "build"
    prefix = name.split(" | ", 1)[0].strip().lower() if " | " in name else ""
    if prefix == "slurm":
        lowered = name.lower()
        return next((phase for word, phase in SLURM_WORDS if word in lowered), "preflight")
    if role == "train" and filename in TRAIN_FILE_PHASE:
        return TRAIN_FILE_PHASE[filename]
    if prefix in PREFIX_PHASE:
        return PREFIX_PHASE[prefix]
    tags = set(tags or ())
    return next((phase for tag, phase in TAG_PHASE if tag in tags), None)


def message_lines(value):
    """A debug task's message -> its lines: a list item or a string's line each; a mapping as key: value."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [line for item in value for line in message_lines(item)]
    if isinstance(value, dict):
        return ["%s: %s" % (key, item) for key, item in value.items()]
    return str(value).splitlines() or [""]


def failure_lines(result):
    """A failed result -> its message in full, then its stderr where the message alone says little."""
    msg = result.get("msg")
    lines = message_lines(msg) if msg else []
    for key in ("stderr", "module_stderr"):
        text = result.get(key)
        if text and (not msg or msg.startswith(("non-zero return code", "MODULE FAILURE"))):
            lines.extend(str(text).rstrip().splitlines()[-20:])
            break
    if not lines and result.get("results"):
        for item in result["results"]:
            if isinstance(item, dict) and item.get("failed"):
                lines.extend(failure_lines(item))
    return lines or ["failed (no message; -v shows the whole result)"]


def warning_texts(result, data):
    """The warnings of a task result as text (ansible-core 2.19 summaries or plain strings)."""
    warnings = list(getattr(result, "warnings", None) or data.get("warnings") or [])
    warnings += list(getattr(result, "deprecations", None) or data.get("deprecations") or [])
    out = []
    for warning in warnings:
        event = getattr(warning, "event", None)
        text = getattr(event, "msg", None) if event is not None else None
        if text is None:
            text = warning.get("msg") if isinstance(warning, dict) else str(warning)
        out.append(text)
    return out


class Phase(object):
    """What one phase did so far: its start, its hosts' changes and failures, the lines under it."""

    def __init__(self, name, start):
        self.name = name
        self.start = start
        self.changed = 0
        self.results = 0
        self.failed = []
        self.lines = []

    def title(self):
        if self.name == "build" and not self.changed and not self.failed:
            return "cached"
        return self.name

    def status(self):
        if self.failed:
            return "FAILED on %s" % ", ".join(sorted(set(self.failed))), C.COLOR_ERROR
        if self.changed:
            return "changed (%d)" % self.changed, C.COLOR_CHANGED
        return "ok", C.COLOR_OK


class CallbackModule(DefaultCallback):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "multinode.training.phases"

    def __init__(self, clock=time.time):
        super(CallbackModule, self).__init__()
        self._clock = clock
        self._phase = None
        self._next = None
        self._last_failure = {}

    def _quiet(self):
        return self._display.verbosity < 1

    # ---- phases -----------------------------------------------------------------------------------
    # A task's phase begins with its first result that is not a skip: the tasks a play skips (the report
    # of a success after a failure, the collection the wait did already) do not break a phase in two.
    def _enter(self, task):
        """The task starts: note its phase and when (the phase begins at its first result)."""
        name = phase_of(task_role(task), task_file(task), task_name(task), getattr(task, "tags", ()))
        self._next = (name, self._clock())

    def _begin(self):
        """The current task has a result: its phase begins where it is another than the current one."""
        name, start = self._next or (None, self._clock())
        if self._phase is None:
            self._phase = Phase(name or "setup", start)
        elif name and name != self._phase.name:
            self._close(start)
            self._phase = Phase(name, start)

    def _close(self, now=None):
        """Print the current phase's line and what came under it."""
        phase, self._phase = self._phase, None
        if phase is None or (not phase.results and not phase.lines):
            return
        now = self._clock() if now is None else now
        text, color = phase.status()
        self._display.display("%-*s %7.1f s  %s" % (NAME_WIDTH, phase.title(), now - phase.start, text),
                              color=color)
        for line, line_color, stderr in phase.lines:
            self._display.display("  " + line, color=line_color, stderr=stderr)

    def _add(self, line, color=None, stderr=False):
        self._phase.lines.append((line, color, stderr))

    def _record(self, result, failed=False, ignored=False, unreachable=False):
        """Count a task result in its phase; keep its warnings, its message (debug) or its failure."""
        task, data, host = result.task, result.result, result.host.get_name()
        self._begin()
        phase = self._phase
        phase.results += 1
        for text in warning_texts(result, data):
            self._add("[WARNING] %s: %s" % (host, text), C.COLOR_WARN)
        data.pop("warnings", None)
        data.pop("deprecations", None)
        if failed or unreachable:
            lines = failure_lines(data)
            label = "UNREACHABLE" if unreachable else ("failed (ignored)" if ignored else "FAILED")
            head = "%s %s: %s: %s" % (label, host, task_name(task), lines[0])
            self._add(head, C.COLOR_SKIP if ignored else C.COLOR_ERROR, stderr=False)
            for line in lines[1:]:
                self._add("  " + line, C.COLOR_SKIP if ignored else C.COLOR_ERROR)
            if not ignored:
                phase.failed.append(host)
                self._last_failure[host] = (phase.title(), task_name(task), lines, unreachable)
            return
        if data.get("changed") and task.action not in DEBUG_ACTIONS:
            phase.changed += 1
        if task.action in DEBUG_ACTIONS and self.get_option("show_messages"):
            shown = data.get("msg") if "msg" in data else {
                k: v for k, v in data.items() if not k.startswith("_") and k not in ("changed", "failed")}
            for line in message_lines(shown):
                self._add(line)

    # ---- Ansible's events ---------------------------------------------------------------------------
    def v2_playbook_on_play_start(self, play):
        if not self._quiet():
            return super(CallbackModule, self).v2_playbook_on_play_start(play)
        self._play = play

    def v2_playbook_on_task_start(self, task, is_conditional):
        if not self._quiet():
            return super(CallbackModule, self).v2_playbook_on_task_start(task, is_conditional)
        self._enter(task)

    def v2_playbook_on_handler_task_start(self, task):
        if not self._quiet():
            return super(CallbackModule, self).v2_playbook_on_handler_task_start(task)
        self._enter(task)

    def v2_runner_on_ok(self, result):
        if not self._quiet():
            return super(CallbackModule, self).v2_runner_on_ok(result)
        self._record(result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        if not self._quiet():
            return super(CallbackModule, self).v2_runner_on_failed(result, ignore_errors)
        self._record(result, failed=True, ignored=ignore_errors)

    def v2_runner_on_unreachable(self, result):
        if not self._quiet():
            return super(CallbackModule, self).v2_runner_on_unreachable(result)
        self._record(result, unreachable=True, ignored=bool(getattr(result.task, "ignore_unreachable", False)))

    def v2_playbook_on_stats(self, stats):
        """The last phase's line, Ansible's recap, then each failed host's last failure (the cause)."""
        if self._quiet():
            self._close()
        super(CallbackModule, self).v2_playbook_on_stats(stats)
        if not self._quiet():
            return
        for host in sorted(stats.processed.keys()):
            summary = stats.summarize(host)
            if not (summary["failures"] or summary["unreachable"]) or host not in self._last_failure:
                continue
            phase, name, lines, unreachable = self._last_failure[host]
            self._display.display("%s %s in %s (%s): %s" % (
                "UNREACHABLE" if unreachable else "FAILED", host, phase, name, lines[0]),
                color=C.COLOR_ERROR, stderr=False)
            for line in lines[1:]:
                self._display.display("  " + line, color=C.COLOR_ERROR)


def _verbose_only(name):
    """An event that prints nothing without -v (a skip, an item, a retry, an async poll, an include) and
    Ansible's default output with it."""
    def event(self, *args, **kwargs):
        if not self._quiet():
            return getattr(super(CallbackModule, self), name)(*args, **kwargs)
        return None
    event.__name__ = name
    return event


for _name in ("v2_playbook_on_start", "v2_playbook_on_no_hosts_matched", "v2_playbook_on_no_hosts_remaining",
              "v2_playbook_on_include", "v2_runner_on_skipped", "v2_runner_item_on_ok", "v2_runner_item_on_failed",
              "v2_runner_item_on_skipped", "v2_runner_retry", "v2_runner_on_async_poll", "v2_runner_on_async_ok",
              "v2_runner_on_async_failed"):
    setattr(CallbackModule, _name, _verbose_only(_name))
