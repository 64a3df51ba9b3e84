# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Wait for, and stop, one torchrun job on this node: job.py calls these in order, with the module's calls between.

``wait`` blocks until the job ended here (``wait_for_end``); ``long_poll`` is one long poll of a followed wait
(``follow_until``: the action plugin calls it again until the job ended); both end in ``ended_here``: the job's
result (_torchrun.collect), leftovers stopped; then the job directory packed (``pack``) and the ``verdict``.
``record_stop`` is O(state=stopped)'s record of the end.
"""
from __future__ import annotations

import os
import time

from ansible_collections.multinode.training.plugins.module_utils._node.watchlib import (
    follow_window,
    job_done,
    read_tail,
    stream_lines,
    stream_pending,
)
from ansible_collections.multinode.training.plugins.module_utils._torchrun.agent_log import local_workers_succeeded
from ansible_collections.multinode.training.plugins.module_utils._torchrun.collect import collect, pack_job_dir, read_json
from ansible_collections.multinode.training.plugins.module_utils._torchrun.follow import add_watch_state, renew_lease, status, stream_ranks
from ansible_collections.multinode.training.plugins.module_utils._torchrun.jobdir import real_directory, write_json
from ansible_collections.multinode.training.plugins.module_utils._torchrun.proc import describe, job_alive, stop_job


def verdict(job, host, job_dir, result, data, gave_up, barrier_abandoned, timeout, barrier_grace):
    """What a finished wait means -> (failed, message, warning); updates ``result``.

    ``job`` is job.json; ``result`` holds what collect() read; ``data`` is result.json (None when the supervisor
    never wrote it); ``gave_up``: the module stopped the job after its deadline;
    ``barrier_abandoned``: this node's ranks succeeded and torchrun was stopped in its exit barrier.
    """
    job_id = job.get("job_id")
    if gave_up:
        result["timed_out"] = True
    result["exit_barrier_abandoned"] = barrier_abandoned
    if barrier_abandoned and not result["failures"]:
        result.update(rc=0, stopped=False, root_cause=None, root_cause_line=None)
        for entry in result["ranks"]:
            entry.update(exitcode=0, state="succeeded")
        return False, None, ("job %s: the ranks on %s succeeded; torchrun's exit barrier was abandoned after %ss "
                             "(another node did not finish)" % (job_id, host, barrier_grace))
    if data is None and not gave_up:
        return True, ("job %s on %s: the supervisor (pid %s) ended without recording a result; see %s/torchrun.log"
                      % (job_id, host, job.get("pid"), job_dir)), None
    if result["timed_out"]:
        return True, "job %s timed out after %ss on %s and was stopped" % (job_id, timeout, host), None
    if result["rc"] != 0:
        stop = result.get("stop") or {}
        if result.get("stop_line") and stop.get("reason") != "failure":
            return True, "job %s stopped on %s: %s" % (job_id, host, result["stop_line"]), None
        if result["stopped"] and not result["failures"] and not result.get("stop_line"):
            return True, "job %s was stopped on %s (rc %s)" % (job_id, host, result["rc"]), None
        return True, "job %s failed on %s: %s" % (job_id, host, result["root_cause_line"]), None
    return False, None, None


# Seconds a node whose ranks succeeded waits in torchrun's exit barrier when no watcher hub links it to
# the other nodes (O(watch) names one node or none): nothing else would tell it that another node failed.
BARRIER_GRACE = 30


def barrier_grace(requested, job_dir):
    """Seconds this node's torchrun may sit in its exit barrier before it is stopped; 0: until it ends.

    ``requested``: O(exit_barrier_grace), None for the default. When the watchers link several nodes
    (watch.json names them), the hub stops the job everywhere as soon as a node fails or is lost, and that
    stop ends the barrier; a node still at work (a rank's last checkpoint, a slow exit) is waited for: the
    first node hosts the rendezvous store, and stopping it while another node is busy fails that node.
    """
    if requested is not None:
        return requested
    conf = read_json(os.path.join(job_dir, "watch.json")) or {}
    return 0 if len(conf.get("nodes") or []) > 1 else BARRIER_GRACE


def wait_for_end(job_id, job_dir, job, timeout, grace, barrier_grace, poll=0.5):
    """Block until result.json exists, the supervisor is gone, the deadline passed (the job is
    stopped: ``gave_up``) or this node's ranks succeeded and torchrun sat in its exit barrier for
    ``barrier_grace`` s (stopped: ``barrier_abandoned``; 0: never) -> (gave_up, barrier_abandoned)."""
    result_file = os.path.join(job_dir, "result.json")
    log_file = os.path.join(job_dir, "torchrun.log")
    deadline = job["start"] + timeout + grace + 30 if timeout else None
    local_done = None
    while not os.path.exists(result_file):
        if not job_alive(job.get("pid"), job_id, job_dir, job.get("start")):
            time.sleep(poll)
            if not os.path.exists(result_file):
                break
        if deadline and time.time() > deadline:
            stop_job(job_id, pgid=job.get("pgid"), grace=grace, job_dir=job_dir)
            return True, False
        # This node's ranks all succeeded and torchrun only waits in its exit barrier for
        # the other agents; an agent that failed never arrives (torch waits 300 s).
        if local_done is None and local_workers_succeeded(read_tail(log_file)):
            local_done = time.time()
        if barrier_grace and local_done and time.time() - local_done > barrier_grace:
            stop_job(job_id, pgid=job.get("pgid"), grace=grace, job_dir=job_dir)
            return False, True
        time.sleep(poll)
    return False, False


# Seconds a long poll waits at least before it returns with new output of the streamed ranks: their lines
# reach the controller within about this, and a rank that prints all the time costs one poll per BATCH
# (a module call, about 0.3 CPU-s on the node and as much on the controller: 5 s keeps that near 6% of
# a core while a job prints every step, where 1 s took 30%).
BATCH = 5.0


def follow_until(job_id, job_dir, job, limit, timeout, grace, barrier_grace, poll=0.1, check_every=1.0,
                 gone_after=3, clock=time.time, sleep=time.sleep, news=None):
    """One long poll of a followed wait: block at most ``limit`` s -> (ended, gave_up, barrier_abandoned).

    Ended at once (checked every ``poll`` s) when the job ended on this node the way O(state=status)
    says ``done`` (result.json and the watcher is done), also when a stop of the watchers ended it;
    the supervisor's liveness, the deadline and the exit barrier (as in ``wait_for_end``; ``barrier_grace``
    0: never abandoned) are checked
    every ``check_every`` s (they scan /proc). (False, False, False): still running, poll again - also
    after BATCH s when ``news()`` says a streamed rank printed something (checked with the liveness).
    """
    result_file = os.path.join(job_dir, "result.json")
    state_file = os.path.join(job_dir, "watch_state.json")
    log_file = os.path.join(job_dir, "torchrun.log")
    deadline = job["start"] + timeout + grace + 30 if timeout and job.get("start") else None
    began = clock()
    end_by = began + limit
    next_check = 0.0
    missed = 0
    while True:
        now = clock()
        ended = read_json(result_file) if os.path.exists(result_file) else None
        if ended is not None and job_done(job, ended, read_json(state_file), now):
            return True, False, False
        if now >= next_check:
            next_check = now + check_every
            # The supervisor is taken for gone (without a result) only when ``gone_after`` checks in a
            # row miss it: one /proc read that fails under load must not end a running job's wait.
            gone = ended is None and not job_alive(job.get("pid"), job_id, job_dir, job.get("start"))
            missed = missed + 1 if gone else 0
            if missed >= gone_after:
                sleep(poll)
                if not os.path.exists(result_file):
                    return True, False, False
            if deadline and now > deadline:
                stop_job(job_id, pgid=job.get("pgid"), grace=grace, job_dir=job_dir)
                return True, True, False
            # The node's ranks succeeded and torchrun waits in its exit barrier for the other agents;
            # the log's last write is when that began (no line is logged while it waits).
            if barrier_grace and ended is None and local_workers_succeeded(read_tail(log_file)):
                try:
                    since = os.path.getmtime(log_file)
                except OSError:
                    since = now
                if now - since > barrier_grace:
                    stop_job(job_id, pgid=job.get("pgid"), grace=grace, job_dir=job_dir)
                    return True, False, True
            if news is not None and now - began >= BATCH and news():
                return False, False, False
        if now >= end_by:
            return False, False, False
        sleep(min(poll, max(0.0, end_by - now)))


def limits(params, job):
    """The job's O(timeout) and stop grace -> (timeout, grace): the module's, else what the start recorded."""
    return params["timeout"] or job.get("timeout") or 0, job.get("stop_grace", params["stop_grace"])


def long_poll(params, job_id, job_dir, job, result):
    """A followed wait's long poll: renew the lease, wait up to O(follow_limit) s -> None while the job still runs
    (``result`` holds its progress, RV(done) false), else (gave_up, barrier_abandoned, timeout, grace): the
    job ended (RV(done) true). With O(stream_ranks), the poll also ends when those ranks printed, and carries
    their new lines (RV(stream))."""
    p = params
    ranks = stream_ranks(p["stream_ranks"])  # checked by run_module
    renew_lease(job_dir)
    conf = read_json(os.path.join(job_dir, "watch.json")) or {}
    limit = follow_window(p["follow_limit"], conf.get("lease"))
    timeout, grace = limits(p, job)
    offsets = p["stream_offsets"] or {}
    news = (lambda: stream_pending(job_dir, ranks, offsets)) if ranks else None
    ended, gave_up, abandoned = follow_until(job_id, job_dir, job, limit, timeout, grace,
                                             barrier_grace(p["exit_barrier_grace"], job_dir), news=news)
    if ranks:
        result["stream"], result["stream_offsets"] = stream_lines(job_dir, ranks, offsets, p["stream_tail"],
                                                                  final=ended)
    if not ended:
        result.update(status(job_id, job_dir, job, renew=False))
        result["done"] = False
        return None
    result["done"] = True
    return gave_up, abandoned, timeout, grace


def wait(params, job_id, job_dir, job):
    """Block until the job ended on this node (``wait_for_end``) -> (gave_up, barrier_abandoned, timeout,
    grace)."""
    timeout, grace = limits(params, job)
    gave_up, abandoned = wait_for_end(job_id, job_dir, job, timeout, grace,
                                      barrier_grace(params["exit_barrier_grace"], job_dir))
    return gave_up, abandoned, timeout, grace


def ended_here(job_id, job_dir, job, result, tail_lines, host, grace):
    """The job ended on this node: its result (_torchrun.collect), what the watchers decided, leftovers stopped
    -> (result.json, the pids that survived SIGKILL); ``result`` updated (RV(killed), RV(survivors))."""
    data = read_json(os.path.join(job_dir, "result.json"))
    result.update(collect(job_dir, job, data, tail_lines, host))
    add_watch_state(job_dir, result)
    # Nothing of the job may outlive it on this node: what the supervisor's SIGTERM left is stopped
    # here (SIGKILL after the grace), so the play needs no separate stop round trip.
    killed, survivors = stop_job(job_id, grace=grace, job_dir=job_dir)
    result.update(killed=killed, survivors=describe(survivors))
    return data, survivors


def pack(job_dir, archive, inline_max):
    """The job's logs for the controller (O(archive)): inline in the result, or when big, in ``archive`` for a
    fetch -> RV(archive)."""
    try:
        return pack_job_dir(job_dir, archive, inline_max)
    except (IOError, OSError) as exc:
        return {"inline": None, "path": None, "error": "cannot pack %s: %s" % (job_dir, exc)}


def survived(job_id, host, described):
    """The message of a job whose processes (``described``: ``describe``'s) outlived SIGKILL."""
    return "job %s: %d process(es) survived SIGKILL on %s: %s" % (job_id, len(described), host, described)


def record_stop(job, job_dir, killed):
    """O(state=stopped): result.json, where the supervisor wrote none, says the job was stopped."""
    directory = real_directory(job_dir)
    if job and directory and not os.path.lexists(os.path.join(job_dir, "result.json")):
        # Like the job's other files: the job's user's, not world-readable (owner set before the
        # rename: no chown through a name the account could have replaced with a link since).
        try:
            write_json(os.path.join(job_dir, "result.json"),
                       {"rc": None, "start": job.get("start"), "end": time.time(), "timed_out": False,
                        "stopped": True, "leftovers_killed": killed}, 0o640, (directory.st_uid, directory.st_gid))
        except OSError:
            pass  # the directory became a link since (write_json opens no link): no record there
