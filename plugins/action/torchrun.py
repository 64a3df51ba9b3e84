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
at the next progress line and is at most a third of the lease (the node clamps it). Between calls
the action checks that ansible-playbook is still there; if it went away the polls stop and the nodes
stop the job when the lease runs out.

Only the call that finishes runs the module's logic (and the first one, where the host's python is
not known before it); where it can, that is a light call too (plugins/plugin_utils/_light_exec.py:
the module_utils on the node's python, without Ansible's module machinery), as are the start and the
stop. The other polls run the job directory's watcher file, ``mt_watch.py follow <job dir>
<window>`` (standard library), with the rights of the file's owner (the job's account, whose
directory it is: never as root; _torchrun.follow.LIGHT_LOADER): the same lease renewal and progress for a python start-up
instead of Ansible's module machinery (about 0.3 CPU-seconds per call on the node, times every node,
taken from the job's own CPUs). It returns early when the module must look (the job ended there, its
supervisor is gone, its deadline passed, its workers succeeded); the module then decides and
finishes. Where that poll cannot run (no job directory yet, no such python), the action goes on with
module calls.

With ``collect_to`` (a controller directory), the finished result carries the node's job directory
as an archive (inline; a big one is fetched from the node and removed there), unpacked into
``collect_to`` here: no collect tasks, no extra round trip. One task for any job length.
"""
from __future__ import annotations

import base64
import json
import os
import shlex
import time

from ansible.errors import AnsibleConnectionFailure
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.multinode.training.plugins.module_utils._torchrun.collect import unpack_job_archive
from ansible_collections.multinode.training.plugins.module_utils._torchrun.follow import (
    light_poll_argv,
    next_window,
    started_line,
    wait_args,
)
from ansible_collections.multinode.training.plugins.module_utils._torchrun.live import Live, ratio_of
from ansible_collections.multinode.training.plugins.plugin_utils._light_exec import enabled as light_enabled
from ansible_collections.multinode.training.plugins.plugin_utils._light_exec import light_python, prepare, run_module
from ansible_collections.multinode.training.plugins.plugin_utils._warm import warm

display = Display()
MODULE = "multinode.training.torchrun"
ENTRY = "ansible_collections.multinode.training.plugins.module_utils._torchrun.job"
# Imported by ansible-playbook before it forks the workers: they inherit the entry's import and sources.
prepare(ENTRY)
warm()
# Longest long poll. A window ends at the next progress line anyway (train_progress_interval, 15 s by
# default: one poll per line) and the node clamps it to a third of the lease. The lease is renewed at
# the start of a poll, so the window does not delay the nodes' end of a job whose ansible-playbook was
# killed; it only bounds how long the orphaned worker lingers.
LONGEST_WINDOW = 30.0
DEFAULT_LOG_DIR = "/var/log/multinode-training"


class ActionModule(ActionBase):
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        args = dict(self._task.args)
        follow = args.pop("follow", False)
        poll = float(args.pop("poll", 10) or 10)
        collect_to = args.pop("collect_to", None)
        state = args.get("state", "finished")
        if not (follow and state in ("started", "finished")) or self._task.check_mode:
            result.update(run_module(self, MODULE, ENTRY, args, task_vars))
            return result
        if state == "started":
            result.update(self._start_and_follow(args, poll, collect_to, task_vars))
        else:
            result.update(self._follow(args, poll, collect_to, task_vars))
        return result

    def _start_and_follow(self, args, poll, collect_to, task_vars):
        """O(state=started) with O(follow): start, then wait in the same task -> the start's result where it
        failed or left no running job, else the wait's (changed: the task started the job)."""
        started = run_module(self, MODULE, ENTRY, args, task_vars)
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
            args["archive"] = os.path.join(args.get("log_dir") or DEFAULT_LOG_DIR,
                                           "%s.%s.logs.tgz" % (args.get("job_id") or args.get("rdzv_id"), host))
        parent = os.getppid()
        try:
            next_print = time.time() + (0 if first else poll)
            answerless = False
            # [python, mt_watch.py, follow, job dir]: from the host's python (known after the facts), else
            # from the first module call's answer
            light = self._light_argv(task_vars, args)
            live_line = Live(host, args.get("step_pattern"), collect_to, ratio_of(args.get("straggler_ratio")))
            while True:
                if os.getppid() != parent:
                    # ansible-playbook is gone (killed): stop renewing the lease, the nodes end the job.
                    result.update(failed=True, msg="the controller (ansible-playbook) went away")
                    return result
                window = next_window(time.time(), next_print, min(poll, LONGEST_WINDOW), first)
                first = False
                if light:
                    polled = self._light_poll(light, window)
                    if polled is None:
                        light = None
                    elif not polled.get("attention"):
                        next_print = self._progress(host, polled, next_print, poll, live_line)
                        continue
                polled = self._module_poll(args, window, task_vars, host)
                if polled.get("failed") and not polled.get("done"):
                    if "done" not in polled and "module_stdout" in polled and not answerless:
                        # The call died without an answer (a long poll is nearly always in flight when a
                        # node goes away): poll once more - a node that is gone fails that one too.
                        answerless = True
                        continue
                    result.update(polled)
                    return result
                answerless = False
                if polled.get("done"):
                    break
                if not light and light_enabled() and polled.get("interpreter") and polled.get("job_dir"):
                    light = light_poll_argv(polled["interpreter"], polled["job_dir"])
                next_print = self._progress(host, polled, next_print, poll, live_line)
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

    def _module_poll(self, args, window, task_vars, host):
        """One long poll as a module call (O(follow_limit) ``window``) -> its result."""
        try:
            return run_module(self, MODULE, ENTRY, dict(args, follow_limit=window), task_vars)
        except AnsibleConnectionFailure as exc:
            # The node went away mid-job (a killed container, a dead host): the same answer on
            # every connection (ssh raises here, docker without pipelining too, docker with
            # pipelining answers without a result) - a failed wait on this node, which the play
            # rescues and reports (the watchers name the node lost), not an unreachable host
            # that the rescue never sees.
            return {"failed": True, "module_stdout": "", "msg": "lost the connection to %s during the "
                    "wait: %s" % (host, exc)}

    @staticmethod
    def _progress(host, polled, next_print, poll, live):
        """Print the node's progress line when it is due, with its latest step and the slowest node so
        far (_torchrun.live: measured at every poll) -> when the next one is."""
        now = time.time()
        extra = live.line(polled)
        if now >= next_print - 0.5:
            display.display("[%s] %s%s" % (host, polled.get("progress"), extra))
            return now + poll
        return next_print

    def _light_argv(self, task_vars, args):
        """The light poll's argv when the host's python is known (_light_exec.light_python: the rule of
        the light module calls); None: the first poll is a module call, which says."""
        python = light_python(self, task_vars)
        job_id = args.get("job_id") or args.get("rdzv_id")
        if not python or not job_id:
            return None
        return light_poll_argv(python, os.path.join(args.get("log_dir") or DEFAULT_LOG_DIR, str(job_id)))

    def _light_poll(self, light, window):
        """One ``mt_watch.py follow`` poll on the node -> its JSON answer, None where it cannot run: the
        caller goes back to module calls. A connection failure too: the module call that follows meets
        it the way every poll did before (a node lost mid-job is named the same way)."""
        cmd = " ".join(shlex.quote(part) for part in light + ["%.1f" % window])
        try:
            answer = self._low_level_execute_command(cmd, sudoable=True)
        except AnsibleConnectionFailure as exc:
            display.vvv("[%s] light poll: %s; polling with the module" % (self._task.get_name(), exc))
            return None
        if answer.get("rc") != 0:
            return None
        try:
            polled = json.loads((answer.get("stdout") or "").strip().splitlines()[-1])
        except (ValueError, IndexError):
            return None
        return polled if isinstance(polled, dict) and "progress" in polled else None

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
