# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action for multinode.training.torchrun: with follow=true and state=finished, wait until the job ended;
with follow=true and state=started, start the job, then wait for it the same way (one task, one worker per
node for the start and the wait).

Each call is one long poll on the node (O(state=finished) with O(follow_limit)): it renews the job's
controller lease (``<job dir>/lease``, watched by the node's watcher) once, then waits on the node
until the job ended there - it returns at once then, with the full finished result - or until the
window is over, returning the node's progress, which the controller prints every O(poll) seconds
(running ranks, restarts, seconds since the start, the last line of local rank 0). The window ends
at the next progress line and is at most a third of the lease (the node clamps it). With
``stream_ranks``, a window also ends once it is 5 s old (``_torchrun/wait.py`` BATCH) and those ranks
printed since it began, and the answer carries their new lines, which the action prints as they come
(``<node>:<rank> <line>``). Between calls
the action checks that ansible-playbook is still there; if it went away the polls stop and the nodes
stop the job when the lease runs out.

Every call is Ansible's own module call (``_execute_module``, pipelined where ansible.cfg turns
pipelining on): the start, each poll and the stop run the same module with the same options.

With ``collect_to`` (a controller directory), the finished result carries the node's job directory
as an archive (inline; a big one is fetched from the node and removed there), unpacked into
``collect_to`` here: no collect tasks, no extra round trip. One task for any job length.
"""
from __future__ import annotations

import base64
import os
import time

from ansible.errors import AnsibleConnectionFailure
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.multinode.training.plugins.module_utils._node.torchrun import LOG_DIR
from ansible_collections.multinode.training.plugins.module_utils._torchrun.bounded import POLL_SLACK, PollTimeout, bounded
from ansible_collections.multinode.training.plugins.module_utils._torchrun.collect import unpack_job_archive
from ansible_collections.multinode.training.plugins.module_utils._torchrun.follow import POLL, next_window, started_line, wait_args
from ansible_collections.multinode.training.plugins.module_utils._torchrun.live import Live, ratio_of

display = Display()
MODULE = "multinode.training.torchrun"
# Longest long poll. A window ends at the next progress line anyway (train_progress_interval, 15 s by
# default: one poll per line) and the node clamps it to a third of the lease. The lease is renewed at
# the start of a poll, so the window does not delay the nodes' end of a job whose ansible-playbook was
# killed; it only bounds how long the orphaned worker lingers.
LONGEST_WINDOW = 30.0
# Lines of each streamed rank's output an attach prints first (what they printed before it came).
ATTACH_TAIL = 10
# What a node that still runs commands prints back (_answers).
ALIVE = "multinode-training-node-answers"


def _answerless(called):
    """A module call that failed without the module's answer (nothing it printed parsed)."""
    return bool(called.get("failed")) and "done" not in called and "module_stdout" in called


def _cause(called):
    """What a module call without the module's answer says went wrong (the connection's stderr, else its msg)."""
    return (called.get("module_stderr") or called.get("msg") or "").strip()


def _lost(host, cause):
    """The failed wait on a node that is gone (``no_answer``: the collect after it passes the node over)."""
    return {"failed": True, "no_answer": True, "module_stdout": "",
            "msg": "lost the connection to %s during the wait: %s" % (host, cause)}


class ActionModule(ActionBase):
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        args = dict(self._task.args)
        follow = args.pop("follow", False)
        poll = float(args.pop("poll", POLL) or POLL)
        collect_to = args.pop("collect_to", None)
        state = args.get("state", "finished")
        if not (follow and state in ("started", "finished")) or self._task.check_mode:
            result.update(self._call(args, task_vars))
            return result
        if state == "started":
            result.update(self._start_and_follow(args, poll, collect_to, task_vars))
        else:
            result.update(self._follow(args, poll, collect_to, task_vars))
        return result

    def _call(self, args, task_vars):
        """One module call (the stop, a start without follow) -> its result; raises AnsibleConnectionFailure
        where it came back without a result from a node that runs no command, so that the node is
        unreachable there as on every other connection (the stop after a lost node ignores it), not a
        node whose module failed."""
        called = self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars)
        if _answerless(called) and not self._answers():
            raise AnsibleConnectionFailure("%s does not answer: %s" % (
                task_vars.get("inventory_hostname") if task_vars else None,
                _cause(called)))
        return called

    def _start_and_follow(self, args, poll, collect_to, task_vars):
        """O(state=started) with O(follow): start, then wait in the same task -> the start's result where it
        failed or left no running job, else the wait's (changed: the task started the job)."""
        started = self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars)
        if started.get("failed") or started.get("skipped") or "pid" not in started:
            return started
        # The first progress line comes from the start's answer: no short first poll on every node.
        display.display("[%s] %s" % (task_vars.get("inventory_hostname") if task_vars else None,
                                     started_line(started, args.get("nproc_per_node"))))
        waited = self._follow(wait_args(args), poll, collect_to, task_vars, first=False)
        waited["changed"] = bool(started.get("changed")) or bool(waited.get("changed"))
        return waited

    def _follow(self, args, poll, collect_to, task_vars, first=True):
        """The long polls of O(state=finished) with O(follow) -> the task's result. ``first``: the first
        window is short and its progress printed (an attach); else the start printed the first line and
        the first window runs up to the next one."""
        result = {}
        host = task_vars.get("inventory_hostname") if task_vars else None
        if collect_to:
            args["archive"] = os.path.join(args.get("log_dir") or LOG_DIR,
                                           "%s.%s.logs.tgz" % (args.get("job_id") or args.get("rdzv_id"), host))
        parent = os.getppid()
        streamed = bool(args.get("stream_ranks"))
        if streamed:
            # A launch streams the ranks' output from its start; an attach from its last lines, unless the
            # task says (the launch's own wait: O(stream_tail) 0).
            tail = args.get("stream_tail")
            args.update(stream_offsets={}, stream_tail=(ATTACH_TAIL if first else 0) if tail is None else int(tail))
        try:
            next_print = time.time() + (0 if first else poll)
            answerless = False
            live_line = Live(host, args.get("step_pattern"), collect_to, ratio_of(args.get("straggler_ratio")))
            while True:
                if os.getppid() != parent:
                    # ansible-playbook is gone (killed): stop renewing the lease, the nodes end the job.
                    result.update(failed=True, msg="the controller (ansible-playbook) went away")
                    return result
                window = next_window(time.time(), next_print, min(poll, LONGEST_WINDOW), first)
                first = False
                polled = self._poll(args, window, task_vars, host)
                if streamed:
                    self._stream(host, polled, args)
                if polled.get("failed") and not polled.get("done"):
                    if _answerless(polled) and not answerless:
                        # The call died without an answer (a long poll is nearly always in flight when a
                        # node goes away): poll once more - a node that is gone fails that one too.
                        answerless = True
                        continue
                    if _answerless(polled) and not self._answers():
                        polled = _lost(host, _cause(polled))
                    result.update(polled)
                    return result
                answerless = False
                if polled.get("done"):
                    break
                local0 = any(key.split("/")[1:2] == ["0"] for key in args.get("stream_offsets") or {})
                next_print = self._progress(host, polled, next_print, poll, live_line, local0)
            packed = polled.pop("archive", None)
            result.update(polled)
            if collect_to:
                result.update(self._collect(packed, collect_to, task_vars))
            return result
        finally:
            try:
                self._remove_tmp_path(self._connection._shell.tmpdir)
            except AnsibleConnectionFailure:  # the node is gone: nothing to clean there
                pass

    def _poll(self, args, window, task_vars, host):
        """One long poll (O(follow_limit) ``window``) -> its result; a node that does not answer within the
        window and O(poll_slack) (POLL_SLACK when unset) fails the wait on that node, named."""
        limit = int(window + (args.get("poll_slack") or POLL_SLACK))
        try:
            return bounded(lambda: self._execute_module(module_name=MODULE, module_args=dict(
                args, follow_limit=window), task_vars=task_vars), limit)
        except PollTimeout:
            return {"failed": True, "msg": "%s did not answer a poll within %d s (frozen, or the module stuck on "
                    "it); the other nodes' watchers stop the job when they lose it" % (host, limit)}
        except AnsibleConnectionFailure as exc:
            # The node went away mid-job (a killed container, a dead host): the same answer on
            # every connection (ssh raises here, docker without pipelining too, docker with
            # pipelining answers without a result) - a failed wait on this node, which the play
            # rescues and reports (the watchers name the node lost), not an unreachable host
            # that the rescue never sees.
            return _lost(host, exc)

    def _answers(self):
        """Whether the node still runs a command, asked after a module call that came back without a
        result: a crashed module's node does; a node that is gone does not (through docker with
        pipelining, a killed container fails the call instead of the connection)."""
        try:
            out = self._low_level_execute_command("echo %s" % ALIVE, sudoable=False)
        except AnsibleConnectionFailure:
            return False
        return ALIVE in (out.get("stdout") or "")

    @staticmethod
    def _stream(host, polled, args):
        """Print the streamed ranks' new lines (``<node>:<rank> <line>``, as they were printed); the next poll
        starts where this one left off. Neither goes into the task's result."""
        for rank, text in polled.pop("stream", None) or []:
            display.display("%s:%s %s" % (host, rank, text))
        offsets = polled.pop("stream_offsets", None)
        if offsets is not None:
            args.update(stream_offsets=offsets, stream_tail=0)

    @staticmethod
    def _progress(host, polled, next_print, poll, live, streamed=False):
        """Print the node's progress line when it is due, with its latest step and the slowest node so
        far (_torchrun.live: measured at every poll) -> when the next one is. Where the node's local rank 0
        is streamed (``streamed``), without its last line (printed already)."""
        now = time.time()
        notice = live.notice(polled)
        if notice:
            display.display("[%s] %s" % (host, notice))
        extra = live.line(polled)
        if now >= next_print - 0.5:
            progress = polled.get("progress") or ""
            rank0 = " | rank 0: %s" % polled.get("rank0_line")
            if streamed and progress.endswith(rank0):
                progress = progress[:-len(rank0)]
            display.display("[%s] %s%s" % (host, progress, extra))
            return now + poll
        return next_print

    def _collect(self, packed, dest, task_vars):
        """The node's job directory into ``dest``: inline, or fetched and removed on the node."""
        packed = packed or {}
        if packed.get("error"):
            return {"collected": False, "collect_error": packed["error"]}
        if packed.get("inline") is not None:
            data = base64.b64decode(packed["inline"])
        elif packed.get("path"):
            try:
                data = self._fetch_and_remove(packed["path"], packed.get("remove") or packed["path"], dest,
                                              task_vars)
            except (IOError, OSError) as exc:
                return {"collected": False, "collect_error": str(exc)}
        else:
            return {"collected": False}
        count = unpack_job_archive(data, dest)
        return {"collected": True, "collected_files": count, "collected_to": dest}

    def _fetch_and_remove(self, path, remove, dest, task_vars):
        """A big archive: ansible.builtin.fetch of ``path`` (it deals with become), then
        ansible.builtin.file absent on ``remove`` (the archive's private directory on the node)."""
        local = dest.rstrip("/") + ".tgz"
        task = self._task.copy()
        task.args = {"src": path, "dest": local, "flat": True}
        fetch = self._shared_loader_obj.action_loader.get(
            "ansible.builtin.fetch", task=task, connection=self._connection, play_context=self._play_context,
            loader=self._loader, templar=self._templar, shared_loader_obj=self._shared_loader_obj)
        try:
            fetched = fetch.run(task_vars=task_vars)
            if fetched.get("failed"):
                raise OSError("fetch of %s failed: %s" % (path, fetched.get("msg")))
            with open(local, "rb") as handle:
                return handle.read()
        finally:
            self._execute_module(module_name="ansible.builtin.file", module_args={"path": remove, "state": "absent"},
                                 task_vars=task_vars)
            if os.path.exists(local):
                os.remove(local)
