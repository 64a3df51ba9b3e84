# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The job watcher: stops a job on every node within seconds, detects lost nodes, enforces the controller lease.

Standard library only: the torchrun module writes this file's source into the job directory
(``mt_watch.py``) and starts it on every node next to the supervisor, as the job's account; it
runs with the job's python after the module's own files are gone. The top half is pure decision
logic (unit-tested in tests/unit/plugins/module_utils/_node/test_watch.py); ``main`` acts.
About 900 lines, in numbered sections (decisions, hub, watcher, main). What the torchrun module
reads too - the job directory's files, the ranks' records, the follow helpers, the fixed timings -
is its library, _node/watchlib.py: the module ships that source beside this one (``watchlib.py``,
``inspect.getsource`` both), and this file imports it from its own directory; the two must run
there alone, with no other file to import (tests/unit/plugins/module_utils/_node/test_standalone.py).

How the nodes watch each other (docs/design.md, "The watcher: failures and the lease"):

- Every rank runs under ``mt_rank.py`` (the rank wrapper, _node.rankwrap), which writes
  ``exits/<restart>_<local rank>.start`` (pid) when the rank starts and ``.exit`` (exit code,
  time, the exception's last line) when it ends. A rank gone without an ``.exit`` record was
  killed by a signal (OOM kill, SIGKILL). Nothing here waits for torchrun or for the other ranks
  to notice: a blocked collective never does.
- The first node's watcher (the c10d store host) is the hub: it listens on the watch port; the
  other nodes' watchers keep one TCP connection to it and send their state every 0.5 s. A
  message carries the job's token (a random secret the controller generated; never in argv).
- A rank failure (non-restartable job) or a torchrun that ended non-zero is a *failure*: the
  node stops its own ranks at once and reports it; the hub answers every node with ``stop``
  (the first failure by time), each node SIGTERMs its ranks and SIGKILLs what is left after
  ``fail_grace`` seconds.
- A node whose messages stop for ``lost`` seconds (one never heard from: ``start_grace`` seconds after
  the hub's start, torchrun's rendezvous join timeout) is lost: the hub stops the job (non-elastic)
  or makes the remaining nodes restart their ranks (elastic: torchrun re-rendezvouses without
  it). A node that cannot reach the hub for ``lost`` seconds stops its job: c10d cannot survive
  the loss of the store host.
- A job that may restart (torchrun's max_restarts > 0) and crash-loops is stopped: each node counts
  its worker groups and reads its ranks' new output for step lines (and the checkpoint directory's
  changes); the hub judges each attempt once every node started the next, and after ``no_progress``
  attempts in a row without a step past the earlier ones, a new step-less step line or a new
  checkpoint, it stops the job everywhere, naming the last attempt's failure.
- ``hang`` > 0: each node reads its ranks' latest samples (the sampler's flight-recorder status, and while
  it stands still the script's stack) and sends them to the hub; when no rank's status changed for
  ``hang`` seconds while some ranks wait in a collective others did not enter, the hub stops the job,
  naming those ranks, their node, the collective and their stack line (``hang.json`` keeps them all).
- ``lease`` > 0: the controller renews ``<job dir>/lease`` on the nodes it follows; each node tells the
  hub how old its lease is, and when no node's was renewed for ``lease`` seconds the hub stops the job
  everywhere (the controller is gone). 0: detached, the supervisors own the job until it ends or
  ``timeout``.
"""
from __future__ import annotations

import hmac
import json
import os
import re
import select
import signal
import socket
import sys
import threading
import time

TERMINAL = ("succeeded", "failed", "stopped")
# Its library, which the torchrun module reads too (_node/watchlib.py): the sibling module where this file is
# imported from the collection; where it runs from the job directory (mt_watch.py), the copy shipped beside it
# (watchlib.py), from its own directory (first on the path: PYTHONSAFEPATH would leave the directory out).
if __package__:
    from .watchlib import (FAIL_GRACE, HEARTBEAT, LOST_AFTER, PROGRESS_EVERY, SAMPLER_READ_EVERY, SCAN_BYTES, START_GRACE,
                           WAKE_SIGNAL, _alive, _read_json, _write_json, caused_by_stop, job_pids, last_exception_line,
                           newest_mtime, peer_marked, rank_logs, read_bytes, read_collectives, read_from, read_ranks,
                           sampler_cpu)
else:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from watchlib import (FAIL_GRACE, HEARTBEAT, LOST_AFTER, PROGRESS_EVERY, SAMPLER_READ_EVERY, SCAN_BYTES, START_GRACE,
                          WAKE_SIGNAL, _alive, _read_json, _write_json, caused_by_stop, job_pids, last_exception_line,
                          newest_mtime, peer_marked, rank_logs, read_bytes, read_collectives, read_from, read_ranks,
                          sampler_cpu)


# ==================================================================================================
# 1. Decisions: pure functions of what the node and the hub saw (no file, no process, no socket).
# ==================================================================================================

def exit_message(code, signum=None):
    if signum:
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = "signal %d" % signum
        return "killed by %s" % name
    return "exited %s" % code


def first_failure(failures):
    """The failure that happened first across all nodes: earliest ``time``; at a tie (within 10 ms)
    a first-hand failure before a ``peer`` one (a rank that died because another did), then the
    lower rank. None when the list is empty."""
    items = [f for f in failures or [] if f]
    if not items:
        return None
    items.sort(key=lambda f: (f.get("time") is None, f.get("time") or 0.0))
    earliest = items[0].get("time")
    if earliest is None:
        tied = items
    else:
        tied = [f for f in items if f.get("time") is not None and f["time"] - earliest <= 0.01]
    return sorted(tied, key=lambda f: (bool(f.get("peer")), f.get("rank") if f.get("rank") is not None else 1 << 30))[0]


def latest_failure(failures):
    """The failure a crash loop's stop names for the attempt that ended last: the latest first-hand one
    (a rank that died because another did - a ``peer`` error - dies after its cause, so the latest of
    all is often a peer's), else the latest. None when the list is empty."""
    items = [f for f in failures or [] if f and f.get("time") is not None]
    if not items:
        return None
    first_hand = [f for f in items if not f.get("peer")]
    return max(first_hand or items, key=lambda f: f["time"])


def lost_nodes(nodes, last_seen, states, now, lost_after, started, startup_grace=20.0):
    """Nodes not heard from for ``lost_after`` seconds while not in a terminal state.

    ``last_seen``: node -> time of its last message (absent: never heard from; measured from
    ``started`` plus ``startup_grace``). A node that reported succeeded/failed/stopped and then went
    quiet has ended, it is not lost."""
    lost = []
    for node in nodes:
        if states.get(node) in TERMINAL:
            continue
        seen = last_seen.get(node)
        if seen is None:
            if now - started > lost_after + startup_grace:
                lost.append(node)
        elif now - seen > lost_after:
            lost.append(node)
    return lost


def ranks_to_restart(ranks, seen_ago, now, interval):
    """An elastic job's lost node: the pids of this node's running ranks that may wait on it -> list.

    ``seen_ago``: seconds between the lost node's last heartbeat and ``now`` (the hub's reply, so that
    the two nodes' clocks need not agree). A rank started by then, or within one heartbeat ``interval``
    after it (the node may have lived that long), may be in a worker group with the lost node and
    block on it: it is restarted. A rank started later is of a group torchrun formed without it (its
    agent already restarted after the loss: a failed peer connection, a membership change); killing it
    would cost the job another of its max_restarts for nothing. A rank of unknown start is restarted."""
    cutoff = now - float(seen_ago) + interval
    return [r["pid"] for r in ranks if r.get("state") == "running" and r.get("pid")
            and (r.get("started") is None or float(r["started"]) <= cutoff)]


def restart_reply(request, now=None):
    """A restart request the hub keeps ({node, seen}: the lost node and its last heartbeat, hub clock)
    -> what it answers ({node, seen_ago}), or None."""
    if not request:
        return None
    now = time.time() if now is None else now
    seen = request.get("seen")
    return {"node": request["node"], "seen_ago": round(now - seen, 3) if seen is not None else 0}


def lease_expired(lease, lease_mtime, now):
    """The controller's lease ran out: ``lease`` > 0 and the lease file is older than that."""
    return bool(lease and lease > 0 and lease_mtime is not None and now - lease_mtime > lease)


def local_failure(ranks, restartable, torchrun_rc):
    """The failure this node reports, or None.

    ``ranks``: list of dicts (rank, local_rank, restart, state, exitcode, message, time).
    A rank that failed or was killed counts unless the job restarts its workers (``restartable``:
    torchrun's max_restarts > 0), where only torchrun giving up (rc != 0) counts."""
    failed = [peer_marked(r) for r in ranks if r.get("state") in ("failed", "killed")]
    if failed and not restartable:
        return dict(first_failure(failed), kind="rank")
    if torchrun_rc not in (None, 0):
        if failed:
            return dict(first_failure(failed), kind="rank")
        return {"kind": "torchrun", "exitcode": torchrun_rc, "rank": None, "local_rank": None,
                "message": "torchrun exited %s" % torchrun_rc, "time": None}
    return None


def scan_steps(texts, patterns):
    """The ranks' output of one attempt (``texts``) -> (the highest step number a step line shows or None,
    the count of lines matched by a pattern without a ``step`` group: the Hugging Face Trainer's log dict).
    ``patterns``: compiled, as _report.steps (train_step_pattern, or the built-in ones)."""
    best, lines = None, 0
    for text in texts:
        for regex in patterns:
            numbered = "step" in regex.groupindex
            for found in regex.finditer(text):
                if not numbered:
                    lines += 1
                    continue
                try:
                    step = int(found.group("step"))
                except (TypeError, ValueError):
                    continue
                best = step if best is None else max(best, step)
    return best, lines


def merged_progress(progress):
    """node -> its progress so far ([highest step or None, step-less step lines, checkpoint changes]:
    ``Watcher.read_progress``) -> the job's: [the highest step, the lines and the changes of all nodes]."""
    parts = [part for part in (progress or {}).values() if part]
    steps = [part[0] for part in parts if part[0] is not None]
    return [max(steps) if steps else None, sum(int(part[1] or 0) for part in parts),
            sum(int(part[2] or 0) for part in parts)]


def progress_moved(before, now):
    """The job's progress (``merged_progress``) at the start of an attempt and at its end -> whether the
    attempt made progress: a step past every one before, a new step-less step line (the Hugging Face
    Trainer's log dict), or a new checkpoint."""
    step0, lines0, changes0 = before
    step1, lines1, changes1 = now
    return (step1 is not None and (step0 is None or step1 > step0)) or lines1 > lines0 or changes1 > changes0


def crash_loop(loop, generation, progress, limit, failure=None):
    """The hub's look at a job that may restart -> (its record, the stop or None).

    ``loop``: the record so far ({} at first); ``generation``: the worker groups started so far on every
    node (the lowest count a node reports: torchrun restarts every node's ranks, a membership change too);
    ``progress``: ``merged_progress`` now; ``failure``: the last attempt's failed rank (``latest_failure``),
    named in the stop. Each time a new worker group starts, the attempt that ended is judged against the
    progress when it started; ``run`` counts the attempts in a row without progress, and at ``limit``
    (> 0) the job stops instead of restarting again. The first attempt is judged against nothing: a job
    that fails before its first step line or checkpoint made no progress."""
    loop = dict(loop or {"generation": 1, "mark": [None, 0, 0], "run": 0})
    if generation <= loop["generation"]:
        return loop, None
    moved = progress_moved(loop["mark"], progress)
    # several groups since the last look (a node counted them from their records): each ended attempt counts,
    # unless the progress moved (then the last of them made it)
    ended = generation - loop["generation"]
    loop.update(generation=generation, mark=list(progress), run=0 if moved else loop["run"] + ended)
    if not limit or loop["run"] < limit:
        return loop, None
    return loop, {"reason": "no_progress", "attempts": loop["run"], "step": progress[0], "failure": failure,
                  "time": time.time()}


def rank_span(ranks):
    """Global ranks -> a short text: ``0-2, 5``."""
    numbers = sorted(set(r for r in ranks if isinstance(r, int)))
    spans, start = [], None
    for index, rank in enumerate(numbers):
        if start is None:
            start = rank
        if index + 1 == len(numbers) or numbers[index + 1] != rank + 1:
            spans.append(str(start) if start == rank else "%d-%d" % (start, rank))
            start = None
    return ", ".join(spans) or "none"


def hang_check(record, ranks, now, timeout):
    """The hub's look for a hang -> (its record, the stop or None).

    ``ranks``: every rank of the job as its node last reported it (``Watcher.read_collectives``: node, rank,
    ``fr`` {process group: [last enqueued, last completed collective]} from its flight recorder, and while
    that stands still the script's frame ``where``, its ``stack`` and the collective it waits in ``op``).
    A hang: for ``timeout`` seconds (> 0) not one rank's status changed, and some ranks of a process group
    enqueued a collective that others did not: those others are named, with where they are. Every rank
    must report a status (its process group runs), else nothing is judged. Ranks that all entered the same
    collective (a network fault) are left to the backend's own timeout."""
    if not timeout or not ranks or any(not r.get("fr") for r in ranks):
        return {"key": None, "since": now}, None
    key = json.dumps(sorted([r.get("node"), r.get("rank"), pg, list(v)] for r in ranks
                            for pg, v in r["fr"].items()))
    record = dict(record or {})
    if key != record.get("key"):
        return {"key": key, "since": now}, None
    waited = now - record["since"]
    if waited < timeout:
        return record, None
    for pg in sorted(set(pg for r in ranks for pg in r["fr"])):
        members = [r for r in ranks if pg in r["fr"]]
        pending = max(r["fr"][pg][0] for r in members)
        missing = [r for r in members if r["fr"][pg][0] < pending]
        if not missing:
            continue
        entered = [r for r in members if r["fr"][pg][0] >= pending]
        ops = [r["op"].get("name") for r in entered if isinstance(r.get("op"), dict)
               and str(r["op"].get("pg")) == pg and r["op"].get("seq") == pending and r["op"].get("name")]
        keep = ("node", "rank", "where", "stack", "fr", "age")
        return record, {"reason": "hang", "pg": pg, "seq": pending, "op": ops[0] if ops else "collective",
                        "waited": int(waited), "time": now,
                        "missing": [{k: r.get(k) for k in keep} for r in missing],
                        "entered": [{k: r.get(k) for k in keep} for r in entered]}
    return record, None


def stop_decision(current, failures, lost, elastic, lease_gone, hub_lost=None, stalled=None):
    """Why the job must stop everywhere now (a dict), or None. ``current`` is kept once set.

    Order: a failure (the first by time), a lost node of a non-elastic job, a crash loop
    (``stalled``: ``no_progress``), the rendezvous host lost (seen from another node), the
    controller's lease."""
    if current:
        return current
    first = first_failure(failures)
    if first:
        return {"reason": "failure", "failure": first, "time": first.get("time")}
    if lost and not elastic:
        return {"reason": "lost", "nodes": sorted(lost)}
    if stalled:
        return stalled
    if hub_lost:
        return {"reason": "hub_lost", "nodes": [hub_lost]}
    if lease_gone:
        return {"reason": "lease"}
    return None


def refine_stop(stop, lost):
    """A stop for a failure that was only a peer error (a rank lost its peer) becomes a stop for
    the lost node once the hub declares it lost: that node is the cause."""
    if stop and stop.get("reason") == "failure" and (stop.get("failure") or {}).get("peer") and lost:
        return dict(stop, reason="lost", nodes=sorted(lost))
    return stop


def describe_stop(stop, lost_after=None, lease=None):
    """One line for the report."""
    if not stop:
        return ""
    reason = stop.get("reason")
    if reason == "failure":
        f = stop.get("failure") or {}
        if f.get("rank") is None:
            return "%s on %s" % (f.get("message") or "torchrun failed", f.get("node"))
        return "rank %s (local_rank %s) on %s %s: %s" % (
            f.get("rank"), f.get("local_rank"), f.get("node"),
            exit_message(f.get("exitcode"), f.get("signal")), f.get("message") or "no error message")
    if reason == "lost":
        line = "node %s lost (no heartbeat for %ss)" % (", ".join(stop.get("nodes") or []), lost_after)
        f = stop.get("failure")
        if f:
            line += "; first error elsewhere: rank %s on %s: %s" % (f.get("rank"), f.get("node"), f.get("message"))
        return line
    if reason == "hang":
        missing = stop.get("missing") or []
        first = missing[0] if missing else {}
        if first.get("where"):
            where = "its stack: %s" % first["where"]
        elif first.get("stack"):
            where = "its stack: %s" % first["stack"][-1]
        else:
            where = "no stack (no sample from it for %ss: stopped, or holding the GIL)" % first.get("age", "?")
        return "hang: %s on %s did not enter %s #%s that rank%s %s %s waited in for %ss; %s" % (
            "rank %s" % first.get("rank") if len(missing) == 1 else "ranks %s" % rank_span(
                [r.get("rank") for r in missing]),
            ", ".join(sorted(set(str(r.get("node")) for r in missing))), stop.get("op"), stop.get("seq"),
            "" if len(stop.get("entered") or []) == 1 else "s", rank_span([r.get("rank") for r in stop.get("entered") or []]),
            "has" if len(stop.get("entered") or []) == 1 else "have", stop.get("waited"), where)
    if reason == "no_progress":
        line = "no progress in %s attempt(s) in a row (%s, no new checkpoint): stopped instead of restarting again" % (
            stop.get("attempts"), "no step line" if stop.get("step") is None else "no step past %s" % stop["step"])
        f = stop.get("failure")
        if f:
            line += "; the last attempt ended with rank %s on %s: %s" % (
                f.get("rank"), f.get("node"), f.get("message") or exit_message(f.get("exitcode"), f.get("signal")))
        return line
    if reason == "hub_lost":
        return "rendezvous host %s lost (no answer for %ss); c10d cannot continue without it" % (
            ", ".join(stop.get("nodes") or []), lost_after)
    if reason == "lease":
        return "controller lease expired (no heartbeat from the controller for %ss)" % lease
    if reason == "requested":
        return "stopped on request"
    return str(reason)


# ==================================================================================================
# 2. Hub: the first node's watcher hears every node's state over TCP, decides the stop (the first
#    failure by time, a lost node, the lease) and answers it to each node.
# ==================================================================================================

class Hub(object):
    """The hub's half of ``Watcher`` (its state: nodes, last_seen, states, failures, lost, stop, lock)."""

    def handle(self, conn):
        conn.settimeout(self.lost_after + 5)
        reader = conn.makefile("rb")
        node = None
        try:
            for raw in reader:
                try:
                    msg = json.loads(raw.decode("utf-8"))
                except ValueError:
                    return
                if not hmac.compare_digest(str(msg.get("token", "")), self.token) or msg.get("node") not in self.nodes:
                    return
                node = msg["node"]
                self.on_message(msg)
                with self.lock:
                    reply = {"stop": self.stop, "restart": restart_reply(self.restart_requested.pop(node, None))}
                conn.sendall((json.dumps(reply) + "\n").encode("utf-8"))
        except (OSError, ValueError):
            return
        finally:
            try:
                conn.close()
            except OSError:
                pass

    def on_message(self, msg):
        node = msg["node"]
        with self.lock:
            self.last_seen[node] = time.time()
            changed = self.states.get(node) != msg.get("state")
            self.states[node] = msg.get("state")
            if msg.get("collectives") is not None:
                self.node_collectives[node] = msg["collectives"]
            if msg.get("progress") is not None:
                self.node_progress[node], self.node_generation[node] = msg["progress"], msg.get("generation") or 0
                self.node_failure[node] = msg.get("last_failure")
            if msg.get("lease_age") is not None:
                # the controller renewed that node's lease this long ago (its clock's figure, taken here)
                self.lease_heard = max(self.lease_heard, time.time() - float(msg["lease_age"]))
            failure = msg.get("failure")
            if failure and not any(f.get("node") == node for f in self.failures):
                self.failures.append(failure)
                changed = True
        if changed:
            self.poke()

    def judge_attempts(self):
        """A crash loop (under the lock): the nodes' worker groups and progress, this node's included,
        judged at each new worker group (``crash_loop``) -> the stop, or None."""
        self.node_progress[self.node], self.node_generation[self.node] = self.progress, self.generation
        self.node_failure[self.node] = self.last_failure
        kept = [node for node in self.nodes if node not in self.lost]
        failures = [self.node_failure.get(node) for node in kept if self.node_failure.get(node)]
        # judged once every node started the new group (and read its last group's output)
        generation = min([self.node_generation.get(node) or 0 for node in kept] or [0])
        self.loop, stalled = crash_loop(self.loop, generation,
                                        merged_progress({node: self.node_progress.get(node) for node in kept}),
                                        self.no_progress, latest_failure(failures))
        return stalled

    def judge_hang(self, now):
        """A hang (under the lock): every rank's flight-recorder status, this node's included, once every
        node still in the job reported its ranks (``hang_check``) -> the stop, or None. Its record, every
        rank's status and stack, is kept in the job directory (``hang.json``)."""
        self.node_collectives[self.node] = self.collectives
        kept = [node for node in self.nodes if node not in self.lost]
        if any(not self.node_collectives.get(node) for node in kept):
            self.hang = {}
            return None
        ranks = [rank for node in kept for rank in self.node_collectives[node]]
        self.hang, hung = hang_check(self.hang, ranks, now, self.hang_timeout)
        if hung:
            _write_json(os.path.join(self.job_dir, "hang.json"), dict(hung, ranks=ranks))
        return hung

    def serve(self, port):
        server = socket.socket(socket.AF_INET6 if ":" in self.conf.get("bind", "") else socket.AF_INET)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind((self.conf.get("bind") or "0.0.0.0", port))
        server.listen(64)
        while True:
            conn, _addr = server.accept()
            threading.Thread(target=self.handle, args=(conn,), daemon=True).start()

    def hub_tick(self, local):
        now = time.time()
        with self.lock:
            self.last_seen[self.node] = now
            self.states[self.node] = local["state"]
            if local["failure"] and not any(f.get("node") == self.node for f in self.failures):
                self.failures.append(local["failure"])
            lost = lost_nodes(self.nodes, self.last_seen, self.states, now, self.lost_after, self.started,
                              self.start_grace)
            for node in lost:
                if node not in self.lost:
                    self.lost.append(node)
                    self.log("node %s lost: no heartbeat for %ss" % (node, self.lost_after))
                    if self.elastic and not self.stop:
                        # The ranks of the remaining nodes may block on the dead peer forever: restart them;
                        # torchrun re-rendezvouses with the nodes that are left.
                        for other in self.nodes:
                            if other not in self.lost:
                                self.restart_requested[other] = {"node": node, "seen": self.last_seen.get(node)}
            # judged until a stop is decided (then kept: hang.json holds the moment of the decision)
            stalled = None
            if not self.stop:
                stalled = (self.judge_attempts() if self.no_progress else None) or \
                    (self.judge_hang(now) if self.hang_timeout else None)
            stop = stop_decision(self.stop, self.failures, self.lost, self.elastic, self.lease_gone(),
                                 stalled=stalled)
            refined = refine_stop(self.stop, self.lost)
            if self.stop and refined is not self.stop:
                self.stop = refined
                self.log("stop: %s" % describe_stop(self.stop, self.lost_after, self.lease))
        if stop and not self.stop:
            self.apply_stop(stop)
        elif self.stop and not self.stopped_local:
            self.apply_stop(self.stop)
        restart = restart_reply(self.restart_requested.pop(self.node, None))
        if restart:
            self.restart_without(restart)


# ==================================================================================================
# 3. Watcher: every node's loop - watch the local ranks, report to the hub (or be it), stop the job.
# ==================================================================================================

class Watcher(Hub):
    def __init__(self, job_dir, supervisor_pid=None):
        self.job_dir = job_dir
        self.sup_pid = int(supervisor_pid) if supervisor_pid else None
        conf = _read_json(os.path.join(job_dir, "watch.json")) or {}
        self.conf = conf
        self.node = conf["node"]
        self.job_id = conf["job_id"]
        self.token = conf.get("token") or ""
        self.nodes = conf.get("nodes") or [self.node]
        self.hub = bool(conf.get("hub"))
        self.lost_after = float(conf.get("lost", LOST_AFTER))
        self.lease = float(conf.get("lease", 0))
        self.grace = float(conf.get("fail_grace", FAIL_GRACE))
        self.restartable = bool(conf.get("restartable"))
        self.elastic = bool(conf.get("elastic"))
        # A crash loop (no_progress): this node's worker groups and progress so far (read_progress), and
        # at the hub every node's, judged at each new worker group (crash_loop).
        self.no_progress = int(conf.get("no_progress") or 0) if self.restartable else 0
        self.patterns = [re.compile(text, re.M) for text in conf.get("step_patterns") or []]
        self.checkpoint_dir = conf.get("checkpoint_dir") or ""
        self.generation, self.gen_pids, self.seen_pids, self.seen_restarts = 0, set(), set(), set()
        self.progress = [None, 0, 0]
        self.log_offsets, self.progress_read = {}, 0.0
        self.checkpoint_mtime = newest_mtime(self.checkpoint_dir) if self.no_progress else 0
        self.last_failure = None
        self.node_progress, self.node_generation, self.node_failure, self.loop = {}, {}, {}, {}
        # A hang (hang): the ranks' flight-recorder status from their samples (read_collectives), and at the
        # hub every node's, judged by hang_check.
        self.hang_timeout = float(conf.get("hang") or 0)
        self.collectives, self.collectives_read, self.node_collectives, self.hang = [], 0.0, {}, {}
        # The ranks' sampler threads' CPU seconds as last read from /proc ({"<restart>_<local rank>": s}).
        self.sampler_cpu, self.sampler_read = {}, 0.0
        self.interval = float(conf.get("interval", HEARTBEAT))
        # Seconds a node never heard from is given from this watcher's start before it is lost: the
        # launch starts the nodes one task after another (Ansible's forks at a time), and torchrun's
        # rendezvous waits as long for them (its join timeout; the module sets it).
        self.start_grace = float(conf.get("start_grace", START_GRACE))
        self.started = time.time()
        self.lock = threading.Lock()
        self.last_seen = {}
        self.states = {}
        self.failures = []
        self.lost = []
        self.stop = None
        self.stopped_local = False
        # At the hub: the latest renewal of any node's lease in this clock (from each heartbeat's ``lease_age``).
        # The lease is the job's, judged here alone: the controller may follow some nodes only (more nodes
        # than Ansible's forks), and any of its polls keeps the job (lease_gone).
        self.lease_heard = 0.0
        self.events = []
        self.restart_requested = {}
        self.hub_seen = False
        self.own_failure = None
        # A byte here ends the loop's nap at once instead of after the interval: the supervisor's
        # WAKE_SIGNAL when the job ended on this node (main() makes the pipe the signal wakeup fd), a
        # node's report of a new state or failure to the hub (``poke``).
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)

    # -- local
    def supervisor_pid(self):
        """From the command line (the module passes it); job.json for a watcher started without it."""
        if self.sup_pid:
            return self.sup_pid
        job = _read_json(os.path.join(self.job_dir, "job.json")) or {}
        return job.get("pid")

    def result(self):
        return _read_json(os.path.join(self.job_dir, "result.json"))

    def supervisor_lost(self):
        """The supervisor is gone without writing result.json (killed): stop what is left of the
        job here and record the end in its place, so that nothing waits for it forever."""
        sup = self.supervisor_pid()
        if not sup or _alive(int(sup)) or time.time() - self.started < 15:
            return None
        time.sleep(1.0)
        if self.result() is not None:
            return self.result()
        self.log("the supervisor (pid %s) is gone without a result: stopping what is left" % sup)
        self.kill_local()
        job = _read_json(os.path.join(self.job_dir, "job.json")) or {}
        data = {"rc": None, "start": job.get("start"), "end": time.time(), "timed_out": False, "stopped": True,
                "leftovers_killed": [], "supervisor_lost": True}
        _write_json(os.path.join(self.job_dir, "result.json"), data)
        return data

    def local_state(self):
        ranks = read_ranks(self.job_dir, self.node)
        result = self.result() or self.supervisor_lost()
        rc = result.get("rc") if result else None
        failure = local_failure(ranks, self.restartable, rc)
        if self.own_failure is not None:
            # The node's failure is the first one it saw (a rank killed by a signal has no time of
            # its own: it got one when it was first seen).
            failure = self.own_failure
        elif caused_by_stop(failure, self.stop):
            failure = None
        elif failure is not None:
            failure = dict(failure, node=self.node)
            if failure.get("time") is None:
                failure["time"] = time.time()
            if failure.get("kind") == "rank" and not failure.get("message"):
                failure["message"] = self.stderr_message(failure)
            self.own_failure = failure
        if result is not None:
            state = "succeeded" if rc == 0 else ("stopped" if self.stop else "failed")
        else:
            state = "stopping" if self.stop else "running"
        if self.no_progress:
            self.read_progress(ranks)
        if time.time() - self.sampler_read >= SAMPLER_READ_EVERY:
            self.sampler_read = time.time()
            for rank in ranks:
                cpu = sampler_cpu(rank["pid"]) if rank["state"] == "running" and rank.get("pid") else None
                if cpu is not None:
                    self.sampler_cpu["%s_%s" % (rank.get("restart") or 0, rank.get("local_rank"))] = round(cpu, 3)
        if self.hang_timeout and time.time() - self.collectives_read >= PROGRESS_EVERY:
            self.collectives_read = time.time()
            self.collectives = read_collectives(self.job_dir, ranks, self.node, self.collectives_read)
        return {"node": self.node, "state": state, "failure": failure,
                "running": sum(1 for r in ranks if r["state"] == "running"),
                "restarts": max([r.get("restart", 0) or 0 for r in ranks] or [0]), "ranks": ranks}

    def read_progress(self, ranks):
        """A crash loop's evidence on this node: the worker groups started here (a new group: ranks with pids
        not seen before, once the last group's are gone - torchrun restarts every node's ranks, but the
        agents' TORCHELASTIC_RESTART_COUNT disagree: a membership change is not counted, a failure is) and,
        as each starts, whether the checkpoint directory changed; every PROGRESS_EVERY seconds the ranks'
        new output (the highest step, the step-less step lines)."""
        fresh = [r for r in ranks if r.get("pid") and r["pid"] not in self.seen_pids]
        new = set(r["pid"] for r in fresh)
        if new:
            if not any(_alive(pid) for pid in self.gen_pids):
                # the last group's output is read to its end before the hub hears of the new one, and the
                # checkpoint directory is looked at (once an attempt: a scandir on shared storage is not free).
                # Groups are counted from the rank wrapper's start records, not from the pids seen alive: a
                # group that failed between two looks still left its records (a failure's restart has its own
                # count), so each restart count not seen before is a group; a restart that torchrun did not
                # count (a membership change: the same count, new pids) is one.
                counts = set(r.get("restart") or 0 for r in fresh) - self.seen_restarts
                self.generation, self.gen_pids, self.progress_read = \
                    self.generation + max(1, len(counts)), set(new), 0.0
                mtime = newest_mtime(self.checkpoint_dir)
                if mtime > self.checkpoint_mtime:
                    self.checkpoint_mtime, self.progress[2] = mtime, self.progress[2] + 1
            else:
                self.gen_pids |= new
            self.seen_pids |= new
            self.seen_restarts |= set(r.get("restart") or 0 for r in fresh)
        latest = latest_failure([peer_marked(r) for r in ranks
                                 if r.get("state") == "failed" and r.get("time")])  # with its .exit record
        if latest:
            self.last_failure = {k: latest.get(k) for k in ("rank", "node", "exitcode", "message", "time", "peer")}
        now = time.time()
        if now - self.progress_read < PROGRESS_EVERY:
            return
        self.progress_read = now
        texts = []
        for _attempt, _local, _rank, _stream, path in rank_logs(self.job_dir):
            offset = self.log_offsets.get(path, 0)
            data, size = read_from(path, offset, SCAN_BYTES)
            if size < offset:  # written anew (torchrun opens a restarted rank's log again)
                offset = 0
                data, size = read_from(path, 0, SCAN_BYTES)
            # whole lines only; a line longer than SCAN_BYTES is passed over
            cut = data.rfind(b"\n") + 1 or (len(data) if len(data) >= SCAN_BYTES else 0)
            texts.append(data[:cut].decode("utf-8", "replace"))
            self.log_offsets[path] = offset + cut
        step, lines = scan_steps(texts, self.patterns)
        if step is not None and (self.progress[0] is None or step > self.progress[0]):
            self.progress[0] = step
        self.progress[1] += lines

    def stderr_message(self, failure):
        base = os.path.join(self.job_dir, "ranks")
        for root, _dirs, files in os.walk(base):
            if os.path.basename(root) == str(failure.get("local_rank")) and "stderr.log" in files and \
                    os.path.basename(os.path.dirname(root)) == "attempt_%s" % failure.get("restart", 0):
                return last_exception_line(read_bytes(os.path.join(root, "stderr.log")).decode("utf-8", "replace"))
        return None

    def restart_without(self, restart):
        """The hub's request (elastic, a node lost): SIGKILL the ranks here that may wait on that node;
        torchrun restarts them without it."""
        ranks = read_ranks(self.job_dir)
        pids = ranks_to_restart(ranks, restart.get("seen_ago") or 0, time.time(), self.interval)
        if pids:
            self.log("restarting the ranks on this node without %s" % restart.get("node"))
            self.kill_local(workers_only=pids)
        elif any(r["state"] == "running" for r in ranks):
            self.log("not restarting the ranks on this node for %s: torchrun started them after it was last "
                     "heard from" % restart.get("node"))
        else:
            self.log("not restarting the ranks on this node for %s: none running (torchrun is restarting them)"
                     % restart.get("node"))

    def kill_local(self, workers_only=None):
        """SIGTERM the job's processes on this node, SIGKILL what is left after the grace. The
        supervisor (the session leader) is spared: it records the result. ``workers_only``: these
        ranks' pids only, SIGKILLed (elastic: torchrun restarts them without the lost node)."""
        sup = self.supervisor_pid()
        exclude = {os.getpid()} | ({sup} if sup else set())
        if workers_only:
            targets = list(workers_only)
        else:
            targets = job_pids(self.job_id, self.job_dir, exclude)
            if sup:
                try:
                    os.kill(sup, signal.SIGTERM)
                except OSError:
                    pass
        for pid in targets:
            try:
                os.kill(pid, signal.SIGKILL if workers_only else signal.SIGTERM)
            except OSError:
                pass
        if workers_only:
            return
        deadline = time.time() + self.grace
        while time.time() < deadline and job_pids(self.job_id, self.job_dir, exclude):
            time.sleep(0.1)
        for _attempt in range(5):
            left = job_pids(self.job_id, self.job_dir, exclude)
            if not left:
                break
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.2)

    def stop_for_own_failure(self, local):
        """A node (not the hub) whose rank failed stops its job, unless a stop is already decided."""
        if local["failure"] and not self.stop:
            self.apply_stop({"reason": "failure", "failure": local["failure"], "time": local["failure"].get("time")})

    def apply_stop(self, stop):
        with self.lock:
            if self.stop is None:
                self.stop = dict(stop, decided_by=stop.get("decided_by") or self.node, received=time.time())
                self.log("stop: %s" % describe_stop(self.stop, self.lost_after, self.lease))
            if self.stopped_local:
                return
            self.stopped_local = True
        self.save()
        threading.Thread(target=self.kill_local, daemon=True).start()

    def log(self, text):
        line = "%s multinode.training watch %s: %s" % (time.strftime("%Y-%m-%dT%H:%M:%S"), self.node, text)
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
        self.events.append({"time": time.time(), "text": text})

    def save(self, local=None, final=False):
        data = {"node": self.node, "hub": self.hub, "stop": self.stop, "failures": self.failures, "final": final,
                "lost": self.lost, "states": self.states, "events": self.events[-50:],
                "stop_line": describe_stop(self.stop, self.lost_after, self.lease), "time": time.time(),
                "sampler_cpu": self.sampler_cpu}
        if local:
            data["local"] = {k: v for k, v in local.items() if k != "ranks"}
            data["ranks"] = local.get("ranks")
        _write_json(os.path.join(self.job_dir, "watch_state.json"), data)

    def lease_age(self):
        """Seconds since the controller last renewed this node's lease (its start: never), None without one."""
        if not self.lease:
            return None
        try:
            mtime = os.path.getmtime(os.path.join(self.job_dir, "lease"))
        except OSError:
            mtime = self.started
        return max(0.0, time.time() - mtime)

    def lease_gone(self):
        """The hub: the job's lease ran out - no node's lease renewed for ``lease`` seconds."""
        age = self.lease_age()
        if age is None:
            return False
        now = time.time()
        return lease_expired(self.lease, max(now - age, self.lease_heard), now)

    def poke(self):
        """End the main loop's nap now (from any thread)."""
        try:
            os.write(self.wake_w, b"!")
        except OSError:  # full: a wake-up is pending already
            pass

    def hub_message(self, local):
        """What a node tells the hub each round: its state and failure, and what the hub's checks read."""
        msg = {"token": self.token, "node": self.node, "state": local["state"], "failure": local["failure"]}
        if self.no_progress:
            msg.update(progress=self.progress, generation=self.generation, last_failure=self.last_failure)
        if self.hang_timeout:
            msg["collectives"] = self.collectives
        if self.lease:
            msg["lease_age"] = round(self.lease_age(), 3)
        return msg

    # -- main loop
    def run(self):
        if self.hub and self.conf.get("port"):
            threading.Thread(target=self.serve, args=(int(self.conf["port"]),), daemon=True).start()
        sock, reader, last_ok, done_at = None, None, time.time(), None
        while True:
            local = self.local_state()
            if self.hub:
                self.hub_tick(local)
                with self.lock:
                    others_done = all(self.states.get(n) in TERMINAL or n in self.lost for n in self.nodes if n != self.node)
                if local["state"] in TERMINAL:
                    done_at = done_at or time.time()
                    if others_done or time.time() - done_at > self.lost_after + 5:
                        with self.lock:
                            waiting = [n for n in self.nodes if n != self.node and n not in self.lost
                                       and self.states.get(n) not in TERMINAL]
                        self.log("hub done %.1fs after its own end: %s" % (
                            time.time() - done_at, "every node ended" if not waiting else
                            "no end heard from %s" % ", ".join(waiting)))
                        self.save(local, final=True)
                        return 0
            else:
                # This node's own failure stops its job after the hub's answer (a round trip on the job's
                # network, or the connection's 2 s timeout when the hub does not answer): a stop the hub
                # decided first - the job's lease ran out, the hub's torchrun took the rendezvous store
                # along, and this node's torchrun killed its ranks for that - is the cause, not those ranks.
                msg = self.hub_message(local)
                try:
                    if sock is None:
                        sock = socket.create_connection((self.conf["hub_addr"], int(self.conf["port"])), timeout=2)
                        sock.settimeout(2)
                        reader = sock.makefile("rb")
                    sock.sendall((json.dumps(msg) + "\n").encode("utf-8"))
                    reply = json.loads(reader.readline().decode("utf-8") or "null")
                    if reply is None:
                        raise OSError("hub closed the connection")
                    last_ok, self.hub_seen = time.time(), True
                    if reply.get("stop") and not self.stop:
                        self.apply_stop(dict(reply["stop"], decided_by="hub"))
                    self.stop_for_own_failure(local)
                    if reply.get("restart"):
                        self.restart_without(reply["restart"])
                except (OSError, ValueError):
                    self.stop_for_own_failure(local)
                    if sock is not None:
                        try:
                            sock.close()
                        except OSError:
                            pass
                    sock, reader = None, None
                    grace = self.lost_after + (0 if self.hub_seen else 20)
                    if time.time() - last_ok > grace and local["state"] not in TERMINAL and not self.stop:
                        self.apply_stop({"reason": "hub_lost", "nodes": [self.conf.get("hub_node") or self.conf["hub_addr"]]})
                if local["state"] in TERMINAL:
                    self.save(local, final=True)
                    return 0
            self.save(local)
            self.nap()

    def nap(self):
        """Sleep one interval, or less: until a byte arrives on the wake pipe (the job ended here, or
        another node reported to the hub). No polling: a job that ended is reported (and the wait
        returns) at once, not up to an interval later."""
        try:
            readable = select.select([self.wake_r], [], [], self.interval)[0]
        except (OSError, ValueError):
            time.sleep(self.interval)
            return
        if readable:
            try:
                while os.read(self.wake_r, 512):
                    pass
            except OSError:  # drained
                pass


# ==================================================================================================
# 4. main: ``mt_watch.py <job dir> [supervisor pid]`` (the watcher).
# ==================================================================================================

def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    watcher = Watcher(argv[0], argv[1] if len(argv) > 1 else None)

    def on_signal(_signum, _frame):
        raise SystemExit(0)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    # The supervisor's wake-up (WAKE_SIGNAL, ignored by default: a watcher not listening yet is not
    # killed by it) ends the nap through the wake pipe.
    signal.signal(WAKE_SIGNAL, lambda _signum, _frame: None)
    signal.set_wakeup_fd(watcher.wake_w)
    watcher.log("watching job %s (%s, lease %ss, lost after %ss, elastic %s)"
                % (watcher.job_id, "hub" if watcher.hub else "node", watcher.lease or "none ", watcher.lost_after,
                   watcher.elastic))
    return watcher.run()


if __name__ == "__main__":
    raise SystemExit(main())
