# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Step lines for the job report: which of the lines the ranks printed (time-stamped on the node by
_node.sampler's tee) are training steps, with the step number and the loss.

``train_step_pattern`` (a regex with the named group ``step`` and optionally ``loss``) replaces the
built-in patterns, which know the bundled smoke job, DeepSpeed's engine and throughput timer, and the
Hugging Face Trainer's log dict (recorded from real runs: tests/fixtures/report/logs/, README there).

- DeepSpeed prints its ``step=N, skipped=`` and throughput-timer lines at INFO, which a rank shows only with
  ``"log_level": "info"`` in the DeepSpeed config (its logger stays at WARNING otherwise; the
  ``time (ms) | ... step: ...`` breakdown lines are not steps). ``deepspeed.initialize`` itself prints
  ``step=0``: not a training step, left out.
- The Trainer's dict carries no step: its lines are counted (1, 2, ..., one per ``logging_steps``). Newer
  releases print the numbers as strings (``'loss': '3.903'``, ``'epoch': '1'``) and may put keys after
  ``epoch`` (``num_input_tokens_seen``); the run's summary (``{'train_runtime': ...}``) is not a step.
- A line is what the tee cut on "\\n"; tqdm's bars move with "\\r", so one line can hold many updates (and,
  where stdout and stderr share a file, the bars and then a log dict). A line is matched "\\r" segment by
  segment, last first: its step is the latest one it shows, and a pattern anchored with ``^`` works.
"""
from __future__ import annotations

import math
import re

BUILTIN = (
    ("smoke", r"smoke: rank=\d+ step=(?P<step>\d+)(?: loss=(?P<loss>\S+))?"),
    ("deepspeed", r"\bstep=(?P<step>[1-9]\d*), skipped=\d+"),
    ("deepspeed_timer", r"global_step=(?P<step>\d+), RunningAvgSamplesPerSec"),
    ("hf_trainer", r"\{'loss': '?(?P<loss>[-+0-9.eE]+|[-+]?nan|[-+]?inf)'?, [^{}]*'epoch': '?[0-9.]+'?[,}]"),
)


def compile_patterns(pattern=None):
    """[(name, compiled)]: the user's pattern alone, or the built-in ones. A bad pattern raises re.error."""
    if pattern:
        return [("train_step_pattern", re.compile(pattern))]
    return [(name, re.compile(text)) for name, text in BUILTIN]


def pattern_problem(pattern):
    """Why ``pattern`` cannot be train_step_pattern, or None (validate's rule)."""
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        return "does not compile: %s" % exc
    if "step" not in compiled.groupindex:
        return "has no named group (?P<step>...)"
    return None


def _number(text):
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def match(line, patterns):
    """(name, step or None, loss or None) of the first pattern that matches the last "\\r" segment of ``line``
    that any matches, or None."""
    for segment in reversed(line.split("\r")):
        for name, regex in patterns:
            found = regex.search(segment)
            if found:
                groups = found.groupdict()
                step = groups.get("step")
                return name, int(step) if step is not None else None, _number(groups.get("loss"))
    return None


def steps(lines, patterns):
    """Line records ({t, text}) in time order -> [{t, step, loss}]; a pattern without a step counts its lines."""
    out, counted = [], {}
    for record in sorted(lines, key=lambda r: r.get("t", 0)):
        found = match(record.get("text", ""), patterns)
        if found is None:
            continue
        name, step, loss = found
        if step is None:
            counted[name] = counted.get(name, 0) + 1
            step = counted[name]
        out.append({"t": record["t"], "step": step, "loss": loss})
    return out
