"""The per-rank sampler: /proc parsing on a recorded process (tests/fixtures/report/proc/4242, a python
process in a molecule container), the stdout tee, the samples file, and a rank run under the wrapper."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from ansible_collections.multinode.training.plugins.module_utils._node import rankwrap, sampler
from tests.unit import torch_fakes as tf
from tests.unit.conftest import FIXTURES, busy_sampler_thread

PROC = FIXTURES / "report" / "proc"


def test_proc_sample_of_a_recorded_process():
    data = sampler.proc_sample(4242, proc=str(PROC), ticks=100)
    assert data == {"cpu": 0.07, "rss": 8252 * 1024, "delay": pytest.approx(0.302, abs=1e-3)}


def test_stat_with_a_command_name_holding_spaces_and_parentheses():
    text = "77 (a (b) c) S 1 77 77 0 -1 0 0 0 0 0 250 50 0 0 20 0 1 0 1 1 1"
    assert sampler.parse_stat(text, 100) == 3.0


def test_nvidia_smi_csv_keeps_na_as_none():
    assert sampler.parse_csv("0, 87, 40100\n1, [N/A], 12\n\n") == [[0, 87, 40100], [1, None, 12]]


def test_tee_passes_everything_and_records_only_complete_candidate_lines():
    class Sink:
        def __init__(self):
            self.text = ""

        def write(self, text):
            self.text += text
            return len(text)

    sink, seen = Sink(), []
    tee = sampler.Tee(sink, seen.append, "stdout", gap=0)
    for chunk in ("smoke: rank=0 st", "ep=1 loss=2.0\nhello\n", "{'loss': 1.5, 'epoch': 0.1}", "\n"):
        tee.write(chunk)
    assert sink.text == "smoke: rank=0 step=1 loss=2.0\nhello\n{'loss': 1.5, 'epoch': 0.1}\n"
    assert [r["text"] for r in seen] == ["smoke: rank=0 step=1 loss=2.0", "{'loss': 1.5, 'epoch': 0.1}"]


class _Null:
    def write(self, text):
        return len(text)


def test_tee_keeps_one_line_per_gap_and_hands_over_the_last_one():
    now, seen = [100.0], []
    tee = sampler.Tee(_Null(), seen.append, "stdout", gap=0.25, clock=lambda: now[0])
    for step in range(1, 101):  # 100 steps, 10 ms apart: one line kept per 0.25 s
        tee.write("smoke: rank=0 step=%d loss=1.0\n" % step)
        now[0] += 0.01
    kept = [int(r["text"].split("step=")[1].split()[0]) for r in seen]
    assert kept == [1, 26, 51, 76]
    tee.flush_skipped()
    assert seen[-1]["text"] == "smoke: rank=0 step=100 loss=1.0" and seen[-1]["t"] == 100.99
    tee.flush_skipped()
    assert len(seen) == 5


def test_a_rank_under_the_wrapper_leaves_samples_and_step_lines(tmp_path):
    shutil.copy(rankwrap.__file__, tmp_path / "mt_rank.py")
    shutil.copy(sampler.__file__, tmp_path / "mt_sample.py")
    script = tmp_path / "job.py"
    script.write_text("for i in range(3):\n    print('smoke: rank=0 step=%d loss=1.0' % (i + 1), flush=True)\n")
    env = dict(os.environ, MULTINODE_TRAINING_JOB_DIR=str(tmp_path), RANK="0", LOCAL_RANK="0",
               TORCHELASTIC_RESTART_COUNT="0")
    proc = subprocess.run([sys.executable, str(tmp_path / "mt_rank.py"), str(script)], env=env,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("step=") == 3
    records = [json.loads(line) for line in (tmp_path / "samples" / "0_0.jsonl").read_text().splitlines()]
    assert [r["text"] for r in records if r["kind"] == "line"][-1] == "smoke: rank=0 step=3 loss=1.0"
    assert len([r for r in records if r["kind"] == "proc"]) >= 2  # at the start and at the end
    assert all(r["rss"] > 0 for r in records if r["kind"] == "proc")


def test_a_wrapper_without_the_sampler_file_still_runs_the_rank(tmp_path):
    shutil.copy(rankwrap.__file__, tmp_path / "mt_rank.py")
    script = tmp_path / "job.py"
    script.write_text("print('smoke: rank=0 step=1')\n")
    env = dict(os.environ, MULTINODE_TRAINING_JOB_DIR=str(tmp_path), RANK="0", LOCAL_RANK="0")
    proc = subprocess.run([sys.executable, str(tmp_path / "mt_rank.py"), str(script)], env=env,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and not (tmp_path / "samples").exists()


# ---------------------------------------------------------------- the flight recorder (a hang)

class _C10d(tf.C10d):
    """torch 2.13's generic recorder alone (a gloo job: tests/unit/torch_fakes.py), its status settable; ``calls``:
    whether each dump asked for the entries."""

    def __init__(self, status, entries=()):
        super().__init__(generic=tf.Recorder(status, entries))

    @property
    def status(self):
        return self.recorders["_dump_fr_trace"].status

    @status.setter
    def status(self, value):
        self.recorders["_dump_fr_trace"].status = value

    @property
    def calls(self):
        return [call["includeCollectives"] is not False for call in self.recorders["_dump_fr_trace"].calls]


_Dist = tf.Dist


def _status(enq, done):
    return {"0": {"last_enqueued_collective": enq, "last_started_collective": -1, "last_completed_collective": done}}


def test_fr_status_only_once_the_process_group_runs():
    c10d = _C10d(_status(6, 5))
    modules = {"torch.distributed": _Dist(), "torch._C._distributed_c10d": c10d}
    assert sampler.fr_status(modules) == {"0": [6, 5]}
    assert c10d.calls == [False]  # the status only, no entries
    assert sampler.fr_status({}) is None  # no torch in this rank
    assert sampler.fr_status(dict(modules, **{"torch.distributed": _Dist(up=False)})) is None
    assert sampler.fr_status(dict(modules, **{"torch._C._distributed_c10d": _C10d({})})) is None  # no collective yet

    class Off(_C10d):
        def _dump_fr_trace(self, **kwargs):
            raise RuntimeError("flight recorder disabled")
    assert sampler.fr_status(dict(modules, **{"torch._C._distributed_c10d": Off({})})) is None


def test_fr_op_names_the_collective_by_group_and_sequence():
    entries = [{"pg_id": 0, "collective_seq_id": 5, "profiling_name": "gloo:broadcast"},
               {"pg_id": 1, "collective_seq_id": 6, "profiling_name": "gloo:barrier"},
               {"pg_id": 0, "collective_seq_id": 6, "profiling_name": "gloo:all_reduce"}]
    modules = {"torch._C._distributed_c10d": _C10d(_status(6, 5), entries)}
    assert sampler.fr_op("0", 6, modules) == "gloo:all_reduce"
    assert sampler.fr_op("1", 6, modules) == "gloo:barrier"
    assert sampler.fr_op("0", 7, modules) is None


def test_thread_stack_names_the_innermost_frame_of_the_jobs_own_code():
    import threading
    import time

    ready, done = threading.Event(), threading.Event()

    def job_code():
        ready.set()
        done.wait(10)  # the innermost frames are the standard library's (threading)

    thread = threading.Thread(target=job_code)
    thread.start()
    try:
        ready.wait(10)
        time.sleep(0.05)
        frames, where = sampler.thread_stack(thread.ident)
    finally:
        done.set()
        thread.join()
    assert frames[-1].startswith("threading.py:") and "in wait" in frames[-1]
    assert where.startswith("test_sampler.py:") and "in job_code: done.wait(10)" in where
    assert sampler.thread_stack(-1) == ([], "")


def test_the_sampler_adds_the_stack_and_the_waited_collective_while_the_status_stands_still(tmp_path, monkeypatch):
    entries = [{"pg_id": 0, "collective_seq_id": 6, "profiling_name": "gloo:all_reduce"}]
    c10d = _C10d(_status(5, 5), entries)
    monkeypatch.setitem(sys.modules, "torch.distributed", _Dist())
    monkeypatch.setitem(sys.modules, "torch._C._distributed_c10d", c10d)
    s = sampler.Sampler(str(tmp_path / "0_0.jsonl"), os.getpid(), 1)
    try:
        first = s.collectives()
        assert first == {"fr": {"0": [5, 5]}}  # a first status: nothing stands still yet
        still = s.collectives()
        assert still["fr"] == {"0": [5, 5]} and still["stack"] and "op" not in still  # not in a collective
        c10d.status = _status(6, 5)
        assert "stack" not in s.collectives()  # moved on
        waiting = s.collectives()
        assert waiting["op"] == {"pg": "0", "seq": 6, "name": "gloo:all_reduce"}
        assert waiting["where"].startswith("test_sampler.py:")
        calls = len(c10d.calls)
        assert s.collectives()["op"]["name"] == "gloo:all_reduce" and len(c10d.calls) == calls + 1  # looked up once
        assert "stack" not in s.collectives(final=True)  # the last sample, from the script's own thread
    finally:
        s.stop()


def test_blocks_depend_on_the_sequence_number_alone():
    assert sampler.block_of(1) == (1, 8) and sampler.block_of(8) == (1, 8) and sampler.block_of(9) == (9, 8)
    assert sampler.block_of(1024) == (1017, 8) and sampler.block_of(1025) == (1025, 16)
    assert sampler.block_of(2049) == (2049, 32) and sampler.block_of(5000) == (4993, 64)
    for seq in range(1, 20000, 7):  # every block holds its number and tiles the numbers without a gap
        first, size = sampler.block_of(seq)
        assert first <= seq < first + size
        assert sampler.block_of(first) == sampler.block_of(first + size - 1) == (first, size)
        assert sampler.block_of(first + size)[0] == first + size
    # a job of an hour at 1000 collectives a second records some 900 blocks per group
    count, seq = 0, 1
    while seq <= 3600 * 1000:
        seq += sampler.block_of(seq)[1]
        count += 1
    assert 800 < count < 1000


def _entry(seq, t, pg=0, duration=None, p2p=False):
    entry = {"pg_id": pg, "collective_seq_id": seq, "time_created_ns": int(t * 1e9), "is_p2p": p2p,
             "profiling_name": "gloo:all_reduce"}
    if duration is not None:
        entry["duration_ms"] = duration
    return entry


def test_fr_blocks_records_each_complete_block_once():
    entries = [_entry(seq, 100 + seq * 0.5) for seq in range(1, 21)] + [_entry(0, 100, p2p=True)]
    after = {}
    blocks = sampler.fr_blocks(entries, {"0": [20, 17]}, after)
    assert blocks == [["0", 1, 8, 100.5, 104.0, 102.25, None], ["0", 9, 8, 104.5, 108.0, 106.25, None]]
    assert after == {"0": 17}
    assert sampler.fr_blocks(entries, {"0": [20, 20]}, after) == []  # 17-24 is not complete yet
    more = entries + [_entry(seq, 100 + seq * 0.5, duration=2.0) for seq in range(21, 25)]
    assert sampler.fr_blocks(more, {"0": [24, 24]}, after) == [["0", 17, 8, 108.5, 112.0, 110.25, None]]
    # every collective of the block with its GPU duration: their mean; the recorder dropped 1-10: from 17 on
    timed = [_entry(seq, 100 + seq, duration=float(seq)) for seq in range(11, 25)]
    assert sampler.fr_blocks(timed, {"0": [24, 24]}, {}) == [["0", 17, 8, 117.0, 124.0, 120.5, 20.5]]
    # a block with a hole (an entry missing) is passed over, and so is a group in a status of none
    holed = [e for e in entries if e["collective_seq_id"] != 3]
    assert [b[1] for b in sampler.fr_blocks(holed, {"0": [20, 20]}, {})] == [9]
    assert sampler.fr_blocks(entries, {}, {}) == []


def test_the_sampler_records_blocks_with_one_dump_per_new_block(tmp_path, monkeypatch):
    entries = [_entry(seq, 100 + seq) for seq in range(1, 9)]
    c10d = _C10d(_status(7, 7), entries)
    monkeypatch.setitem(sys.modules, "torch.distributed", _Dist())
    monkeypatch.setitem(sys.modules, "torch._C._distributed_c10d", c10d)
    s = sampler.Sampler(str(tmp_path / "0_0.jsonl"), os.getpid(), 1)
    try:
        # 7 of 8: the status alone (once more at the start: whether the backend is recorded, recorder_off)
        assert "frb" not in s.collectives() and c10d.calls == [False, False]
        c10d.status = _status(8, 8)
        assert s.collectives()["frb"] == [["0", 1, 8, 101.0, 108.0, 104.5, None]]
        assert c10d.calls == [False, False, False, True]  # one dump of the entries
        assert "frb" not in s.collectives() and c10d.calls[-1] is False  # recorded once
    finally:
        s.stop()


def test_the_watcher_reads_the_sampler_threads_cpu_from_proc(tmp_path):
    """A real sampler thread in this process, found by its kernel name and read from /proc, as the node's
    watcher (another process) reads it; a thread that spins is charged with its spinning."""
    import time

    from ansible_collections.multinode.training.plugins.module_utils._node import watchlib

    assert watchlib.SAMPLER_THREAD == sampler.THREAD_NAME
    assert watchlib.sampler_cpu(os.getpid()) is None  # no sampler thread yet
    with busy_sampler_thread(0.3):
        deadline = time.time() + 10
        while (watchlib.sampler_cpu(os.getpid()) or 0) < 0.25 and time.time() < deadline:
            time.sleep(0.05)
        assert 0.25 <= watchlib.sampler_cpu(os.getpid()) < 5
    assert watchlib.sampler_cpu(999999999) is None


def test_the_entries_are_dumped_at_most_every_dump_every_seconds_unless_half_are_new(tmp_path, monkeypatch):
    entries = [_entry(seq, 100 + seq) for seq in range(1, 1100)]
    c10d = _C10d(_status(8, 8), entries)
    monkeypatch.setitem(sys.modules, "torch.distributed", _Dist())
    monkeypatch.setitem(sys.modules, "torch._C._distributed_c10d", c10d)
    monkeypatch.setenv("TORCH_FR_BUFFER_SIZE", "2000")
    s = sampler.Sampler(str(tmp_path / "0_0.jsonl"), os.getpid(), 1)
    try:
        assert [b[1] for b in s.collectives()["frb"]] == [1]
        c10d.status = _status(16, 16)
        assert "frb" not in s.collectives() and c10d.calls.count(True) == 1  # within DUMP_EVERY: not yet
        assert [b[1] for b in s.collectives(final=True)["frb"]] == [9]  # the last sample: at once
        c10d.status = _status(1016, 1016)  # 1000 new, half the recorder: at once
        assert len(s.collectives()["frb"]) == 125 and c10d.calls.count(True) == 3
        c10d.status = _status(1024, 1024)
        assert "frb" not in s.collectives()
        monkeypatch.setattr(sampler, "DUMP_EVERY", 0.0)
        assert [b[1] for b in s.collectives()["frb"]] == [1017]
    finally:
        s.stop()
    assert sampler.fr_buffer({"TORCH_FR_BUFFER_SIZE": "50"}) == 50 and sampler.fr_buffer({}) == 2000
    assert sampler.fr_buffer({"TORCH_FR_BUFFER_SIZE": "x"}) == 2000


def test_nvidia_smi_runs_in_a_helper_whose_cpu_the_watcher_reads_with_its_children(tmp_path):
    """Local rank 0 asks nvidia-smi through a helper process (mt-smi) that reaps the calls: the node's watcher
    reads the helper's CPU, its nvidia-smi children's included, from /proc - here a stand-in nvidia-smi that
    burns 0.1 CPU-s a call, 6 calls: at least 0.6 s, none of it on the sampler's own clock."""
    from ansible_collections.multinode.training.plugins.module_utils._node import watchlib

    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!%s\nimport sys, time\nend = time.process_time() + 0.1\nwhile time.process_time() < end:\n"
                   "    pass\nprint('0, 87, 40100' if '--query-gpu' in sys.argv[1] else '4242, 39000')\n"
                   % sys.executable)
    smi.chmod(0o755)
    assert watchlib.SAMPLER_HELPER == sampler.HELPER_NAME
    s = sampler.Sampler(str(tmp_path / "0_0.jsonl"), os.getpid(), 0, smi=str(smi))
    try:
        for _sample in range(3):
            s.sample()
        helper = s.smi.proc.pid
        with open("/proc/%d/comm" % helper) as handle:
            assert handle.read().strip() == "mt-smi"
        assert helper in watchlib._children(os.getpid())
        assert 0.6 <= watchlib.sampler_cpu(os.getpid()) < 10
    finally:
        s.stop()
    records = [json.loads(line) for line in (tmp_path / "0_0.jsonl").read_text().splitlines()]
    assert [r["gpus"] for r in records] == [[[0, 87, 40100]]] * 4 and records[0]["apps"] == [[4242, 39000]]
    assert not os.path.exists("/proc/%d" % helper) or open("/proc/%d/stat" % helper).read().split()[2] == "Z"
    assert s.smi.proc is None  # stopped with the sampler


def test_the_helper_ends_with_the_rank_even_while_a_forked_child_holds_its_pipe(tmp_path):
    """A rank that forked a worker after starting the helper (a data loader) dies: the worker still holds the
    helper's stdin open, yet the helper ends with the rank (PR_SET_PDEATHSIG), not with the worker."""
    import time

    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho '0, 1, 2'\n")
    smi.chmod(0o755)
    rank = subprocess.run([sys.executable, "-c", (
        "import importlib.util, os, sys, time\n"
        "spec = importlib.util.spec_from_file_location('mt_sample', sys.argv[1])\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "h = m.SmiHelper(sys.argv[2]); h.sample()\n"
        "if os.fork() == 0:\n"
        "    time.sleep(15); os._exit(0)\n"
        "print(h.proc.pid, flush=True); os._exit(0)\n"), sampler.__file__, str(smi)],
        stdout=open(str(tmp_path / "out"), "w"), stderr=subprocess.DEVNULL, timeout=30, check=True)
    assert rank.returncode == 0
    helper = int((tmp_path / "out").read_text().split()[0])
    deadline = time.time() + 10
    while time.time() < deadline and os.path.exists("/proc/%d" % helper) and \
            open("/proc/%d/stat" % helper).read().split(")")[-1].split()[0] != "Z":
        time.sleep(0.1)
    gone = not os.path.exists("/proc/%d" % helper) or \
        open("/proc/%d/stat" % helper).read().split(")")[-1].split()[0] == "Z"
    assert gone, "the helper %d outlived its rank" % helper
