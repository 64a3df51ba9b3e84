"""The sampler's flight recorders for every torch the collection accepts (_node.sampler: fr_status, fr_entries,
fr_op, recorder_off, recorder_env), on the stand-ins of tests/unit/torch_fakes.py (checked against the real torch
wheels by scripts/check_torch_contract.py) and on dumps a real torch 2.13 wrote (tests/fixtures/flight_recorder).

An NCCL job's collectives are in ProcessGroupNCCL's own recorder (``_dump_nccl_trace``), not in the generic one
gloo writes to (``_dump_fr_trace``): a sampler that reads the generic one alone sees nothing on every GPU job, so
no hang is judged and no straggler named from the recorder."""
from __future__ import annotations

import json
import os
import pickle
import sys

import pytest

from ansible_collections.multinode.training.plugins.module_utils._node import sampler, watch, watchlib
from ansible_collections.multinode.training.plugins.module_utils._report import arrival, straggler
from ansible_collections.multinode.training.plugins.module_utils._torchrun import live
from tests.unit import torch_fakes as tf
from tests.unit.conftest import FIXTURES

FR = FIXTURES / "flight_recorder"


def nccl_job(status, entries=(), backend="nccl", version="2.13.0+cu130", generic=True):
    """A rank of an NCCL job on a CUDA torch: its collectives in NCCL's recorder, the generic one empty."""
    c10d = tf.C10d(nccl=tf.Recorder(status, entries), generic=tf.Recorder({}) if generic else None)
    return tf.modules(c10d, backend, version=version)


def test_an_nccl_jobs_status_name_and_blocks_come_from_ncclx_own_recorder():
    entries = [tf.nccl_entry(seq, 10 ** 18 + seq * 10 ** 7, duration_ms=2.0) for seq in range(1, 9)]
    entries.append(tf.nccl_entry(9, 10 ** 18 + 9 * 10 ** 7, state="started"))
    mods = nccl_job(tf.status(9, 8, started=9), entries)
    assert sampler.fr_status(mods) == {"0": [9, 8]}
    assert sampler.fr_op("0", 9, mods) == "nccl:all_reduce"
    assert sampler.recorder_off(mods) == ""
    blocks = sampler.fr_blocks(sampler.fr_entries(mods), sampler.fr_status(mods), {})
    assert blocks == [["0", 1, 8, 1e9 + 0.01, 1e9 + 0.08, 1e9 + 0.045, 2.0]]  # with the GPU durations
    # what the sampler read before: the generic recorder alone, which holds nothing of an NCCL job
    generic_only = tf.modules(tf.C10d(generic=tf.Recorder({})), "nccl")
    assert sampler.fr_status(generic_only) is None


def test_a_group_with_two_backends_keeps_each_recorders_count_apart():
    c10d = tf.C10d(nccl=tf.Recorder(tf.status(6, 6), [tf.nccl_entry(6, 10 ** 18)]),
                   generic=tf.Recorder(tf.status(3, 2), [dict(tf.nccl_entry(3, 10 ** 18), profiling_name="gloo:all_reduce")]))
    mods = tf.modules(c10d, "cpu:gloo,cuda:nccl")
    assert sampler.backends(mods["torch.distributed"]) == ["gloo", "nccl"]
    assert sampler.fr_status(mods) == {"0": [6, 6], "0/cpu": [3, 2]}
    assert sampler.fr_op("0/cpu", 3, mods) == "gloo:all_reduce" and sampler.fr_op("0", 6, mods) == "nccl:all_reduce"
    # a gloo job keeps the plain group ids (and the recorded jobs of tests/fixtures/report their meaning)
    gloo = tf.modules(tf.C10d(nccl=tf.Recorder({}), generic=tf.Recorder(tf.status(3, 2))), "gloo")
    assert sampler.fr_status(gloo) == {"0": [3, 2]}


def test_dumps_a_real_torch_wrote_are_read():
    """torch 2.13.0+cpu, 2 gloo ranks, 3 all_reduces and a broadcast not yet retired (record_gloo.py)."""
    class Recorded(object):
        def _dump_fr_trace(self, includeCollectives=None, includeStackTraces=None, onlyActive=None):
            name = "gloo-2.13-status-rank1.pkl" if includeCollectives is False else "gloo-2.13-rank1.pkl"
            return (FR / name).read_bytes()

    mods = tf.modules(Recorded(), "gloo", version="2.13.0+cpu")
    assert sampler.fr_status(mods) == {"0": [4, 3]}
    assert sampler.fr_op("0", 4, mods) == "gloo:broadcast"
    assert sampler.recorder_off(mods) == ""
    assert [e["collective_seq_id"] for e in sampler.fr_entries(mods)] == [1, 2, 3, 4]


@pytest.mark.parametrize("mods,env,line", [
    # torch 2.5 to 2.7: NCCL's recorder only; a gloo job's collectives are recorded nowhere
    (tf.modules(tf.C10d(nccl=tf.Recorder({})), "gloo", version="2.7.1+cu126"), {},
     "torch 2.7.1+cu126 records no collectives for backend gloo (its recorder came with torch 2.8)"),
    # torch 2.4: NCCL's recorder without a status per process group
    (nccl_job(None, generic=False, version="2.4.1+cu124"), {},
     "torch 2.4.1+cu124 records no collectives for backend nccl (its recorder keeps no status per process group "
     "before torch 2.5)"),
    # a CPU torch asked for NCCL has no NCCL recorder (no such job gets far, but the line is right)
    (tf.modules(tf.C10d(generic=tf.Recorder({})), "nccl", version="2.13.0+cpu"), {},
     "torch 2.13.0+cpu records no collectives for backend nccl (its recorder came with torch 2.5)"),
    # the user turned it off
    (nccl_job({}), {"TORCH_FR_BUFFER_SIZE": "0"},
     "torch 2.13.0+cu130 records no collectives for backend nccl (TORCH_FR_BUFFER_SIZE=0)"),
    (nccl_job({}, version="2.6.0+cu124"), {"TORCH_NCCL_TRACE_BUFFER_SIZE": "0"},
     "torch 2.6.0+cu124 records no collectives for backend nccl (TORCH_NCCL_TRACE_BUFFER_SIZE=0)"),
    (nccl_job({}), {"TORCH_FR_BUFFER_SIZE": "2000"}, ""),
    (tf.modules(tf.C10d(nccl=tf.Recorder({}), generic=tf.Recorder({})), "cpu:gloo,cuda:nccl"), {}, ""),
])
def test_recorder_off_says_why_a_ranks_collectives_cannot_be_seen(mods, env, line):
    assert sampler.recorder_off(mods, env=env) == line
    assert sampler.recorder_off(dict(mods, **{"torch.distributed": tf.Dist(up=False)}), env=env) is None


@pytest.mark.parametrize("version,env,want", [
    ("2.7.1+cu126", {"TORCH_FR_BUFFER_SIZE": "2000"}, {"TORCH_FR_BUFFER_SIZE": "2000",
                                                       "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000"}),
    ("2.4.0", {"TORCH_FR_BUFFER_SIZE": "50", "TORCH_NCCL_TRACE_BUFFER_SIZE": "10"},
     {"TORCH_FR_BUFFER_SIZE": "50", "TORCH_NCCL_TRACE_BUFFER_SIZE": "10"}),  # the user's own kept
    ("2.8.0", {"TORCH_FR_BUFFER_SIZE": "2000"}, {"TORCH_FR_BUFFER_SIZE": "2000"}),  # no deprecation warning
    ("2.13.0+cu130", {"TORCH_FR_BUFFER_SIZE": "2000"}, {"TORCH_FR_BUFFER_SIZE": "2000"}),
    (None, {"TORCH_FR_BUFFER_SIZE": "2000"}, {"TORCH_FR_BUFFER_SIZE": "2000"}),
])
def test_recorder_env_sizes_the_recorder_of_older_torch_by_its_own_name(version, env, want):
    assert sampler.recorder_env(dict(env), version) == want


def test_a_sampler_without_a_recorder_says_so_in_its_samples_and_the_controller_once(tmp_path, monkeypatch):
    mods = tf.modules(tf.C10d(nccl=tf.Recorder({})), "gloo", version="2.7.1+cu126")
    for name, value in mods.items():
        monkeypatch.setitem(sys.modules, name, value)
    (tmp_path / "samples").mkdir()
    s = sampler.Sampler(str(tmp_path / "samples" / "0_0.jsonl"), os.getpid(), 0)
    s.start()
    s.stop()
    records = [json.loads(line) for line in (tmp_path / "samples" / "0_0.jsonl").read_text().splitlines()]
    assert records and all(r["fr_off"].startswith("torch 2.7.1+cu126 records no collectives for backend gloo")
                           for r in records)
    polled = {"live": watchlib.live_samples(str(tmp_path))}
    assert polled["live"]["fr_off"] == records[0]["fr_off"]
    action = live.Live("node2", None, None)
    assert action.notice(polled) == ("hang detection off on node2: %s; the straggler is named by the CPU figure"
                                     % records[0]["fr_off"])
    assert action.notice(polled) is None  # once
    cluster = live.ClusterLive(None)
    assert cluster.notices({"n1": polled["live"], "n2": {"fr_off": ""}}) == [
        "hang detection off on n1: %s; the straggler is named by the CPU figure" % records[0]["fr_off"]]
    assert cluster.notices({"n1": polled["live"]}) == []


# ---------------------------------------------------------------- a hang and a straggler on recorded NCCL entries

def _rank(node, rank, mods, now=1000.0):
    return {"node": node, "rank": rank, "fr": sampler.fr_status(mods), "age": 0,
            "op": {"pg": "0", "seq": 6, "name": sampler.fr_op("0", 6, mods)} if sampler.fr_status(mods)["0"][0] == 6
            else None, "where": "train.py:40 in step: loss = model(batch)"}


def test_a_hang_on_nccl_is_named_from_ncclx_recorder():
    """Rank 1 never enters all_reduce #6, which rank 0 waits in (scheduled, not completed): the hub names rank 1."""
    entries = [tf.nccl_entry(seq, 10 ** 18 + seq) for seq in range(1, 6)]
    waiting = nccl_job(tf.status(6, 5), entries + [tf.nccl_entry(6, 10 ** 18 + 6, state="scheduled")])
    behind = nccl_job(tf.status(5, 5), entries)
    ranks = [_rank("node1", 0, waiting), _rank("node2", 1, behind)]
    record, stop = watch.hang_check(None, ranks, 1000.0, 300)
    assert stop is None
    record, stop = watch.hang_check(record, ranks, 1301.0, 300)
    assert stop["reason"] == "hang" and stop["op"] == "nccl:all_reduce" and stop["seq"] == 6
    assert [r["rank"] for r in stop["missing"]] == [1] and stop["missing"][0]["node"] == "node2"
    assert watch.describe_stop(stop).startswith("hang: rank 1 on node2 did not enter nccl:all_reduce #6")


def test_a_straggler_on_nccl_is_named_from_the_gpu_durations():
    """Two nodes x 2 ranks, NCCL with TORCH_NCCL_ENABLE_TIMING: node2's ranks arrive 40 ms late at each
    all_reduce, so node1's kernels run 40 ms longer (waiting inside them) - no clock compared."""
    ranks = {}
    for host, late in (("node1", 0.0), ("node2", 40.0)):
        for local in (0, 1):
            entries = [tf.nccl_entry(seq, 10 ** 18 + seq * 100 * 10 ** 6, duration_ms=5.0 + 40.0 - late)
                       for seq in range(1, 41)]
            mods = nccl_job(tf.status(40, 40), entries)
            blocks = sampler.fr_blocks(sampler.fr_entries(mods), sampler.fr_status(mods), {})
            ranks[(host, "0_%d" % local)] = [(0, b) for b in blocks]
    found = arrival.figures(ranks)
    assert found["node1"]["gpu"] and found["node2"]["gpu"]
    judged = straggler.verdict({h: f["work"] for h, f in found.items()}, straggler.RATIO, "collective")
    assert [host for host, _ratio in judged["stragglers"]] == ["node2"]


def test_the_recorded_gloo_dumps_are_what_torch_wrote():
    """The fixtures are real dumps: pickled dicts in the 2.10 format with a status per group (tripwire for a
    fixture rewritten by hand)."""
    for rank in (0, 1):
        data = pickle.loads((FR / ("gloo-2.13-rank%d.pkl" % rank)).read_bytes())
        assert data["version"] == "2.10" and set(data) == {"version", "pg_config", "comm_lib_version", "pg_status",
                                                           "entries"}
        assert [e["profiling_name"] for e in data["entries"]] == ["gloo:all_reduce"] * 3 + ["gloo:broadcast"]
