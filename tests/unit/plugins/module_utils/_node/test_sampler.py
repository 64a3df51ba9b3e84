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
from tests.unit.conftest import FIXTURES

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
