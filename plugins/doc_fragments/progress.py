# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The followed wait's progress options, shared by the launch modules (torchrun, slurm_job)."""
from __future__ import annotations


class ModuleDocFragment:
    # The live part of a followed wait's progress lines (_torchrun.live, whose PROGRESS_SPEC is these
    # options' argument spec in both modules): the nodes' latest step and the slowest node so far, by the
    # job report's rules (_report.steps, _report.straggler).
    DOCUMENTATION = r"""
options:
  step_pattern:
    description:
      - With O(follow), the progress lines add each node's latest step and loss and the slowest node so far
        (its CPU plus run-queue wait per step against the median, from the job report's samples of its ranks);
        this is the regular expression (named group C(step), optionally C(loss)) that finds the step lines.
        Empty - the job report's built-in patterns (the bundled smoke job, DeepSpeed, the Hugging Face Trainer).
      - Role C(train) passes C(train_step_pattern).
    type: str
    default: ""
  straggler_ratio:
    description:
      - With O(follow), the progress lines name the slowest node so far only when it costs the other nodes over
        1 - 1/this of their time per collective, waiting for it (torch's flight recorder; without it, when its CPU
        plus run-queue wait per step is over this many times the nodes' median), the job report's straggler rule.
      - Role C(train) passes C(train_straggler_ratio).
    type: float
    default: 1.2
"""
