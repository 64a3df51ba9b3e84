# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The torchrun module's side of failures and long jobs (docs/design.md, "The watcher: failures and the lease").

- ``write_watch_files``: the rank wrapper (_node.rankwrap), the watcher (_torchrun_watch) and its
  library (_node.watchlib, beside it), all standard-library files, and the watcher's configuration
  into the job directory;
- ``status``: one poll of the controller (renews the lease, progress for the controller to print);
- ``add_watch_state``: what the watchers decided, merged into the finished job's result;
- ``stop_watcher``: ``state=stopped`` ends the watcher too.
"""
from __future__ import annotations

import inspect
import json
import os
import signal
import time

from ansible_collections.multinode.training.plugins.module_utils._node import rankwrap, sampler, watchlib
from ansible_collections.multinode.training.plugins.module_utils._report import steps
from ansible_collections.multinode.training.plugins.module_utils._node import watch as _torchrun_watch
from ansible_collections.multinode.training.plugins.module_utils._torchrun.collect import read_json, read_text
from ansible_collections.multinode.training.plugins.module_utils._node.watchlib import (
    START_GRACE,
    WATCH_ENV,
    last_exception_line,
    progress,
    renew_lease,
    watcher_alive,
)

RANK_WRAPPER = "mt_rank.py"
WATCHER = "mt_watch.py"
WATCH_LIBRARY = "watchlib.py"  # _node.watchlib, which the watcher imports from its own directory
SAMPLER = "mt_sample.py"  # the job report's per-rank sampler (_node.sampler), loaded by the rank wrapper
# Seconds between a followed wait's progress lines when the task gives none (the torchrun module's
# poll, which the action reads).
POLL = 10
# The job's checkpoint directory, in its environment (roles/train: train_checkpoint_dir).
CHECKPOINT_ENV = "MULTINODE_TRAINING_CHECKPOINT_DIR"


def watch_conf(params, job_id, host):
    """The watcher's configuration (watch.json) from the module's options."""
    watch = dict(params.get("watch") or {})
    node = watch.get("node") or host
    text = str(params.get("nnodes") or "1")
    low, _sep, high = text.partition(":")
    elastic = bool(high) and low != high
    return {"job_id": job_id, "node": node, "nodes": watch.get("nodes") or [node],
            "hub": bool(watch.get("hub")) or not watch.get("hub_addr"), "hub_addr": watch.get("hub_addr"),
            "hub_node": watch.get("hub_node"), "port": watch.get("port"), "token": watch.get("token") or "",
            "lost": watch.get("lost", 10), "lease": watch.get("lease", 0), "fail_grace": watch.get("fail_grace", 5),
            "start_grace": start_grace(watch.get("start_grace"), params.get("rdzv_conf")),
            "interval": watch.get("interval", 0.5), "restartable": int(params.get("max_restarts") or 0) > 0,
            "elastic": elastic,
            # a crash loop: the attempts in a row without a new step line or checkpoint that stop the job
            "no_progress": int(params.get("max_no_progress_restarts") or 0),
            "step_patterns": [regex.pattern for _name, regex in steps.compile_patterns(params.get("step_pattern"))],
            "checkpoint_dir": (params.get("env") or {}).get(CHECKPOINT_ENV) or "",
            # a hang: seconds without a change of any rank's collectives while some wait for others
            "hang": int(params.get("hang_timeout") or 0)}


def start_grace(requested, rdzv_conf):
    """Seconds a node never heard from is given (O(watch.start_grace)): as asked, else the rendezvous's
    join timeout (O(rdzv_conf), as torchrun reads it), else torchrun's default for it."""
    if requested is not None:
        return int(requested)
    try:
        return int(float((rdzv_conf or {}).get("join_timeout")))
    except (TypeError, ValueError):
        return START_GRACE


def new_file(dir_fd, name, mode, owner=None, text=None, flags=0):
    """A new file ``name`` in the directory open as ``dir_fd`` (the job directory, while it is still
    root's alone: ``_torchrun.jobdir.make_job_dir``), with ``mode`` and ``owner`` (uid, gid) set through
    the open file, opened with ``flags`` too (O_APPEND for a log); ``text`` written and the file
    closed -> None, else -> its open descriptor.

    Created exclusively and without following a link (O_EXCL | O_NOFOLLOW), relative to the
    directory's descriptor, never to its name: the job's account owns the directory above it and
    may replace the name with a link to one of root's directories at any moment."""
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | flags, mode, dir_fd=dir_fd)
    try:
        os.fchmod(fd, mode)
        if owner is not None:
            os.fchown(fd, owner[0], owner[1])
        if text is None:
            return fd
        with os.fdopen(fd, "w") as handle:
            fd = None
            handle.write(text)
        return None
    except BaseException:
        if fd is not None:
            os.close(fd)
        raise


def write_watch_files(params, dir_fd, job_id, host, owner=None):
    """The rank wrapper, the watcher, its library and its configuration (0600: it holds the job's token) into
    the job directory (open as ``dir_fd``: ``new_file``), and ``exits/``, all owned by ``owner``
    (the job's account)."""
    for name, source, mode in ((RANK_WRAPPER, inspect.getsource(rankwrap), 0o640),
                               (SAMPLER, inspect.getsource(sampler), 0o640),
                               (WATCHER, inspect.getsource(_torchrun_watch), 0o640),
                               (WATCH_LIBRARY, inspect.getsource(watchlib), 0o640),
                               ("watch.json", json.dumps(watch_conf(params, job_id, host), sort_keys=True), 0o600),
                               ("lease", "", 0o640)):
        new_file(dir_fd, name, mode, owner, source)
    os.mkdir("exits", 0o750, dir_fd=dir_fd)
    if owner is not None:
        os.chown("exits", owner[0], owner[1], dir_fd=dir_fd, follow_symlinks=False)


def watcher_env(env, job_id, job_env_keys):
    """The watcher carries no job marker (the supervisor's sweep of leftovers must not kill it
    before it reported the node's end), but a marker of its own."""
    out = {k: v for k, v in env.items() if k not in job_env_keys}
    out[WATCH_ENV] = job_id
    return out


def stop_watcher(job, proc="/proc"):
    """The watcher outlives the job by a few seconds (it reports the node's end); stopping a job ends it."""
    if not watcher_alive(job, proc):
        return None
    try:
        os.kill(job["watch_pid"], signal.SIGKILL)
        return job["watch_pid"]
    except OSError:
        return None


def add_watch_state(job_dir, result):
    """What the watchers decided (watch_state.json): why the job was stopped everywhere, the first
    failure across the nodes, lost nodes; causes from the ranks' own records or stderr where
    torchrun had no error file."""
    state = read_json(os.path.join(job_dir, "watch_state.json")) or {}
    result["stop"] = state.get("stop") or {}
    result["stop_line"] = state.get("stop_line") or None
    result["lost"] = state.get("lost") or []
    result["watch_ranks"] = state.get("ranks") or []
    by_local = {}
    for entry in result["watch_ranks"]:
        by_local[entry.get("local_rank")] = entry
    for failure in result.get("failures") or []:
        record = by_local.get(failure.get("local_rank"))
        if not failure.get("message") and record and record.get("message"):
            failure["message"] = record["message"]
        if not failure.get("message"):
            for entry in result.get("ranks") or []:
                if entry.get("local_rank") == failure.get("local_rank") and entry.get("stderr"):
                    failure["message"] = last_exception_line(read_text(entry["stderr"]))
        if record and record.get("time") and record.get("state") == "failed":
            failure["timestamp"] = record["time"]
    first = result["stop"].get("failure") if result["stop"].get("reason") == "failure" else None
    if first:
        result["first_failure"] = first
        result["root_cause_line"] = result["stop_line"]
    elif result.get("root_cause") and not result["root_cause"].get("message"):
        root = result["root_cause"]
        match = [f for f in result.get("failures") or [] if f.get("local_rank") == root.get("local_rank")]
        if match and match[0].get("message"):
            root["message"] = match[0]["message"]
            line = result.get("root_cause_line") or ""
            result["root_cause_line"] = line.replace("no error message", root["message"])
    return result


def wait_args(args):
    """The arguments of a start (O(state=started)) -> those of the long polls that wait for that job in the
    same task (``follow``: O(state=finished) of the same job id in the same log directory, with its timeout,
    stop grace, the ranks whose output it streams and the bound on a poll)."""
    waited = {"state": "finished", "job_id": args.get("job_id") or args.get("rdzv_id")}
    for key in ("log_dir", "timeout", "stop_grace", "stream_ranks", "poll_slack"):
        if args.get(key) is not None:
            waited[key] = args[key]
    return waited


def stream_ranks(values):
    """The option O(stream_ranks) -> None (stream nothing), "all", or a frozenset of global ranks; a
    ValueError names a bad item."""
    items = [str(value).strip() for value in values or []]
    if "all" in items:
        return "all"
    bad = [item for item in items if not item.isdigit()]
    if bad:
        raise ValueError("stream_ranks=%s: %r is not a global rank; valid: a list of global ranks "
                         "(integers >= 0), or all" % (list(values), bad[0]))
    return frozenset(int(item) for item in items) or None


def next_window(now, next_print, longest, first=False):
    """The controller's next long-poll window: up to the next progress line (``next_print``), at most
    ``longest`` s, at least 1 s; the first call of an attach is short, so that a progress line comes
    early (a launch prints ``started_line`` instead, with no poll)."""
    if first:
        return 1.0
    return max(1.0, min(float(longest), next_print - now))


def started_line(started, nproc_per_node=None):
    """The progress line of a start that the same task waits for (O(state=started) with O(follow)),
    printed from the start's own answer: the launch's first line, with no poll for it."""
    ranks = started.get("nproc_per_node") or nproc_per_node
    return "%s: started, pid %s%s, logs in %s" % (
        started.get("job_id"), started.get("pid"),
        (", %s local rank(s)" % ranks) if ranks else "", started.get("job_dir"))


def status(job_id, job_dir, job, renew=True, now=None):
    """One poll: renew the controller's lease, return the node's progress."""
    now = time.time() if now is None else now
    if renew:
        renew_lease(job_dir)
    return progress(job_id, job_dir, job, now)
