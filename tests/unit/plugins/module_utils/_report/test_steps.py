"""Step lines: the built-in patterns on logs recorded from real runs (tests/fixtures/report/logs/, see the
README there), replayed through the rank's tee as a job would record them; a user pattern; "\\r" segments;
the validate rule's pattern check."""
from __future__ import annotations

import gzip
import io

import pytest

from ansible_collections.multinode.training.plugins.module_utils._node import sampler
from ansible_collections.multinode.training.plugins.module_utils._report import steps
from tests.unit.conftest import FIXTURES

LOGS = FIXTURES / "report" / "logs"
HF_LOSSES = [3.903, 3.903, 3.913, 3.893, 3.849, 3.818, 3.835, 3.852, 3.843, 3.829]


def _records(name):
    """The line records the rank's tee keeps of the log (cut on "\\n" only, candidate lines, the last
    MAX_LINE characters), time-stamped 0, 1, 2, ... in order; no gap between kept lines (this replays the log's
    lines, not their timing). A log that holds "\\r" (tqdm's) is stored
    gzipped: ansible-test's line-endings check refuses a text file with any "\\r"."""
    out = []
    tee = sampler.Tee(io.StringIO(), lambda record: out.append(dict(record, t=float(len(out)))), "stdout", gap=0)
    path = LOGS / name
    data = gzip.decompress((LOGS / (name + ".gz")).read_bytes()) if not path.exists() else path.read_bytes()
    tee.write(data.decode("utf-8"))  # bytes as recorded: no newline translation, the "\\r"s kept
    return out


def _steps(name, pattern=None):
    return steps.steps(_records(name), steps.compile_patterns(pattern))


def test_smoke_job_steps_and_loss():
    found = _steps("smoke.log")
    assert [s["step"] for s in found] == list(range(1, 13))
    assert found[0]["loss"] == pytest.approx(12.946398)
    assert found[-1]["loss"] < found[0]["loss"]


def test_deepspeed_engine_and_timer_lines():
    # steps_per_print 2, 30 steps: the engine's step=2, 4, ... 30, the throughput timer's global_step=4 ... 30
    # (it starts counting after step 2); initialize's step=0 and the config dump's lines are not steps
    found = _steps("deepspeed.log")
    assert [s["step"] for s in found] == [2] + sorted(list(range(4, 31, 2)) * 2)
    assert all(s["loss"] is None for s in found)
    names = [steps.match(r["text"], steps.compile_patterns())[0] for r in _records("deepspeed.log")
             if steps.match(r["text"], steps.compile_patterns())]
    assert names.count("deepspeed") == 15 and names.count("deepspeed_timer") == 14


def test_deepspeed_initialize_step_zero_is_not_a_step():
    lines = [r["text"] for r in _records("deepspeed.log") if "step=0, skipped=0" in r["text"]]
    assert len(lines) == 1 and steps.match(lines[0], steps.compile_patterns()) is None


def test_deepspeed_at_its_default_log_level_prints_no_step_line():
    # the logger stays at WARNING: only the wall_clock_breakdown "time (ms)" lines (they name "step") and
    # the script's own prints reach the tee, none of them a built-in step
    records = _records("deepspeed_default_level.log")
    assert len([r for r in records if "time (ms)" in r["text"]]) == 60
    assert _steps("deepspeed_default_level.log") == []


@pytest.mark.parametrize("name", ["deepspeed.log", "deepspeed_default_level.log"])
def test_user_pattern_on_the_training_scripts_own_lines(name):
    found = _steps(name, r"^iter (?P<step>\d+) loss (?P<loss>\S+)")
    assert [s["step"] for s in found] == list(range(1, 31))
    assert (found[0]["loss"], found[-1]["loss"]) == (16.4323, 2.9616)


@pytest.mark.parametrize("name", ["hf_trainer.log", "hf_trainer_no_tqdm.log", "hf_trainer_tokens.log"])
def test_hf_trainer_dicts_are_counted_and_the_summary_is_not_a_step(name):
    # logging_steps 2, 20 steps: ten dicts (numbers as strings), counted 1..10; then the summary dict
    found = _steps(name)
    assert [s["step"] for s in found] == list(range(1, 11))
    assert [s["loss"] for s in found] == HF_LOSSES


def test_hf_trainer_with_its_logging_defaults_has_only_the_summary():
    # logging_steps 500 > 20 steps: nothing but {'train_runtime': ..., 'train_loss': ...}
    records = _records("hf_trainer_logging_defaults.log")
    assert any("'train_loss': '3.864'" in r["text"] for r in records)
    assert _steps("hf_trainer_logging_defaults.log") == []


def test_hf_trainer_keys_after_epoch():
    line = next(r["text"] for r in _records("hf_trainer_tokens.log") if r["text"].startswith("{'loss'"))
    assert "'epoch': '0.25', 'num_input_tokens_seen': 128," in line
    assert steps.match(line, steps.compile_patterns()) == ("hf_trainer", None, 3.903)


def test_hf_trainer_numbers_not_strings():
    # releases before the log dict's floats were formatted as strings (the hand-written fixture's form)
    line = "{'loss': 2.3026, 'grad_norm': 1.8437, 'learning_rate': 4.5e-05, 'epoch': 0.33}"
    assert steps.match(line, steps.compile_patterns()) == ("hf_trainer", None, 2.3026)
    summary = "{'train_runtime': 12.3456, 'train_steps_per_second': 2.43, 'train_loss': 2.0099, 'epoch': 1.0}"
    assert steps.match(summary, steps.compile_patterns()) is None


def test_tqdm_bars_and_a_dict_share_one_line():
    # stdout and stderr in one file: the bars' "\r" updates, tqdm.write's clearing, then the dict
    records = _records("hf_trainer.log")
    shared = [r["text"] for r in records if "\r" in r["text"] and "{'loss'" in r["text"]]
    assert len(shared) == 10
    assert "16/20" in shared[8] and "18/20" in shared[8] and shared[8].endswith("'epoch': '2.25'}")
    assert steps.match(shared[8], steps.compile_patterns()) == ("hf_trainer", None, 3.843)


def test_the_last_carriage_return_segment_with_a_step_wins():
    progress = "\r 10%|#         | 2/20 [00:01<00:09, loss=3.9]\r 15%|#5        | 3/20 [00:01<00:08, loss=3.8]\r   "
    patterns = steps.compile_patterns(r"^ *\d+%\|.*\| (?P<step>\d+)/\d+ .*loss=(?P<loss>[0-9.]+)")
    assert steps.match(progress, patterns) == ("train_step_pattern", 3, 3.8)
    ds = "[2026-11-26 01:45:42,491] [INFO] [logging.py:123:log_dist] [Rank 0] step=2, skipped=0, lr=[0.05], mom=[0]"
    assert steps.match(ds + "\r" + ds.replace("step=2,", "step=4,"), steps.compile_patterns())[1] == 4
    assert steps.match(ds + "\r  5%|5         | 1/20", steps.compile_patterns())[1] == 2


def test_user_pattern_replaces_the_builtin_ones():
    patterns = steps.compile_patterns(r"iter (?P<step>\d+) .*loss (?P<loss>\S+)")
    lines = [{"t": 1.0, "text": "iter 7 | loss 0.5"}, {"t": 2.0, "text": "smoke: rank=0 step=3 loss=1.0"}]
    assert steps.steps(lines, patterns) == [{"t": 1.0, "step": 7, "loss": 0.5}]


def test_a_non_finite_loss_is_left_out_not_plotted():
    assert steps.match("smoke: rank=0 step=3 loss=nan", steps.compile_patterns()) == ("smoke", 3, None)
    line = "{'loss': '-inf', 'grad_norm': 'nan', 'learning_rate': '0.001', 'epoch': '0.5'}"
    assert steps.match(line, steps.compile_patterns()) == ("hf_trainer", None, None)


@pytest.mark.parametrize("pattern, problem", [
    (r"step=(?P<step>\d+", "does not compile"),
    (r"step=(\d+)", "no named group"),
    (r"step=(?P<step>\d+)", None),
])
def test_pattern_problem(pattern, problem):
    found = steps.pattern_problem(pattern)
    assert (found is None) if problem is None else (problem in found)
