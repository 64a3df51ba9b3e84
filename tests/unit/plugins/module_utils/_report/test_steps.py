"""Step lines: the built-in patterns on recorded logs (tests/fixtures/report/logs/), a user pattern, the
validate rule's pattern check."""
from __future__ import annotations

import pytest

from ansible_collections.multinode.training.plugins.module_utils._report import steps
from tests.unit.conftest import FIXTURES

LOGS = FIXTURES / "report" / "logs"


def _records(name):
    return [{"t": float(n), "text": line} for n, line in enumerate((LOGS / name).read_text().splitlines())]


def test_smoke_job_steps_and_loss():
    found = steps.steps(_records("smoke.log"), steps.compile_patterns())
    assert [s["step"] for s in found] == list(range(1, 13))
    assert found[0]["loss"] == pytest.approx(12.946398)
    assert found[-1]["loss"] < found[0]["loss"]


def test_deepspeed_engine_and_timer_lines():
    found = steps.steps(_records("deepspeed.log"), steps.compile_patterns())
    assert [s["step"] for s in found] == [2, 2, 4, 4, 6]
    assert all(s["loss"] is None for s in found)


def test_hf_trainer_dicts_are_counted_and_the_summary_is_not_a_step():
    found = steps.steps(_records("hf_trainer.log"), steps.compile_patterns())
    assert [(s["step"], s["loss"]) for s in found] == [(1, 2.3026), (2, 1.9871), (3, 1.7402)]


def test_user_pattern_replaces_the_builtin_ones():
    patterns = steps.compile_patterns(r"iter (?P<step>\d+) .*loss (?P<loss>\S+)")
    lines = [{"t": 1.0, "text": "iter 7 | loss 0.5"}, {"t": 2.0, "text": "smoke: rank=0 step=3 loss=1.0"}]
    assert steps.steps(lines, patterns) == [{"t": 1.0, "step": 7, "loss": 0.5}]


def test_a_non_finite_loss_is_left_out_not_plotted():
    assert steps.match("smoke: rank=0 step=3 loss=nan", steps.compile_patterns()) == ("smoke", 3, None)


@pytest.mark.parametrize("pattern, problem", [
    (r"step=(?P<step>\d+", "does not compile"),
    (r"step=(\d+)", "no named group"),
    (r"step=(?P<step>\d+)", None),
])
def test_pattern_problem(pattern, problem):
    found = steps.pattern_problem(pattern)
    assert (found is None) if problem is None else (problem in found)
