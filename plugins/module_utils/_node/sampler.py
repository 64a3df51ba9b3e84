# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The per-rank sampler for the job report: a thread in each rank's own process (started by the rank
wrapper, _node.rankwrap), shipped beside it as ``mt_sample.py``. Standard library only.

Every ``INTERVAL`` seconds it appends one JSON line to ``<job dir>/samples/<restart>_<local rank>.jsonl``:
the rank's CPU seconds and RSS from ``/proc/<pid>/stat`` and ``status``, its run-queue wait (``schedstat``:
time it was runnable but not running, throttling by a CPU limit included), the sampler thread's own CPU
seconds (its cost, reported by the job report), and on local rank 0 of a node with ``nvidia-smi`` the
GPUs' utilization and memory and the compute apps' memory by pid; once the script's process group runs,
the last enqueued and completed collective per process group (``fr``, the flight recorder's status), and
while that stands still, the main thread's innermost frames (``stack``) and the name of the collective
the rank waits in (``op``, from the recorder's entries: ``TORCH_FR_BUFFER_SIZE``, which the torchrun
module sets): what the node's watcher names in a hang; and each block of collectives that completed since
(``frb``: when this rank created them, and on NCCL with timing how long each ran), from which the job report
and the progress lines tell which node's ranks reach the collectives last (_report.arrival). The rank's ``sys.stdout`` and
``sys.stderr`` pass through a tee that time-stamps the lines that could be step lines (``CANDIDATE``:
they name a step, a loss or an iteration; at most 4 a second, the last one always); which of them are steps is decided on the controller
(_report.steps, ``train_step_pattern``), so the training script is not changed and no pattern ships.
"""
from __future__ import annotations

import json
import os
import pickle
import re
import select
import shutil
import subprocess
import sys
import sysconfig
import threading
import time
import traceback

INTERVAL = 2.0
# At most one candidate line per stream in this many seconds (Tee).
MIN_GAP = 0.25
CANDIDATE = re.compile(r"step|loss|iter", re.IGNORECASE)
MAX_LINE = 400
GPU_QUERY = ["--query-gpu=index,utilization.gpu,memory.used", "--format=csv,noheader,nounits"]
APPS_QUERY = ["--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"]


def parse_stat(text, ticks):
    """/proc/<pid>/stat -> CPU seconds (user + system); the command name may hold spaces and parentheses."""
    fields = text[text.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / float(ticks)


def parse_rss(text):
    """/proc/<pid>/status -> resident bytes (VmRSS), 0 when absent (a zombie)."""
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def parse_csv(text):
    """nvidia-smi's csv,noheader,nounits -> rows of numbers (a row with "[N/A]" keeps None there)."""
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if line.strip():
            rows.append([float(c) if re.match(r"^-?\d+(\.\d+)?$", c) else None for c in cells])
    return rows


def parse_schedstat(text):
    """/proc/<pid>/schedstat -> seconds waited on the run queue (the second field, in ns)."""
    return int(text.split()[1]) / 1e9


def proc_sample(pid, proc="/proc", ticks=None):
    ticks = ticks or os.sysconf("SC_CLK_TCK")
    with open("%s/%d/stat" % (proc, pid)) as handle:
        cpu = parse_stat(handle.read(), ticks)
    with open("%s/%d/status" % (proc, pid)) as handle:
        rss = parse_rss(handle.read())
    data = {"cpu": round(cpu, 3), "rss": rss}
    try:
        with open("%s/%d/schedstat" % (proc, pid)) as handle:
            data["delay"] = round(parse_schedstat(handle.read()), 3)
    except (OSError, IndexError, ValueError):
        pass  # a kernel without schedstats
    return data


def gpu_sample(smi):
    """The GPUs and the compute apps by pid (one nvidia-smi call each), {} when it fails."""
    try:
        gpus = subprocess.run([smi] + GPU_QUERY, capture_output=True, text=True, timeout=5, check=True).stdout
        apps = subprocess.run([smi] + APPS_QUERY, capture_output=True, text=True, timeout=5, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    return {"gpus": parse_csv(gpus), "apps": parse_csv(apps)}


# nvidia-smi runs in a helper process of the rank (this file run as ``mt_sample.py --smi <nvidia-smi>``), named
# HELPER_NAME: it reaps the nvidia-smi calls, so its CPU time with its children's (utime, stime, cutime, cstime)
# is what they cost, and the node's watcher reads it from /proc beside the sampler thread's
# (_node.watchlib.sampler_cpu). Run from the sampler thread itself, their CPU would go to the rank's own children
# time, mixed with whatever else the script starts and reaps (data loader workers).
HELPER_NAME = "mt-smi"
# Seconds the sampler waits for the helper's answer (two nvidia-smi calls of at most 5 s each).
HELPER_WAIT = 12.0


def helper_main(smi, stdin=None, stdout=None):
    """The helper's loop: one gpu_sample per line read, one JSON line written; ends when the rank closes its end
    (the rank ended, or was killed), or with the thread that started it (PR_SET_PDEATHSIG: a child the rank forked
    after it, a data loader worker, may hold that end open)."""
    name_thread(HELPER_NAME)
    try:
        import ctypes
        import signal
        ctypes.CDLL(None).prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError, TypeError):
        pass
    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout
    for _line in stdin:
        stdout.write(json.dumps(gpu_sample(smi)) + "\n")
        stdout.flush()


class SmiHelper(object):
    """The rank's side of the helper: started at the first sample, started again if it died."""

    def __init__(self, smi):
        self.smi, self.proc = smi, None

    def sample(self):
        try:
            if self.proc is None or self.proc.poll() is not None:
                self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--smi", self.smi],
                                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, close_fds=True)
            self.proc.stdin.write("\n")
            self.proc.stdin.flush()
            ready, _w, _x = select.select([self.proc.stdout], [], [], HELPER_WAIT)
            if not ready:
                raise OSError("no answer from the nvidia-smi helper within %ss" % HELPER_WAIT)
            return json.loads(self.proc.stdout.readline() or "{}")
        except (OSError, ValueError):
            self.stop()
            return {}

    def stop(self):
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            proc.stdin.close()
            proc.wait(2)
        except (OSError, subprocess.SubprocessError):
            proc.kill()
            proc.wait()


# The flight recorders of torch._C._distributed_c10d and the backends that write to each (docs/design.md, "The
# flight recorder"): ProcessGroupNCCL records into its own (``_dump_nccl_trace``: torch >= 2.4, builds with NCCL),
# every other backend (gloo) into the generic one (``_dump_fr_trace``: torch >= 2.8). Both take the keywords
# includeCollectives, includeStackTraces and onlyActive and return pickled bytes; torch's own debug handlers read
# the same two. scripts/check_torch_contract.py checks every name and keyword here against the real torch wheels.
NCCL_RECORDER, GENERIC_RECORDER = "_dump_nccl_trace", "_dump_fr_trace"
# The first torch with each recorder, for the line that says hang detection is off (and with a status per process
# group, ``pg_status``: 2.5 for NCCL's).
RECORDER_SINCE = {NCCL_RECORDER: "2.5", GENERIC_RECORDER: "2.8"}
# The recorder's size: torch >= 2.8 reads TORCH_FR_BUFFER_SIZE (then the old name), torch 2.4 to 2.7 only
# TORCH_NCCL_TRACE_BUFFER_SIZE, and both default to 0 (off) before 2.11.
BUFFER_ENV, OLD_BUFFER_ENV = "TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"


def recorder_for(backend):
    """The recorder a backend's collectives go to (``nccl`` -> NCCL's, any other -> the generic one)."""
    return NCCL_RECORDER if backend == "nccl" else GENERIC_RECORDER


def backends(dist):
    """The default process group's backends: ``nccl`` -> ["nccl"], ``cpu:gloo,cuda:nccl`` -> ["gloo", "nccl"]."""
    try:
        text = str(dist.get_backend())
    except Exception:  # noqa: B902 - no default group, a fake: nothing known
        return []
    return sorted(set(part.split(":")[-1].strip().lower() for part in text.split(",") if part.strip()))


def _dumps(c10d, nccl_too, **kwargs):
    """[(recorder name, the dump as a dict)] of each recorder this torch has (NCCL's only where ``nccl_too``: the
    job has an NCCL group), each called with ``kwargs``; a recorder that fails (none in this torch, turned off)
    is left out."""
    out = []
    for name in ((NCCL_RECORDER, GENERIC_RECORDER) if nccl_too else (GENERIC_RECORDER,)):
        dump = getattr(c10d, name, None)
        if dump is None:
            continue
        try:
            data = pickle.loads(dump(**kwargs))  # this process's own bytes
        except Exception:  # noqa: B902 - a recorder turned off or broken: no status from it
            continue
        if isinstance(data, dict):
            out.append((name, data))
    return out


def group_key(recorder, pg, nccl_too):
    """A process group's key in ``fr``: its id, and for the generic recorder in a job with NCCL groups ``<id>/cpu``:
    a group with two backends (``cpu:gloo,cuda:nccl``) counts its collectives apart in each recorder."""
    return "%s/cpu" % pg if nccl_too and recorder == GENERIC_RECORDER else str(pg)


def _modules(modules):
    modules = sys.modules if modules is None else modules
    return modules.get("torch.distributed"), modules.get("torch._C._distributed_c10d")


def fr_status(modules=None):
    """This process's flight recorders -> {process group: [last enqueued, last completed collective]} (group_key),
    or None before the script's process group ran a collective (or without torch, or a torch without a recorder
    for its backend: recorder_off says so). Reads the status only (``includeCollectives=False``: a few hundred bytes,
    0.02 to 0.06 ms measured with torch 2.13), from NCCL's recorder where the job has an NCCL group and from the
    generic one (gloo), merged."""
    dist, c10d = _modules(modules)
    if dist is None or c10d is None:
        return None
    try:
        if not dist.is_initialized():
            return None
    except Exception:  # noqa: B902 - a torch.distributed without it
        return None
    nccl_too = "nccl" in backends(dist)
    status = {}
    for recorder, data in _dumps(c10d, nccl_too, includeCollectives=False):
        for pg, entry in (data.get("pg_status") or {}).items():
            status[group_key(recorder, pg, nccl_too)] = [int(entry.get("last_enqueued_collective", -1)),
                                                         int(entry.get("last_completed_collective", -1))]
    return status or None


def recorder_off(modules=None, version=None, env=None):
    """Once the script's process group runs: why this rank's collectives cannot be seen (``torch 2.7.1 records no
    collectives for backend gloo (its recorder came with torch 2.8)``), or '' when every backend of its default
    group has a recorder that answers; None before the group runs. The controller turns it into the line ``hang
    detection off on <node>: ...``; without a recorder no hang is judged and the CPU figure names the straggler."""
    dist, c10d = _modules(modules)
    if dist is None or c10d is None:
        return None
    try:
        if not dist.is_initialized():
            return None
    except Exception:  # noqa: B902 - as fr_status
        return None
    env = os.environ if env is None else env
    version = version or getattr(modules.get("torch") if modules is not None else sys.modules.get("torch"),
                                 "__version__", "?")
    for backend in backends(dist):
        name = recorder_for(backend)
        why = None
        if getattr(c10d, name, None) is None:
            why = "its recorder came with torch %s" % RECORDER_SINCE[name]
        elif str(env.get(BUFFER_ENV, env.get(OLD_BUFFER_ENV, ""))).strip() == "0":
            why = "%s=0" % (BUFFER_ENV if BUFFER_ENV in env else OLD_BUFFER_ENV)
        else:
            found = _dumps(c10d, name == NCCL_RECORDER, includeCollectives=False)
            found = [data for recorder, data in found if recorder == name]
            if not found:
                why = "its recorder does not answer"
            elif "pg_status" not in found[0]:
                why = "its recorder keeps no status per process group before torch %s" % RECORDER_SINCE[name]
        if why:
            return "torch %s records no collectives for backend %s (%s)" % (version, backend, why)
    return ""


def recorder_env(env, version):
    """Size the recorder for this torch (``version``: torch's own, from its metadata): torch 2.4 to 2.7 read only
    TORCH_NCCL_TRACE_BUFFER_SIZE, so the job's TORCH_FR_BUFFER_SIZE (the torchrun module's, or the user's) is copied
    there where unset; torch >= 2.8 reads TORCH_FR_BUFFER_SIZE and warns that the old name is deprecated, so it is
    left alone. Returns ``env``."""
    match = re.match(r"^(\d+)\.(\d+)", str(version or ""))
    if match and (int(match.group(1)), int(match.group(2))) < (2, 8) and env.get(BUFFER_ENV) and \
            OLD_BUFFER_ENV not in env:
        env[OLD_BUFFER_ENV] = env[BUFFER_ENV]
    return env


def torch_version():
    """The installed torch's version from its metadata (torch is not imported), or None."""
    try:
        from importlib import metadata
        return metadata.version("torch")
    except Exception:  # noqa: B902 - no torch, or no metadata
        return None


def fr_entries(modules=None, stacks=False):
    """One dump of this process's flight-recorder entries (without stacks) from every recorder fr_status reads,
    each entry's ``pg_id`` turned into its group_key ([] when none answers)."""
    dist, c10d = _modules(modules)
    if c10d is None:
        return []
    nccl_too = dist is not None and "nccl" in backends(dist)
    out = []
    for recorder, data in _dumps(c10d, nccl_too, includeStackTraces=stacks):
        for entry in data.get("entries") or []:
            if isinstance(entry, dict):
                out.append(dict(entry, pg_id=group_key(recorder, entry.get("pg_id"), nccl_too)))
    return out


def fr_op(pg, seq, modules=None):
    """The name of collective ``seq`` of process group ``pg`` (group_key; ``gloo:all_reduce``, ``nccl:all_reduce``)
    from one dump of the recorders' entries without stacks, or None."""
    for entry in reversed(fr_entries(modules)):
        if str(entry.get("pg_id")) == str(pg) and entry.get("collective_seq_id") == seq:
            return entry.get("profiling_name")
    return None


# The arrival record (``frb``): every collective of a process group is in one block of consecutive sequence
# numbers; a block's size depends on its numbers only (8 up to collective 1024, then doubling with each
# doubling of the number: 64 blocks per doubling), so every rank cuts the same blocks and a job of hours at
# a thousand collectives a second records some 900 blocks per rank in all. _report.arrival compares the
# ranks' blocks.
BLOCK_MIN = 8
BLOCK_FLAT_BITS = 10


def block_of(seq):
    """Collective ``seq`` (1, 2, ...) -> (the first sequence number of its block, the block's size)."""
    index = max(0, int(seq) - 1)
    size = BLOCK_MIN << max(0, index.bit_length() - BLOCK_FLAT_BITS)
    return index - index % size + 1, size


def fr_blocks(entries, status, after):
    """The blocks of collectives that completed since ``after`` ({process group id: the next block's first
    number}, updated) from one dump's ``entries``: [[group, first number, size, first and last creation
    time, mean creation time (seconds), mean duration (ms; NCCL with TORCH_NCCL_ENABLE_TIMING, else None)]].
    A block is recorded once, when every one of its collectives is in the dump and completed (``status``:
    fr_status); one whose first entries the recorder has already dropped is passed over."""
    by_pg = {}
    for entry in entries or []:
        seq = entry.get("collective_seq_id") or 0
        if entry.get("is_p2p") or seq <= 0 or entry.get("time_created_ns") is None:
            continue
        by_pg.setdefault(str(entry.get("pg_id")), {})[int(seq)] = (
            entry["time_created_ns"] / 1e9, entry.get("duration_ms"))
    out = []
    for pg, seqs in sorted(by_pg.items()):
        done = (status or {}).get(pg, [-1, -1])[1]
        seq = max(after.get(pg, 1), min(seqs))
        first, size = block_of(seq)
        if first < seq:  # its first collectives are gone: from the next block
            first, size = block_of(first + size)
        while first + size - 1 <= done:
            got = [seqs.get(n) for n in range(first, first + size)]
            if all(got):
                times = [t for t, _d in got]
                durations = [d for _t, d in got if d is not None]
                out.append([pg, first, size, round(times[0], 6), round(times[-1], 6),
                            round(sum(times) / size, 6),
                            round(sum(durations) / size, 4) if len(durations) == size else None])
            after[pg] = first + size
            first, size = block_of(first + size)
    return out


# Seconds between two dumps of the recorder's entries, unless half of them are new sooner.
DUMP_EVERY = 10.0


def fr_buffer(env=None):
    """The recorder's size (TORCH_FR_BUFFER_SIZE, else the old name, 2000 as the torchrun module sets it where unset)."""
    env = os.environ if env is None else env
    try:
        return max(2, int(env.get(BUFFER_ENV) or env.get(OLD_BUFFER_ENV) or 2000))
    except ValueError:
        return 2000


# Where the standard library and installed packages live: a frame there is not the job's own code.
LIBRARY_DIRS = tuple(sorted(set(
    os.path.join(path, "") for key, path in sysconfig.get_paths().items()
    if key in ("stdlib", "platstdlib", "purelib", "platlib") and path)))


def thread_stack(ident, limit=6):
    """Thread ``ident``'s innermost ``limit`` frames as ``file:line in function: code`` (innermost last), and
    the innermost of them in the job's own code (not the standard library's, not an installed package's):
    ``(frames, where)``; where is '' when every frame is a library's."""
    frame = sys._current_frames().get(ident)
    if frame is None:
        return [], ""
    frames, where = [], ""
    for f in traceback.extract_stack(frame)[-limit:]:
        text = "%s:%s in %s: %s" % (os.path.basename(f.filename), f.lineno, f.name, (f.line or "").strip())
        frames.append(text)
        if not f.filename.startswith(LIBRARY_DIRS) and f.filename != __file__ and \
                os.path.basename(f.filename) != "mt_rank.py":  # not this file, not the rank wrapper
            where = text
    return frames, where


class Tee:
    """A text stream that passes everything through and hands complete candidate lines to ``record``: at
    most one per ``gap`` seconds (a job printing a step every few milliseconds would otherwise write
    megabytes a minute); the step time between two kept lines is still exact (time over the steps
    between them). The newest line not kept is handed over by ``flush_skipped`` (the sampler's stop), so
    the last step is never lost."""

    def __init__(self, stream, record, name, gap=None, clock=time.time):
        self._stream, self._record, self._name, self._part = stream, record, name, ""
        self._gap = MIN_GAP if gap is None else gap
        self._clock, self._last, self._skipped = clock, None, None

    def write(self, text):
        written = self._stream.write(text)
        if "\n" in text or self._part:
            lines = (self._part + text).split("\n")
            self._part = lines.pop()[-MAX_LINE:]
            for line in lines:
                if CANDIDATE.search(line):
                    self._line(line)
        elif text:
            self._part = text[-MAX_LINE:]
        return written

    def _line(self, line):
        now = self._clock()
        data = {"t": round(now, 3), "kind": "line", "stream": self._name, "text": line[-MAX_LINE:]}
        if self._last is not None and now - self._last < self._gap:
            self._skipped = data
            return
        self._last, self._skipped = now, None
        self._record(data)

    def flush_skipped(self):
        if self._skipped is not None:
            self._record(self._skipped)
            self._skipped = None

    def __getattr__(self, name):
        return getattr(self._stream, name)


# The sampler thread's name as the kernel knows it (/proc/<pid>/task/<tid>/comm): the node's watcher finds the
# thread by it and reads its CPU time from outside the rank (_node.watchlib.sampler_cpu).
THREAD_NAME = "mt-sampler"


def name_thread(name):
    """Give the calling thread its kernel name (prctl PR_SET_NAME; Linux, at most 15 bytes); False elsewhere."""
    try:
        import ctypes
        return ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0) == 0
    except (OSError, AttributeError, TypeError):
        return False


class Sampler:
    """One rank's samples file; ``start`` runs the sampling thread, ``stop`` takes a last sample."""

    def __init__(self, path, pid, local_rank, interval=INTERVAL, proc="/proc", smi=None):
        self.path, self.pid, self.interval, self.proc = path, pid, interval, proc
        self.smi = SmiHelper(smi) if smi and local_rank == 0 else None
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = None
        self._self_cpu = 0.0
        self.tees = []
        self._handle = open(path, "a")
        # the script's thread (the sampler is started from it), the flight recorder's last status and the
        # collective whose name was looked up, with that name
        self.main_ident = threading.get_ident()
        self._fr, self._op_for = None, None
        # per process group, the first collective of the next block of arrivals to record (fr_blocks); when the
        # entries were last dumped, and the collectives completed by then
        self._after, self._dumped = {}, (float("-inf"), 0)
        # why this rank's collectives cannot be seen (recorder_off), '' once known that they can
        self._off = None

    def record(self, data):
        with self._lock:
            if not self._handle.closed:
                self._handle.write(json.dumps(data, sort_keys=True) + "\n")
                self._handle.flush()

    def sample(self, final=False):
        try:
            data = proc_sample(self.pid, self.proc)
        except (OSError, ValueError, IndexError):
            return
        data.update({"t": round(time.time(), 3), "kind": "proc", "self_cpu": round(self._self_cpu, 4)})
        if self.smi:
            data.update(self.smi.sample())
        data.update(self.collectives(final))
        self.record(data)

    def collectives(self, final=False):
        """The flight recorder's status; while it stands still since the last sample, the script's stack
        and, once per collective, the name of the one this rank waits in (enqueued, not completed)."""
        if self._off is None:
            self._off = recorder_off()  # once, when the group runs (None before)
        status = fr_status()
        off = {"fr_off": self._off} if self._off else {}
        if status is None:
            return off
        out = dict(off, fr=status)
        if self._dump_due(status, final):
            self._dumped = (time.monotonic(), sum(done for _enq, done in status.values()))
            blocks = fr_blocks(fr_entries(), status, self._after)
            if blocks:
                out["frb"] = blocks
        if status == self._fr and final is False:
            out["stack"], out["where"] = thread_stack(self.main_ident)
            waiting = sorted((pg, enq) for pg, (enq, done) in status.items() if enq > done)
            if waiting and (self._op_for or [None])[0] != waiting[-1]:
                self._op_for = (waiting[-1], fr_op(*waiting[-1]))
            if waiting and self._op_for[1]:
                out["op"] = {"pg": waiting[-1][0], "seq": waiting[-1][1], "name": self._op_for[1]}
        self._fr = status
        return out

    def _dump_due(self, status, final=False):
        """Whether to dump the recorder's entries now (28 ms with 2000 of them, torch 2.13 on the 2-core test
        host; the status alone 0.03 ms): a block completed in some group, and DUMP_EVERY seconds passed since the
        last dump, or half the recorder's entries are new (before it drops them), or it is the last sample."""
        if not any(done >= sum(block_of(self._after.get(pg, 1))) - 1 for pg, (_enq, done) in status.items()):
            return False
        at, count = self._dumped
        new = sum(done for _enq, done in status.values()) - count
        return final or time.monotonic() - at >= DUMP_EVERY or new >= fr_buffer() // 2

    def _loop(self):
        name_thread(THREAD_NAME)
        while not self._done.wait(self.interval):
            self.sample()
            self._self_cpu = time.thread_time()

    def start(self):
        self.sample()
        self._thread = threading.Thread(target=self._loop, name="mt-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        self._done.set()
        for tee in self.tees:
            tee.flush_skipped()
        self.sample(final=True)  # from the script's thread: no stack of its own
        if self.smi:
            self.smi.stop()
        with self._lock:
            self._handle.close()


def start(job_dir, env, streams):
    """Start sampling this process into ``<job dir>/samples/`` and tee ``streams`` ({name: (module, attr)});
    None (the rank runs unsampled) when the directory cannot be written. First, the recorder sized for this
    torch (recorder_env), before the script creates its process group."""
    recorder_env(env, torch_version())
    name = "%s_%s" % (env.get("TORCHELASTIC_RESTART_COUNT", "0"), env.get("LOCAL_RANK", "0"))
    try:
        os.makedirs(os.path.join(job_dir, "samples"), exist_ok=True)
        sampler = Sampler(os.path.join(job_dir, "samples", name + ".jsonl"), os.getpid(),
                          int(env.get("LOCAL_RANK", "0")), smi=shutil.which("nvidia-smi"))
    except (OSError, ValueError):
        return None
    for stream_name, (owner, attr) in streams.items():
        tee = Tee(getattr(owner, attr), sampler.record, stream_name)
        sampler.tees.append(tee)
        setattr(owner, attr, tee)
    return sampler.start()


if __name__ == "__main__" and sys.argv[1:2] == ["--smi"]:
    helper_main(sys.argv[2])
