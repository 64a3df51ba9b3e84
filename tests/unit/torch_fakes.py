"""Stand-ins of torch.distributed and torch._C._distributed_c10d's flight recorders, for the node side's tests.

Standard library only: scripts/check_torch_contract.py imports this file into a real torch (the CUDA wheel that
scripts/check_cuda_build.sh downloads, the pinned CPU one, the GPU machine's) and checks it against that torch:
every recorder method here has the real binding's keywords, and the NCCL dumps built here parse with torch's own
analyser (torch.distributed.flight_recorder's build_db, as its debug handlers call it).

What the real recorders are (read from the wheels 2.4.0 to 2.14.0 and torch's source and tests):
- ``_dump_nccl_trace`` (torch >= 2.4, builds with NCCL) dumps ProcessGroupNCCL's own recorder;
  ``_dump_fr_trace`` (torch >= 2.8) the generic one that gloo writes to. Each takes ``includeCollectives``,
  ``includeStackTraces`` and ``onlyActive`` (each ``bool | None = None``: True, True, False) and returns pickled
  bytes of {version, pg_config, comm_lib_version, pg_status, entries}; ``entries`` only with collectives,
  ``pg_status`` from torch 2.5 on (absent in 2.4's dump), ``comm_lib_version`` from 2.9 (2.8: ``nccl_version``).
- An NCCL entry has, in this order (torch 2.14, FlightRecorder's getCollectiveTrace): frames (with stacks),
  record_id, pg_id, process_group (name, desc), thread_name, thread_id, collective_seq_id, p2p_seq_id, op_id,
  profiling_name, time_created_ns, duration_ms (only with TORCH_NCCL_ENABLE_TIMING), input_sizes, input_dtypes,
  output_sizes, output_dtypes, state, time_discovered_started_ns, time_discovered_completed_ns, retired,
  timeout_ms, is_p2p. The values follow torch's own test of it (test/distributed/test_c10d_nccl.py,
  NCCLTraceTest._verify_trace: version "2.10", process_group ("0", "default_pg"), profiling_name
  "nccl:all_reduce", input_sizes ((3, 4),), dtypes ["Float"], timeout_ms 600000, state "completed", and
  duration_ms only with timing; an unfinished entry "started" with timing, else "scheduled").
- The gloo dumps are recorded, not built: tests/fixtures/flight_recorder/ (torch 2.13.0+cpu, README there).
"""
from __future__ import annotations

import pickle

VERSION = "2.10"  # the dump format of torch 2.9 to 2.14
PG_CONFIG = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}}


def nccl_entry(seq, created_ns, duration_ms=None, state="completed", pg=0, name="all_reduce", record_id=None):
    """One NCCL collective as torch's NCCL recorder dumps it (see the module's docstring for the source)."""
    entry = {"record_id": seq - 1 if record_id is None else record_id, "pg_id": pg,
             "process_group": (str(pg), "default_pg"), "thread_name": "python3",
             "thread_id": "140245113218624", "collective_seq_id": seq, "p2p_seq_id": 0, "op_id": seq,
             "profiling_name": "nccl:%s" % name, "time_created_ns": created_ns}
    if duration_ms is not None:
        entry["duration_ms"] = duration_ms
    entry.update({"input_sizes": ((3, 4),), "input_dtypes": ["Float"], "output_sizes": ((3, 4),),
                  "output_dtypes": ["Float"], "state": state,
                  "time_discovered_started_ns": created_ns + 1000 if duration_ms is not None else None,
                  "time_discovered_completed_ns": created_ns + 2000 if state == "completed" else None,
                  "retired": state == "completed", "timeout_ms": 600000, "is_p2p": False})
    return entry


class Recorder(object):
    """One recorder's content: its status per process group and its entries (``status`` None: a torch before
    2.5, whose dump has no pg_status)."""

    def __init__(self, status=None, entries=(), version=VERSION, pg_config=None):
        self.status, self.entries, self.version = status, list(entries), version
        self.pg_config = PG_CONFIG if pg_config is None else pg_config
        self.calls = []

    def dump(self, includeCollectives, includeStackTraces, onlyActive):
        self.calls.append(dict(includeCollectives=includeCollectives, includeStackTraces=includeStackTraces,
                               onlyActive=onlyActive))
        data = {"version": self.version, "pg_config": self.pg_config, "comm_lib_version": "2.27.7"}
        if self.status is not None:
            data["pg_status"] = self.status
        if includeCollectives is not False:
            entries = [e for e in self.entries if not onlyActive or e.get("state") != "completed"]
            data["entries"] = [dict(e, frames=[]) if includeStackTraces is not False else e for e in entries]
        return pickle.dumps(data)


def status(enq, done, pg="0", started=-1):
    """A pg_status of one group, as the recorders give it."""
    return {pg: {"last_enqueued_collective": enq, "last_started_collective": started,
                 "last_completed_collective": done}}


class C10d(object):
    """torch._C._distributed_c10d with the recorders given: ``nccl`` (a CUDA build) and ``generic`` (torch >= 2.8);
    one not given is not there (getattr gives None, as on a CPU build or an older torch)."""

    def __init__(self, nccl=None, generic=None):
        self.recorders = {"_dump_nccl_trace": nccl, "_dump_fr_trace": generic}

    def __getattr__(self, name):
        recorder = self.__dict__.get("recorders", {}).get(name)
        if recorder is None:
            raise AttributeError(name)

        def dump(includeCollectives=None, includeStackTraces=None, onlyActive=None):
            return recorder.dump(includeCollectives, includeStackTraces, onlyActive)
        return dump

    @property
    def calls(self):
        return [call for r in self.recorders.values() if r is not None for call in r.calls]


# The signature of every recorder method above, which the contract compares with the real bindings' docstrings.
RECORDER_KEYWORDS = ("includeCollectives", "includeStackTraces", "onlyActive")


class Dist(object):
    """torch.distributed as the sampler asks it: whether the default group runs and its backend string."""

    def __init__(self, up=True, backend="gloo"):
        self.up, self.backend = up, backend

    def is_initialized(self):
        return self.up

    def get_backend(self):
        if not self.up:
            raise RuntimeError("Default process group has not been initialized, please make sure to call "
                               "init_process_group.")
        return self.backend


def modules(c10d, backend="gloo", up=True, version="2.13.0+cu130"):
    """The sys.modules entries the sampler reads."""
    class Torch(object):
        __version__ = version
    return {"torch": Torch(), "torch.distributed": Dist(up, backend), "torch._C._distributed_c10d": c10d}


def two_rank_nccl_dumps(seqs=3, timing=True, late_rank=None):
    """Two ranks' NCCL dumps of ``seqs`` all_reduces (for torch's analyser in the contract): every collective on
    both ranks, ``late_rank`` (if any) missing the last one (a hang)."""
    out = {}
    for rank in (0, 1):
        last = seqs - 1 if rank == late_rank else seqs
        entries = [nccl_entry(seq, 10 ** 18 + seq * 10 ** 6, duration_ms=1.5 if timing else None)
                   for seq in range(1, last + 1)]
        out[rank] = pickle.loads(Recorder(status(last, last), entries).dump(True, False, False))
    return out
