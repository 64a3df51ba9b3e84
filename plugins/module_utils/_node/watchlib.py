# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The job watcher's library, which the torchrun module reads too: the job directory's files, rank records, follow helpers.

Standard library only. The torchrun module imports it (its long poll, the collect, slurm_job's
streamed output) and ships its source beside the watcher into the job directory (``watchlib.py``
beside ``mt_watch.py``: _torchrun.follow.write_watch_files); the watcher (_node.watch) imports it
from its own directory there. In numbered sections: the no-follow walker (root reads the job's
files in a directory that the job's account owns), this node's job (its processes, its ranks'
records), the follow helpers (what the module's long poll reads and renews, the live samples,
the ranks' streamed output). The fixed timings are here too: the watcher's, and the torchrun
module's defaults (docs/design.md, "Fixed timings").
"""
from __future__ import annotations

import json
import os
import re
import signal
from stat import S_ISDIR, S_ISLNK, S_ISREG

# The watchers' fixed timings, also the torchrun module's defaults (docs/design.md, "Fixed timings").
# A heartbeat every HEARTBEAT seconds; a node silent for LOST_AFTER seconds (20 heartbeats: a
# scheduling hiccup or a pause of a few seconds on a busy node is not a loss, a dead node is named
# within seconds) is lost; after a failure elsewhere the ranks get FAIL_GRACE seconds between SIGTERM
# and SIGKILL (enough to flush their output; the job is failing anyway, so it does not wait for a
# checkpoint as a stop by train_stop_grace does).
HEARTBEAT = 0.5
LOST_AFTER = 10
# Seconds a node never heard from is given (from the watcher's start) where the configuration names none:
# torchrun's own rendezvous join timeout (600 s), which the torchrun module passes as ``start_grace``.
START_GRACE = 600
FAIL_GRACE = 5
# A crash loop (no_progress): the attempts in a row without progress after which a job that may restart is
# stopped instead (NVIDIA's NVRx stops after 3 restarts without progress), and the most of a rank log's new
# output read at once for its step lines.
NO_PROGRESS_RESTARTS = 3
SCAN_BYTES = 4 << 20
# Seconds between two reads of the ranks' new output for step lines (a job that may restart), and of their
# latest samples for a hang (the sampler's interval).
PROGRESS_EVERY = 2.0
# A hang: seconds without a change of any rank's collectives while some ranks wait in one that others did
# not enter (half NCCL's default watchdog timeout of 10 minutes: named before the backend gives up).
HANG_TIMEOUT = 300
# Links open_dir follows on one path before it gives up (the kernel's own limit, ELOOP).
MAX_LINKS = 40
# Errors a rank raises because a peer died (the same list as _node.torchrun.PEER_ERROR_RE; this file is
# standard library only): the first such failure does not name the cause when a node was lost.
PEER_RE = re.compile(
    r"Connection closed by peer|Connection reset by peer|remote worker crashing|Broken pipe"
    r"|DistNetworkError|NCCL communicator was aborted|Socket Timeout|recvBytes|Timed out waiting"
    r"|connection refused",
    re.IGNORECASE,
)
EXC_LINE_RE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Failure|Warning|Fault|Timeout)|"
                         r"[A-Za-z_][\w.]*\.[A-Z]\w*|[A-Z]\w*Error)(?::\s.*)?$")


# ==================================================================================================
# 1. No-follow walker: the job directory's files opened one name at a time, never through a link of
#    the job's account, never a FIFO (root reads them too: _torchrun.collect imports these).
# ==================================================================================================

def open_dir(path):
    """The directory ``path`` -> a descriptor of it (O_PATH: for ``dir_fd`` only), or None.

    Walked one name at a time from ``/`` (``path`` is absolute) without letting the kernel follow a
    link: a link on the way is followed only where root owns it (``/var/run``, a log directory an
    operator linked elsewhere), and its target is walked the same way, so a link of another
    account's is refused there too, never followed by the kernel on root's behalf. The job's
    account owns its job directory and the log directory that holds it: a link it puts there in
    place of a directory (``ranks``, ``exits``, the job directory itself, or a directory on the
    way that a link of root's points through) would have root read the files of the same names in
    the directory it points to (another job's logs, a file of root's)."""
    names = path.split("/")[::-1]  # a stack: the next name last
    hops = 0
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY)
    try:
        while names:
            name = names.pop()
            if name in ("", "."):
                continue
            step = os.open(name, os.O_PATH | os.O_NOFOLLOW, dir_fd=fd)
            try:
                st = os.fstat(step)
                if S_ISLNK(st.st_mode):
                    hops += 1
                    if st.st_uid != 0 or hops > MAX_LINKS:
                        raise PermissionError(path)
                    target = os.readlink("", dir_fd=step)  # the link opened, not its name again
            except OSError:
                os.close(step)
                raise
            if S_ISLNK(st.st_mode):
                os.close(step)
                names.extend(target.split("/")[::-1])
                if target.startswith("/"):
                    root = os.open("/", os.O_PATH | os.O_DIRECTORY)
                    os.close(fd)
                    fd = root
                continue
            os.close(fd)
            fd = step
            if not S_ISDIR(st.st_mode):
                raise NotADirectoryError(path)
    except OSError:
        os.close(fd)
        return None
    return fd


def open_regular(path, dir_fd=None):
    """``path`` (relative to ``dir_fd`` where given) opened for reading -> (fd, its fstat) where it is a
    regular file, else (None, None); the caller closes the fd.

    Root reads the job's files in a directory that the job's account owns, and the account may put
    a link there to a file of root's (whose text would reach the controller) or a FIFO (a read that
    never ends): the last name is not followed (O_NOFOLLOW), and only a regular file is kept (opened
    non-blocking: opening a FIFO does not wait for a writer). An absolute ``path``'s directories are
    walked by ``open_dir`` (no link of another account's on the way)."""
    parent = None
    if dir_fd is None and os.path.isabs(path):
        parent = open_dir(os.path.dirname(path))
        if parent is None:
            return None, None
        dir_fd, path = parent, os.path.basename(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return None, None
    finally:
        if parent is not None:
            os.close(parent)
    try:
        st = os.fstat(fd)
    except OSError:
        st = None
    if st is None or not S_ISREG(st.st_mode):
        os.close(fd)
        return None, None
    return fd, st


def read_bytes(path, size=0):
    """A regular file's bytes (its last ``size`` bytes where ``size`` > 0); b"" when there is none, or
    a link or a FIFO stands at its name (``open_regular``)."""
    fd, st = open_regular(path)
    if fd is None:
        return b""
    try:
        if size and st.st_size > size:
            os.lseek(fd, st.st_size - size, os.SEEK_SET)
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    except OSError:
        return b""
    finally:
        os.close(fd)


def _read_json(path):
    try:
        return json.loads(read_bytes(path).decode("utf-8", "replace") or "null")
    except ValueError:
        return None


def _write_json(path, data):
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "w") as handle:
        json.dump(data, handle, sort_keys=True)
    os.rename(tmp, path)


# ==================================================================================================
# 2. This node's job: its processes (/proc) and its ranks' records (exits/).
# ==================================================================================================

def last_exception_line(text):
    """The exception line of the last Python traceback in a rank's stderr, e.g.
    ``AssertionError: Only wrote to file 2 times, not 4``; None when there is no traceback."""
    lines = (text or "").splitlines()
    start = None
    for index in range(len(lines) - 1, -1, -1):
        if lines[index].startswith("Traceback (most recent call last):"):
            start = index
            break
    if start is None:
        return None
    found = None
    for line in lines[start + 1:]:
        if not line or line[0] in " \t":
            continue
        if line.startswith("Traceback (most recent call last):"):
            break
        if EXC_LINE_RE.match(line.strip()):
            found = line.strip()
            break
    return found


def classify_rank(start, exit_record, alive):
    """One rank from its wrapper records -> running / succeeded / failed / killed."""
    if exit_record is not None:
        return "succeeded" if exit_record.get("exitcode") == 0 else "failed"
    if start is None:
        return "unknown"
    return "running" if alive else "killed"


def peer_marked(rank):
    """A rank's record with ``peer``: its error says it died because another rank did (PEER_RE)."""
    return dict(rank, peer=bool(rank.get("message") and PEER_RE.search(rank["message"])))


def _alive(pid):
    stat = read_bytes("/proc/%d/stat" % pid)
    if not stat:
        return False
    try:
        return stat.rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except IndexError:
        return False


def job_pids(job_id, job_dir, exclude=()):
    markers = [("MULTINODE_TRAINING_JOB=%s" % job_id).encode(), ("MULTINODE_TRAINING_JOB_DIR=%s" % job_dir).encode()]
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in exclude or int(name) == os.getpid():
            continue
        environ = read_bytes("/proc/%s/environ" % name).split(b"\0")
        if all(m in environ for m in markers) and _alive(int(name)):
            found.append(int(name))
    return found


def read_ranks(job_dir, node=None):
    """Rank records of this node from the wrapper's files, latest restart per local rank last."""
    exits = os.path.join(job_dir, "exits")
    ranks = []
    try:
        names = sorted(os.listdir(exits))
    except OSError:
        return ranks
    for name in names:
        if not name.endswith(".start"):
            continue
        start = _read_json(os.path.join(exits, name))
        if not isinstance(start, dict):
            continue
        exit_record = _read_json(os.path.join(exits, name[:-6] + ".exit"))
        alive = _alive(int(start.get("pid", 0) or 0)) if start.get("pid") else False
        entry = {"rank": start.get("rank"), "local_rank": start.get("local_rank"), "restart": start.get("restart", 0),
                 "pid": start.get("pid"), "started": start.get("time"), "node": node}
        entry["state"] = classify_rank(start, exit_record, alive)
        if exit_record:
            entry.update(exitcode=exit_record.get("exitcode"), message=exit_record.get("message"),
                         time=exit_record.get("time"))
        elif entry["state"] == "killed":
            entry.update(exitcode=-9, signal=None, message="killed by a signal (SIGKILL, OOM kill?) without an exit record",
                         time=None)
        ranks.append(entry)
    return ranks


def newest_mtime(path, most=10000):
    """The newest mtime of the directory ``path`` and of the entries in it (links not followed; at most
    ``most`` entries): a checkpoint written there moves it. 0 where it cannot be read."""
    if not path:
        return 0
    try:
        newest = os.stat(path).st_mtime
        with os.scandir(path) as entries:
            for count, entry in enumerate(entries):
                if count >= most:
                    break
                try:
                    newest = max(newest, entry.stat(follow_symlinks=False).st_mtime)
                except OSError:
                    pass
    except OSError:
        return 0
    return newest


def caused_by_stop(failure, stop):
    """A rank failure this node saw only after the job's stop reached it (its ranks were stopped by
    that stop: SIGTERM, SIGKILL) is a consequence, not a cause: a stop by the lease or a lost node
    must not be reported as 'rank N killed by a signal'. ``failure['time']``: when the rank ended
    (None: no exit record, noticed only now)."""
    if not failure or not stop:
        return False
    received = stop.get("received")
    if received is None:
        return False
    when = failure.get("time")
    return when is None or when >= received


# ==================================================================================================
# 3. Follow helpers: what the torchrun module's long poll reads and renews (_torchrun.follow, wait).
# ==================================================================================================

WATCH_ENV = "MULTINODE_TRAINING_WATCH"
# The supervisor sends it to the node's watcher when it recorded the job's end (_node.supervisor).
WAKE_SIGNAL = signal.SIGURG


def renew_lease(job_dir):
    """The controller is alive: touch ``<job dir>/lease`` (the watcher stops the job when it gets old)."""
    lease = os.path.join(job_dir, "lease")
    if os.path.exists(lease):
        os.utime(lease, None)


def watcher_alive(job, proc="/proc"):
    """The job's watcher (job.json's ``watch_pid``) still runs: its environment carries the job's watch
    marker - or, where root may not read another account's environment (a container without
    CAP_SYS_PTRACE), its command line runs this job's ``<job id>/mt_watch.py``."""
    pid = (job or {}).get("watch_pid")
    if not pid:
        return False
    try:
        with open(os.path.join(proc, str(pid), "environ"), "rb") as handle:
            return ("%s=%s" % (WATCH_ENV, job.get("job_id"))).encode() in handle.read().split(b"\0")
    except (OSError, IOError):
        pass
    try:
        with open(os.path.join(proc, str(pid), "cmdline"), "rb") as handle:
            argv = handle.read().decode("utf-8", "replace").split("\0")
    except (OSError, IOError):
        return False
    script = argv[1] if len(argv) > 1 else ""
    return os.path.basename(script) == "mt_watch.py" and \
        os.path.basename(os.path.dirname(script)) == str(job.get("job_id"))


def job_done(job, ended, state, now, proc="/proc"):
    """The job ended on this node: the supervisor recorded the result (``ended``, result.json) and the
    watcher is done (``state``, watch_state.json, is final, or the watcher is gone; the hub waits up to
    the lost timeout for the other nodes, to tell a lost node from a failure); never much later."""
    return bool(ended) and (bool((state or {}).get("final")) or not watcher_alive(job, proc) or
                            now - float(ended.get("end") or now) > 30)


def rank_dirs(job_dir):
    """local rank -> directory of its latest attempt under ranks/<run>_<random>/attempt_<n>/<rank>/."""
    found = {}
    base = os.path.join(job_dir, "ranks")
    for root, dirs, _files in os.walk(base):
        name = os.path.basename(root)
        if name.startswith("attempt_") and name[8:].isdigit():
            attempt = int(name[8:])
            for local in dirs:
                if local.isdigit():
                    key = int(local)
                    if key not in found or found[key][0] < attempt:
                        found[key] = (attempt, os.path.join(root, local))
    return {key: value[1] for key, value in found.items()}


def read_tail(path, size=16384):
    """The last ``size`` bytes of a file as text ('' when it cannot be read; a link or a FIFO: ``read_bytes``)."""
    return read_bytes(path, size).decode("utf-8", "replace")


def rank0_line(job_dir):
    """Last line of this node's local rank 0 stdout (latest attempt), at most 200 characters."""
    directory = rank_dirs(job_dir).get(0)
    if not directory:
        return None
    lines = read_tail(os.path.join(directory, "stdout.log"), 4096).strip().splitlines()
    return lines[-1][-200:] if lines else None


# The rank sampler's thread name (_node.sampler.THREAD_NAME), its nvidia-smi helper's process name
# (_node.sampler.HELPER_NAME) and how often the watcher reads their CPU time.
SAMPLER_THREAD = "mt-sampler"
SAMPLER_HELPER = "mt-smi"
SAMPLER_READ_EVERY = 10.0


def _stat_fields(path):
    """/proc/.../stat after the command name (which may hold spaces and parentheses)."""
    with open(path) as handle:
        text = handle.read()
    return text[text.rindex(")") + 2:].split()


def _children(pid, proc="/proc"):
    """The pids whose parent is ``pid``: /proc/<pid>/task/*/children where the kernel has it, else a scan."""
    base = os.path.join(proc, str(pid), "task")
    found = set()
    try:
        for tid in os.listdir(base):
            with open(os.path.join(base, tid, "children")) as handle:
                found.update(int(p) for p in handle.read().split())
        return found
    except (OSError, ValueError):
        pass
    for name in os.listdir(proc) if os.path.isdir(proc) else []:
        if name.isdigit():
            try:
                if int(_stat_fields(os.path.join(proc, name, "stat"))[1]) == int(pid):
                    found.add(int(name))
            except (OSError, ValueError, IndexError):
                continue
    return found


def sampler_cpu(pid, proc="/proc", ticks=None):
    """CPU seconds of rank ``pid``'s sampler, read from /proc by this process - not the sampler's own clock: its
    thread (the task named SAMPLER_THREAD: user + system) and its nvidia-smi helper (the child process named
    SAMPLER_HELPER: user + system with its reaped nvidia-smi calls'); None when neither is there."""
    ticks = float(ticks or os.sysconf("SC_CLK_TCK"))
    base = os.path.join(proc, str(pid), "task")
    try:
        tids = os.listdir(base)
    except OSError:
        return None
    total, found = 0.0, False
    for tid in tids:
        try:
            with open(os.path.join(base, tid, "comm")) as handle:
                if handle.read().strip() != SAMPLER_THREAD:
                    continue
            fields = _stat_fields(os.path.join(base, tid, "stat"))
            total, found = total + (int(fields[11]) + int(fields[12])) / ticks, True
            break
        except (OSError, ValueError, IndexError):
            continue
    for child in sorted(_children(pid, proc)):
        try:
            with open(os.path.join(proc, str(child), "comm")) as handle:
                if handle.read().strip() != SAMPLER_HELPER:
                    continue
            fields = _stat_fields(os.path.join(proc, str(child), "stat"))
            total, found = total + sum(int(f) for f in fields[11:15]) / ticks, True
        except (OSError, ValueError, IndexError):
            continue
    return total if found else None


def sample_files(job_dir):
    """The job report's samples files (``samples/<restart>_<local rank>.jsonl``, _node.sampler) -> {attempt:
    [(local rank, file name)]}; {} before the first."""
    try:
        names = os.listdir(os.path.join(job_dir, "samples"))
    except OSError:
        return {}
    attempts = {}
    for name in names:
        parts = name[:-len(".jsonl")].split("_") if name.endswith(".jsonl") else []
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            attempts.setdefault(int(parts[0]), []).append((int(parts[1]), name))
    return attempts


def live_samples(job_dir, size=16384, keep=4):
    """The job report's samples (``samples/<restart>_<local rank>.jsonl``, _node.sampler) of this node's
    latest attempt, for the controller's progress line: {t, demand, step_lines, lines, ranks, attempt}; None
    before the first sample. Only each file's tail is read.

    The local ranks' samplers take their samples at their own moments, 2 s apart, and step lines come in
    between: ``t`` is the oldest of the ranks' latest samples, ``demand`` the CPU + run-queue wait seconds
    summed over the local ranks at ``t`` (each rank's samples interpolated to it), ``step_lines`` the lowest
    local rank's last ``keep`` candidate step lines printed by ``t`` - the figure and the steps of one
    moment, so that the controller's demand per step does not take 2 s of one node's CPU as a step's
    (_torchrun.live.Tracker); ``lines``: its last ``keep`` candidate lines, for the latest step; ``blocks``:
    {local rank: the flight recorder's blocks of collectives in its tail} (``frb``, _report.arrival); ``fr_off``: why
    the ranks' collectives cannot be seen (_node.sampler.recorder_off), '' where they can."""
    attempts = sample_files(job_dir)
    if not attempts:
        return None
    series, texts, blocks, off = [], [], {}, ""
    for local, name in sorted(attempts[max(attempts)]):
        records, procs = [], []
        for tail in (size, size * 8, size * 64):  # until the tail holds a sample (step lines come between)
            records = []
            for line in read_tail(os.path.join(job_dir, "samples", name), tail).splitlines():
                try:
                    records.append(json.loads(line))
                except ValueError:
                    continue  # the tail's first line, cut; a line a killed rank left half written
            records = [r for r in records if isinstance(r, dict)]
            procs = [(float(r.get("t") or 0), float(r.get("cpu") or 0) + float(r.get("delay") or 0))
                     for r in records if r.get("kind") == "proc"]
            if procs:
                break
        if procs:
            series.append(procs)
        found = [b for r in records if r.get("kind") == "proc" for b in r.get("frb") or []]
        if found:
            blocks[str(local)] = found
        off = off or next((r["fr_off"] for r in reversed(records) if r.get("kind") == "proc" and r.get("fr_off")), "")
        if not texts:  # the lowest local rank that printed candidate lines
            texts = [(float(r.get("t") or 0), r.get("text", "")) for r in records if r.get("kind") == "line"]
    if not series and not texts:
        return None
    at = min(procs[-1][0] for procs in series) if series else None
    return {"t": at, "demand": round(sum(_value_at(procs, at) for procs in series), 3) if series else None,
            "step_lines": [text for t, text in texts if at is not None and t <= at][-keep:],
            "lines": [text for _t, text in texts][-keep:], "ranks": len(attempts[max(attempts)]),
            "attempt": max(attempts), "blocks": blocks, "fr_off": off}


def read_collectives(job_dir, ranks, node, now, size=16384):
    """This node's ranks as a hang is judged (_node.watch.hang_check): from each local rank's latest sample of the latest
    attempt (``sample_files``), its flight-recorder status ``fr`` and, where the
    sampler added them, ``where``, ``stack`` and ``op``; ``rank`` from the rank wrapper's start records,
    ``age`` the sample's age in seconds. [] before the first sample."""
    attempts = sample_files(job_dir)
    if not attempts:
        return []
    attempt = max(attempts)
    global_rank = {}
    for entry in ranks:
        global_rank[(entry.get("restart") or 0, entry.get("local_rank"))] = entry.get("rank")
    out = []
    for local, name in sorted(attempts[attempt]):
        sample = None
        for line in reversed(read_tail(os.path.join(job_dir, "samples", name), size).splitlines()):
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and record.get("kind") == "proc":
                sample = record
                break
        if sample is None:
            continue
        out.append({"node": node, "rank": global_rank.get((attempt, local)), "local_rank": local,
                    "fr": sample.get("fr"), "where": sample.get("where"), "stack": sample.get("stack"),
                    "op": sample.get("op"), "age": int(max(0, now - float(sample.get("t") or now)))})
    return out


def _value_at(points, at):
    """[(t, value)] in time order -> the value at ``at``, linear between the samples around it (the first or
    the last sample's value outside them)."""
    before = [p for p in points if p[0] <= at]
    after = [p for p in points if p[0] > at]
    if not before:
        return after[0][1]
    if not after or before[-1][0] == at:
        return before[-1][1]
    (t0, v0), (t1, v1) = before[-1], after[0]
    return v0 + (v1 - v0) * (at - t0) / (t1 - t0)


def progress(job_id, job_dir, job, now, proc="/proc"):
    """The node's progress for the controller to print (and ``done``: the job ended here)."""
    state = _read_json(os.path.join(job_dir, "watch_state.json")) or {}
    local = state.get("local") or {}
    ended = _read_json(os.path.join(job_dir, "result.json"))
    done = job_done(job, ended, state, now, proc)
    out = dict(done=done, running=local.get("running", 0), restarts=local.get("restarts", 0),
               elapsed=round(now - (job.get("start") or now), 1), rank0_line=rank0_line(job_dir),
               stop_line=state.get("stop_line") or None, lost=state.get("lost") or [],
               user=job.get("user"), pid=job.get("pid"), cmd=job.get("cmd"), live=live_samples(job_dir))
    out["progress"] = "%s: %s, %s rank(s) running, %s restart(s), %ss%s%s" % (
        job_id, "ended" if done else ("stopping" if state.get("stop") else "running"), out["running"],
        out["restarts"], int(out["elapsed"]),
        (", stop: " + out["stop_line"]) if out["stop_line"] else "",
        (" | rank 0: " + out["rank0_line"]) if out["rank0_line"] else "")
    return out


def follow_window(requested, lease):
    """Seconds one long poll (O(state=finished) with follow_limit) may wait on the node: what the
    controller asked for, at most a third of the job's lease (each call renews it once, at its
    start), at least 0.5 s."""
    window = max(0.5, float(requested or 0))
    if lease and float(lease) > 0:
        window = min(window, float(lease) / 3.0)
    return max(0.5, window)


# The job's output for the controller (train_stream_ranks): each poll sends the lines the chosen global
# ranks printed since the controller's offsets. At most STREAM_BYTES of one log per poll (a rank that
# prints faster arrives in pieces); a line longer than STREAM_LINE characters is cut (the log keeps it).
STREAM_BYTES = 65536
STREAM_LINE = 2000
STREAMS = ("stdout", "stderr")


def rank_logs(job_dir):
    """Every attempt's rank logs -> [(attempt, local rank, global rank, stream, path)], in that order. A rank
    whose start record (``exits/<attempt>_<local rank>.start``, its global rank) is not written yet has
    printed nothing: it is left out until then."""
    found = []
    for root, dirs, _files in os.walk(os.path.join(job_dir, "ranks")):
        name = os.path.basename(root)
        if not (name.startswith("attempt_") and name[8:].isdigit()):
            continue
        attempt = int(name[8:])
        for local in (d for d in dirs if d.isdigit()):
            start = _read_json(os.path.join(job_dir, "exits", "%d_%s.start" % (attempt, local)))
            if isinstance(start, dict) and isinstance(start.get("rank"), int):
                found.extend((attempt, int(local), start["rank"], stream, os.path.join(root, local, stream + ".log"))
                             for stream in STREAMS)
    return sorted(found, key=lambda item: (item[0], item[1], STREAMS.index(item[3])))


def stream_key(attempt, local, stream):
    """The controller's name for one rank log: ``<attempt>/<local rank>/<stdout|stderr>``."""
    return "%d/%d/%s" % (attempt, local, stream)


def chosen_logs(job_dir, ranks):
    """(key, global rank, path) of the logs of ``ranks`` (a collection of global ranks, or "all")."""
    return [(stream_key(attempt, local, stream), rank, path) for attempt, local, rank, stream, path
            in rank_logs(job_dir) if ranks == "all" or rank in ranks]


def read_from(path, offset, size):
    """Up to ``size`` bytes of a regular file from byte ``offset`` -> (bytes, the file's size); (b"", 0)
    where it cannot be read (``open_regular``: no link, no FIFO)."""
    fd, st = open_regular(path)
    if fd is None:
        return b"", 0
    try:
        if offset >= st.st_size:
            return b"", st.st_size
        os.lseek(fd, offset, os.SEEK_SET)
        return os.read(fd, min(size, st.st_size - offset)), st.st_size
    except OSError:
        return b"", 0
    finally:
        os.close(fd)


def tail_offset(path, lines):
    """The byte offset of the last ``lines`` whole lines of a file (at most STREAM_BYTES back)."""
    size = read_from(path, 0, 0)[1]
    start = max(0, size - STREAM_BYTES)
    data = read_from(path, start, STREAM_BYTES)[0]
    ends = [i + 1 for i, byte in enumerate(bytearray(data)) if byte == 10]
    if len(ends) <= lines:
        return start if start == 0 or not ends else start + ends[0]
    return start + ends[-lines - 1]


def screen_line(raw):
    """One line of a log as a terminal shows it: what follows its last carriage return (a progress bar's
    latest state), at most STREAM_LINE characters."""
    text = raw.decode("utf-8", "replace").rstrip("\r").rsplit("\r", 1)[-1]
    return text if len(text) <= STREAM_LINE else text[:STREAM_LINE] + " [...]"


def stream_lines(job_dir, ranks, offsets, tail=0, final=False, size=STREAM_BYTES):
    """The lines the chosen global ranks printed since ``offsets`` ({stream_key: byte offset}) -> (lines
    [[global rank, text]], the new offsets). Per rank, its stdout's lines, then its stderr's. A log not in
    ``offsets`` is read from its start (``tail`` > 0: from its last ``tail`` lines). Whole lines only,
    except for a line longer than ``size`` and, with ``final`` (the job ended on this node), a last line
    without its newline."""
    lines, out = [], dict(offsets or {})
    for key, rank, path in chosen_logs(job_dir, ranks):
        offset = out.get(key)
        if offset is None:
            offset = tail_offset(path, tail) if tail else 0
        data = read_from(path, int(offset), size)[0]
        end = data.rfind(b"\n") + 1
        if final or (end == 0 and len(data) >= size):
            end = len(data)
        chunk = data[:end]
        pieces = chunk.split(b"\n") if chunk else []
        if chunk.endswith(b"\n"):
            pieces.pop()  # the nothing after the last newline
        lines.extend([rank, screen_line(raw)] for raw in pieces)
        out[key] = int(offset) + end
    return lines, out


def stream_pending(job_dir, ranks, offsets):
    """Whether a chosen rank printed anything since ``offsets`` (a log that grew, or a new one)."""
    for key, _rank, path in chosen_logs(job_dir, ranks):
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if S_ISREG(st.st_mode) and st.st_size > int((offsets or {}).get(key) or 0):
            return True
    return False
