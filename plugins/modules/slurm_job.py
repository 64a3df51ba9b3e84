#!/usr/bin/python
# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: slurm_job
short_description: Submit a multi-node torchrun job to Slurm, watch it, cancel it, read its per-rank results
version_added: 0.2.0
description:
  - Runs on a Slurm submit (login) host. O(state=submitted) checks the request against the cluster
    (C(sinfo) - the partition exists, has enough usable nodes, has the GPUs asked for), renders ONE batch
    script (a preflight step and one torchrun per node through C(srun --kill-on-bad-exit=1), rendezvous on
    the allocation's first node at its address on O(interface), rendezvous id C(slurm-<job id>)) and
    submits it with C(sbatch). Nothing is submitted when a check fails.
  - It also starts a guard on the submit host that cancels the job (C(scancel)) when the controller stops
    polling for O(controller_timeout) seconds, so an interrupted C(ansible-playbook) leaves nothing queued
    or running.
  - O(state=status) waits up to O(wait) seconds for the job to end and returns its state, nodes and
    elapsed time; past O(timeout) seconds since submission it cancels the job. Once the job has ended it
    reads every node's job directory (shared storage) with the torchrun module's code and returns the
    per-rank results and the root cause, naming node and rank.
  - O(state=cancelled) cancels the job and waits until it has left the queue.
  - The job directory O(job_base)/<job id>/ holds C(job.sbatch), C(batch.log), C(preflight.json) and one
    directory per node laid out like the torchrun module's (C(torchrun.log), C(result.json), C(ranks/)).
author:
  - multinode.training maintainers (@multinode)
options:
  state:
    description: V(submitted), V(status) or V(cancelled) (see description).
    type: str
    choices: [submitted, status, cancelled]
    default: status
  job_id:
    description: Slurm job id, for O(state=status) and O(state=cancelled).
    type: str
  job_base:
    description:
      - Directory holding one directory per job; it must be on storage that the submit host and every
        compute node share (the nodes write their logs there).
    type: path
    required: true
  bin_dir:
    description:
      - Shared directory holding C(slurm_node.py) (the train role copies it); the module writes beside it,
        from its own source, what that file imports or runs (C(_preflight.py), C(env_probe.py), C(_torchrun.py),
        C(supervisor.py), the rank wrapper and, with O(fabric_check), the probe C(fabric_probe.py)).
    type: path
  partition:
    description: Partition (C(--partition)); empty for the cluster's default partition.
    type: str
    default: ''
  account:
    description: Account (C(--account)).
    type: str
    default: ''
  gres:
    description: Generic resources per node (C(--gres)), for example V(gpu:8) or V(gpu:a100:8).
    type: str
    default: ''
  gpus_per_node:
    description: GPUs per node; shorthand for O(gres=gpu:N). Mutually exclusive with O(gres).
    type: int
    default: 0
  time:
    description: Slurm time limit (C(--time)), for example V(2:00:00).
    type: str
    default: ''
  constraint:
    description: Node features (C(--constraint)).
    type: str
    default: ''
  extra_args:
    description: Further sbatch options, one per item (for example V(--exclusive), V(--comment=run-42)).
    type: list
    elements: str
    default: []
  job_name:
    description: Slurm job name.
    type: str
    default: multinode-training
  nnodes:
    description: Node count V(N) or an elastic range V(MIN:MAX) (C(--nodes=MIN-MAX)). Required to submit.
    type: str
    default: ''
  nproc_per_node:
    description: Processes per node; V(auto) = the GPUs asked for, else the partition's GPUs per node, else O(cpu_nproc).
    type: str
    default: auto
  cpu_nproc:
    description: Processes per node for V(auto) without GPUs.
    type: int
    default: 2
  script:
    description: Training script on the nodes. Mutually exclusive with O(module).
    type: path
  module:
    description: Python module to run instead (C(python -m)).
    type: str
  args:
    description: Script arguments, a list; each item reaches the script as one argument, verbatim.
    type: list
    elements: str
    default: []
  python:
    description: Python of the venv on the nodes (runs torchrun).
    type: path
    default: /opt/multinode-training/venv/bin/python
  system_python:
    description: Python on the nodes that runs the preflight (it must work where the venv is missing).
    type: path
    default: /usr/bin/python3
  rdzv_backend:
    description: torchrun rendezvous backend.
    type: str
    default: c10d
  rdzv_port:
    description: Rendezvous port on the first node of the allocation.
    type: int
    default: 29400
  rdzv_conf:
    description: Rendezvous configuration (C(is_host) is set per node).
    type: dict
    default: {}
  max_restarts:
    description: torchrun C(--max_restarts).
    type: int
    default: 0
  interface:
    description: Interface whose address is the rendezvous endpoint and each node's advertised address; empty for the default route's.
    type: str
    default: ''
  ip_version:
    description: V(4) or V(6).
    type: int
    choices: [4, 6]
    default: 4
  env:
    description:
      - Job environment, handed to sbatch (C(--export=ALL) passes it to the batch script and every step); never
        written to the job files. Values of keys with TOKEN, KEY, SECRET, PASSWORD are masked.
    type: dict
    default: {}
  env_files:
    description: C(KEY=VALUE) files on the nodes added to the job's environment (for example the NCCL file).
    type: list
    elements: path
    default: []
  chdir:
    description: Working directory of the job on the nodes; empty for the node's job directory.
    type: path
  preflight:
    description:
      - What the in-job preflight checks on every node besides O(python) and O(script), with the ssh launcher's
        code and messages (C(_preflight.py) in O(bin_dir)); the batch script writes it, with those two, into
        C(<job dir>/preflight_spec.json) before the preflight step.
    type: dict
    default: {}
    suboptions:
      venv:
        description: train_venv, for messages.
        type: str
        default: /opt/multinode-training/venv
      chdir:
        description: The working directory every node must have (train_chdir); unset - O(chdir), empty - none.
        type: str
      require_deepspeed:
        description: DeepSpeed must be installed in the job's python.
        type: bool
        default: true
      deepspeed_config:
        description:
          - The job's DeepSpeed config as the controller read it (filter
            P(multinode.training.train_deepspeed_config#filter)); the ops it makes DeepSpeed load must be
            prebuilt in the first node's environment.
        type: dict
        default: {}
      allow_jit:
        description: Let DeepSpeed JIT-compile the ops the config needs and the environment lacks.
        type: bool
        default: false
      env_files:
        description:
          - The env files every node must have, each C({var, path}) (C(var) names the variable in messages);
            empty - O(env_files) named as train_env_files.
        type: list
        elements: dict
        default: []
      code:
        description:
          - C({dest, manifest}) - every node's view of the code directory C(dest) must be the controller's
            train_code_src (C(manifest), filter P(multinode.training.code_manifest#filter)).
        type: dict
      lock:
        description:
          - The lock of the job requirements (C(name==version) of every package, wheel_distribute's
            C(wheel_distribute_lock)); every node's venv must hold exactly it. Empty - not checked.
        type: list
        elements: str
        default: []
  tee:
    description: Also copy every rank's output into C(torchrun.log).
    type: bool
    default: false
  timeout:
    description:
      - Seconds from submission (queue time included) after which O(state=status) cancels the job; V(0) no limit.
        The same value is torchrun's timeout on the nodes.
    type: int
    default: 0
  stop_grace:
    description: Seconds between SIGTERM and SIGKILL on the nodes.
    type: int
    default: 15
  follow:
    description:
      - With O(state=status), keep polling (every O(wait) seconds) until the job has left the queue, printing
        its state, nodes and elapsed time on the controller after each poll (the action plugin does the loop).
    type: bool
    default: false
  stream_ranks:
    description:
      - With O(follow), the output of these global ranks (their C(stdout.log), then their C(stderr.log), read from the
        shared job directory) reaches the controller while the job runs, each line printed as C(<node>:<rank> <line>);
        a poll ends about 5 s after they printed. A list of global ranks, or V(all). Empty - none.
    type: list
    elements: str
    default: []
  stream_offsets:
    description:
      - Set by the action for each poll (leave it unset) - where the last poll left off in each streamed rank log
        (C(<node>/<attempt>/<local rank>/<stdout|stderr>) to a byte offset).
    type: dict
    default: {}
  wait:
    description: Seconds O(state=status) waits for the job to end before it returns the current state.
    type: int
    default: 10
  poll_slack:
    description:
      - With O(follow), how long a poll may take beyond O(wait) before the submit host counts as not answering
        (frozen, or the module stuck on it) - the wait fails naming it.
    type: int
    default: 300
  controller_timeout:
    description: Seconds without a poll from the controller after which the guard cancels the job.
    type: int
    default: 120
  tail_lines:
    description: Lines of the failing rank's log returned.
    type: int
    default: 30
  fabric_check:
    description:
      - The preflight fabric check (train_fabric_check) as a step of the batch script between the preflight
        and torchrun - one probe per node (C(fabric_probe.py), which the module writes into O(bin_dir), with
        the job's python, interface, env files and rendezvous port), then the verdict on the batch host
        (C(_fabric_verdict.py), the ssh launcher's code), written to C(<job dir>/fabric.json). V(warn) goes on; V(gate) fails the job before
        torchrun, or with an elastic O(nnodes) leaves the slow nodes out (srun C(--nodelist)).
    type: str
    default: "off"
    choices: ["off", "warn", "gate"]
  fabric_ratio:
    description: A link or node below this fraction of the median is slow (train_fabric_ratio).
    type: float
    default: 0.8
  fabric_min_gbps:
    description: A link below this many Gbit/s is slow; V(0) - none (train_fabric_min_gbps).
    type: float
    default: 0
  fabric_line_ratio:
    description: >-
      A link or the all_reduce below this fraction of the line rate is slow; V(0) - off
      (train_fabric_line_ratio).
    type: float
    default: 0.25
  fabric_seconds:
    description: Seconds per measurement of the fabric probe (each link, the all_reduce, the matmul).
    type: float
    default: 0.5
extends_documentation_fragment:
  - multinode.training.attributes
  - multinode.training.attributes.action
  - multinode.training.attributes.platform
  - multinode.training.progress
  - multinode.training.local_rank
attributes:
  action:
    support: full
    details: O(follow) is the action plugin's loop.
  check_mode:
    support: partial
    details: V(submitted) runs the checks and renders the script without submitting; the other states only read.
  diff_mode:
    support: none
  idempotent:
    support: partial
    details: Submitting is not idempotent (every call is a new job); cancelling a job that is gone changes nothing.
  platform:
    support: full
    platforms: posix
notes:
  - Needs C(sinfo), C(sbatch), C(squeue), C(scontrol) and C(scancel) on the host (a Slurm submit host).
seealso:
  - module: multinode.training.torchrun
  - name: sbatch
    description: Slurm's batch submission.
    link: https://slurm.schedmd.com/sbatch.html
"""

EXAMPLES = r"""
- name: Submit
  multinode.training.slurm_job:
    state: submitted
    job_base: /shared/multinode-training/jobs
    bin_dir: /shared/multinode-training/bin
    partition: gpu
    gpus_per_node: 8
    nnodes: 2
    script: /shared/code/train.py
    args: ["--config", "run 1.yaml"]
    timeout: 7200
  register: submitted

- name: Wait until it has left the queue (state, nodes, elapsed printed every 10 s)
  multinode.training.slurm_job:
    state: status
    follow: true
    wait: 10
    job_id: "{{ submitted.job_id }}"
    job_base: /shared/multinode-training/jobs
    timeout: 7200
  register: job

- name: Cancel
  multinode.training.slurm_job:
    state: cancelled
    job_id: "{{ submitted.job_id }}"
    job_base: /shared/multinode-training/jobs
"""

RETURN = r"""
job_id:
  description: Slurm job id.
  returned: always
  type: str
  sample: "42"
job_dir:
  description: The job's directory (shared storage).
  returned: always
  type: str
script:
  description: The batch script that was (or, in check mode, would be) submitted.
  returned: state is submitted
  type: str
cmd:
  description: The sbatch argv.
  returned: state is submitted
  type: list
  elements: str
partition:
  description: The partition used.
  returned: state is submitted
  type: str
nproc_per_node:
  description: Processes per node.
  returned: state is submitted
  type: int
state:
  description: Slurm job state (PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, ...).
  returned: state is status or cancelled
  type: str
nodes:
  description: The allocation's nodes, expanded.
  returned: state is status
  type: list
  elements: str
elapsed:
  description: Slurm's run time of the job.
  returned: state is status
  type: str
progress:
  description: One line - job id, state (and reason), nodes, elapsed.
  returned: state is status
  type: str
live:
  description: Per node, the latest samples of its ranks (as the torchrun module's RV(live)), for the progress lines.
  returned: state is status, while the job is in the queue
  type: dict
stream:
  description:
    - The lines the ranks of O(stream_ranks) printed since O(stream_offsets), as C([node, global rank, line]); the
      action prints them and drops them from the task's result.
  returned: state is status, with O(stream_ranks)
  type: list
  elements: list
stream_offsets:
  description: Where this poll left off in each streamed rank log, for the next poll's O(stream_offsets).
  returned: state is status, with O(stream_ranks)
  type: dict
done:
  description: Whether the job has left the queue.
  returned: state is status
  type: bool
job_failed:
  description: Whether the job failed (preflight, a rank, a timeout or a cancel).
  returned: state is status and done
  type: bool
node_results:
  description: Per node - rc, duration, world size, ranks, failures (as the torchrun module returns them for one node).
  returned: state is status and done
  type: dict
root_cause:
  description: The first first-hand failure across all nodes, with C(node).
  returned: state is status and the job failed
  type: dict
root_cause_line:
  description: C(rank R (local_rank L) on NODE exited C - error), or the preflight or Slurm error.
  returned: state is status and the job failed
  type: str
world_size:
  description: World size from the rendezvous torchrun logged.
  returned: state is status and done
  type: int
lines:
  description: Summary, one line per node.
  returned: state is status and done
  type: list
  elements: str
rank0_stdout:
  description: Global rank 0's stdout.log, relative to the job directory.
  returned: state is status and done
  type: str
timings:
  description:
    - C(submit_to_first_rank) seconds from sbatch to the first rank's start, C(failure_to_end) seconds from the
      root-cause error to the job's end as seen by this module.
  returned: state is status and done
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.multinode.training.plugins.module_utils._launch.slurm_job import (
    ARGUMENT_SPEC,
    MUTUALLY_EXCLUSIVE,
    REQUIRED_IF,
    run_module,
)


def main():
    run_module(AnsibleModule(argument_spec=ARGUMENT_SPEC, mutually_exclusive=MUTUALLY_EXCLUSIVE,
                             required_if=REQUIRED_IF, supports_check_mode=True))


if __name__ == "__main__":
    main()
