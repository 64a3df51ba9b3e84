#!/usr/bin/python
# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# The work is done by the action plugin plugins/action/train_job_report.py on the controller.
from __future__ import annotations

DOCUMENTATION = r"""
---
module: train_job_report
short_description: Write a training job's report as one self-contained HTML page
version_added: 0.2.0
description:
  - Reads the job directories collected under O(run_dir) (C(<train_runs_dir>/<job id>/<host>/)) - the ranks'
    starts and exits, the per-rank samples and step lines - and writes O(dest) - a timeline per node and rank
    with the first failure marked, time per step per node with the median and the stragglers named, global rank 0's
    loss, CPU and memory per rank, and a header with the command, world size and the fabric check
    (C(fabric.json) of the run directory, when present).
  - Plots are inline SVG drawn with matplotlib; the page loads nothing from elsewhere.
  - An action; it runs on the controller only.
author:
  - multinode.training maintainers (@multinode)
options:
  run_dir:
    description: The job's directory on the controller, one subdirectory per node.
    type: path
    required: true
  hosts:
    description: The job's nodes in order; one without a directory is listed as lost.
    type: list
    elements: str
    default: []
  pattern:
    description:
      - A regular expression with the named group C(step) and optionally C(loss) that finds step lines in the ranks'
        output; empty - the built-in ones (the smoke job, DeepSpeed, the Hugging Face Trainer).
    type: str
    default: ""
  ratio:
    description:
      - A node that costs the other nodes over 1 - 1/O(ratio) of their time per collective, waiting for it (torch's
        flight recorder, its ratio to the median beside it; without it, a node whose time per step is over O(ratio)
        times the nodes' median) is a straggler (over 1).
    type: float
    default: 1.2
  header:
    description: More rows for the header (name to value).
    type: dict
    default: {}
  dest:
    description: The report's path; empty - C(<run_dir>/report.html).
    type: path
    default: ""
  elastic_lost:
    description:
      - Nodes an elastic job (C(--nnodes MIN:MAX)) finished without (filter
        P(multinode.training.train_elastic_lost#filter)); a warning names them.
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - multinode.training.attributes
  - multinode.training.attributes.platform
attributes:
  check_mode:
    support: none
    details: Writes the report; in check mode the action does not run.
  diff_mode:
    support: none
    details: Shows no diff.
  idempotent:
    support: none
    details: Writes the report again and reports a change on every run.
  platform:
    support: full
    platforms: posix
    details: Runs on the controller.
notes:
  - A node's time per step is the CPU time plus run-queue wait of its ranks per step where the samples have it (in a
    synchronous job every node prints its steps at the slow node's pace), else the wall time between step lines.
"""

EXAMPLES = r"""
- name: Report | write the job's HTML report
  multinode.training.train_job_report:
    run_dir: "{{ train_runs_dir }}/{{ _train_job_id }}"
    hosts: "{{ ansible_play_hosts_all }}"
  run_once: true
"""

RETURN = r"""
path:
  description: The report's path.
  returned: success
  type: str
size:
  description: The report's size in bytes.
  returned: success
  type: int
straggler_line:
  description: The straggler verdict in one line.
  returned: success
  type: str
  sample: "straggler: node2 1.86x the median time per collective not spent waiting for other ranks 0.232 s (ratio > 1.2)"
stragglers:
  description: The stragglers with their ratios.
  returned: success
  type: list
  elements: dict
failure_line:
  description: The first failure (rank, node, exit code, error line), empty when no rank failed.
  returned: success
  type: str
sampler_cost:
  description: The sampler's own CPU seconds per node per minute.
  returned: success
  type: dict
lost:
  description: Nodes of O(hosts) without a directory.
  returned: success
  type: list
  elements: str
"""
