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
      - Shared directory holding C(slurm_node.py), C(env_probe.py) and C(_node/torchrun.py) (the train role copies
        them); the module adds C(supervisor.py).
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
  wait:
    description: Seconds O(state=status) waits for the job to end before it returns the current state.
    type: int
    default: 10
  controller_timeout:
    description: Seconds without a poll from the controller after which the guard cancels the job.
    type: int
    default: 120
  tail_lines:
    description: Lines of the failing rank's log returned.
    type: int
    default: 30
attributes:
  action:
    description: Indicates this has a corresponding action plugin so some parts of the options can be executed on the controller.
    support: full
    details: O(follow) is the action plugin's loop.
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: partial
    details: V(submitted) runs the checks and renders the script without submitting; the other states only read.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
  idempotent:
    description: Whether the module changes nothing when run twice.
    support: partial
    details: Submitting is not idempotent (every call is a new job); cancelling a job that is gone changes nothing.
  platform:
    description: Target OS/families that can be operated against.
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

import json
import os
import shutil
import socket
import sys
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.multinode.training.plugins.module_utils._launch.slurm import (
    FINAL_STATES,
    SINFO_FORMAT,
    SlurmError,
    check_request,
    default_partition,
    expand_hostlist,
    gres_request,
    parse_job,
    parse_sbatch,
    parse_sinfo,
    render_batch_script,
    resolve_nproc,
    srun_failures,
)
from ansible_collections.multinode.training.plugins.module_utils._node.torchrun import (
    TorchrunError,
    format_rdzv_conf,
    mask,
    parse_nnodes,
    pick_root_cause,
    secret_values,
)
from ansible_collections.multinode.training.plugins.module_utils._torchrun.collect import (
    collect,
    rank_dirs,
    read_json,
    read_text,
)
from ansible_collections.multinode.training.plugins.module_utils._torchrun.proc import supervisor_source


def run(module, argv, check=True, env=None):
    rc, out, err = module.run_command(argv, environ_update=env)
    if check and rc != 0:
        module.fail_json(msg="%s failed (rc %d) on %s: %s" % (" ".join(argv), rc, socket.gethostname(),
                                                              (err or out).strip()), cmd=argv)
    return rc, out, err


def write_file(path, text, mode=0o644):
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "w") as handle:
        handle.write(text)
    os.chmod(tmp, mode)
    os.rename(tmp, path)


def job_info(module, job_id):
    rc, out, _err = run(module, ["scontrol", "show", "job", "-o", job_id], check=False)
    return parse_job(out) if rc == 0 else None


def in_queue(module, job_id):
    rc, out, _err = run(module, ["squeue", "-h", "-j", job_id, "-o", "%T"], check=False)
    return rc == 0 and bool(out.strip())


def cancel(module, job_id, grace):
    """scancel, then wait until the job has left the queue; returns seconds it took."""
    start = time.time()
    run(module, ["scancel", job_id], check=False)
    deadline = start + grace + 90
    while in_queue(module, job_id) and time.time() < deadline:
        time.sleep(0.5)
    if in_queue(module, job_id):
        module.fail_json(msg="job %s is still in the queue %ds after scancel" % (job_id, time.time() - start),
                         job_id=job_id)
    return round(time.time() - start, 3)


def submit(module):
    p = module.params
    host = socket.gethostname()
    secrets = secret_values(p["env"])
    for value in secrets:
        module.no_log_values.add(value)
    try:
        if not (p["script"] or p["module"]):
            raise SlurmError("train_script / train_module: one is required")
        gres, gpus = gres_request(p["gres"], p["gpus_per_node"])
        _rc, sinfo, _err = run(module, ["sinfo", "-h", "-N", "-o", SINFO_FORMAT])
        _rc, parts, _err = run(module, ["scontrol", "show", "partition", "-o"])
        partitions = parse_sinfo(sinfo)
        partition = check_request(partitions, p["partition"], p["nnodes"], gpus, default_partition(parts))
        nproc = resolve_nproc(p["nproc_per_node"], gpus, partitions[partition]["gpus_per_node"], p["cpu_nproc"])
        low, high = parse_nnodes(p["nnodes"])  # valid: check_request parsed it
        spec = dict(p, nodes=(low, high), gres=gres, nproc_per_node=nproc,
                    rdzv_conf=format_rdzv_conf(p["rdzv_conf"]),
                    output=os.path.join(p["job_base"], "slurm-%j.out"))
        script = render_batch_script(spec)
    except (SlurmError, TorchrunError) as exc:
        module.fail_json(msg="%s (submit host %s)" % (exc, host), sinfo_partitions=sorted(
            locals().get("partitions") or {}))
    result = dict(changed=True, script=script, partition=partition, nproc_per_node=nproc)
    if module.check_mode:
        module.exit_json(**result)
    for path in ("slurm_node.py", "env_probe.py", "_node/torchrun.py"):
        if not os.path.isfile(os.path.join(p["bin_dir"], path)):
            module.fail_json(msg="bin_dir %s lacks %s (the train role copies it)" % (p["bin_dir"], path))
    write_file(os.path.join(p["bin_dir"], "supervisor.py"), supervisor_source())
    pending = os.path.join(p["job_base"], ".submit")
    if not os.path.isdir(pending):
        os.makedirs(pending)
    script_path = os.path.join(pending, "job-%d-%d.sbatch" % (int(time.time()), os.getpid()))
    write_file(script_path, script, 0o755)
    argv = [module.get_bin_path("sbatch", required=True), "--parsable", script_path]
    submitted = time.time()
    _rc, out, _err = run(module, argv, env={str(k): str(v) for k, v in p["env"].items()})
    job_id = parse_sbatch(out)
    job_dir = os.path.join(p["job_base"], job_id)
    if not os.path.isdir(job_dir):
        os.makedirs(job_dir)
    os.rename(script_path, os.path.join(job_dir, "job.sbatch"))
    heartbeat = os.path.join(job_dir, "controller.heartbeat")
    write_file(heartbeat, "%f\n" % time.time())
    write_file(os.path.join(job_dir, "submit.json"), json.dumps(
        {"job_id": job_id, "submitted": submitted, "host": host, "cmd": argv, "timeout": p["timeout"],
         "partition": partition, "nnodes": p["nnodes"], "nproc_per_node": nproc,
         "env": mask(sorted("%s=%s" % kv for kv in p["env"].items()), secrets)}, indent=1))
    # The guard outlives this module: a detached session, stdin /dev/null, output to its log.
    guard = [p["system_python"] if os.access(p["system_python"], os.X_OK) else sys.executable,
             os.path.join(p["bin_dir"], "slurm_node.py"), "guard", job_id, "--heartbeat", heartbeat,
             "--stale", str(p["controller_timeout"]), "--log", os.path.join(job_dir, "guard.log")]
    guard_log = os.path.join(job_dir, "guard.log")
    pid = os.posix_spawn(guard[0], guard, dict(os.environ), setsid=True, file_actions=[
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, guard_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644),
        (os.POSIX_SPAWN_DUP2, 1, 2),
    ])
    result.update(job_id=job_id, job_dir=job_dir, cmd=argv, guard_pid=pid)
    module.exit_json(**result)


def first_rank_start(job_dir, nodes):
    """Earliest start of a rank: mtime of the attempt directories torchrun creates when it spawns ranks."""
    times = []
    for node in nodes:
        for directory in rank_dirs(os.path.join(job_dir, node)).values():
            try:
                times.append(os.path.getmtime(os.path.dirname(directory)))
            except OSError:
                pass
    return min(times) if times else None


def results(module, job_id, job_dir, info, ended_at):
    """Every node's directory -> the torchrun module's per-node results, then one root cause."""
    p = module.params
    nodes = expand_hostlist(info.get("nodes") or "") if info else []
    batch_log = os.path.join(p["job_base"], "slurm-%s.out" % job_id)
    if os.path.exists(batch_log):
        shutil.move(batch_log, os.path.join(job_dir, "batch.log"))
    batch_text = read_text(os.path.join(job_dir, "batch.log"))
    per_node, failures = {}, []
    for node in nodes:
        node_dir = os.path.join(job_dir, node)
        job = read_json(os.path.join(node_dir, "job.json"))
        if job is None:
            continue
        data = read_json(os.path.join(node_dir, "result.json"))
        entry = collect(node_dir, job, data, p["tail_lines"], node)
        per_node[node] = entry
        failures += [dict(f, node=node) for f in entry["failures"]]
    preflight = read_json(os.path.join(job_dir, "preflight.json")) or {}
    state = (info or {}).get("state") or "UNKNOWN"
    failed = state != "COMPLETED" or any(r.get("rc") not in (0, None) for r in per_node.values())
    out = {"node_results": per_node, "job_failed": failed, "nodes": nodes, "state": state,
           "world_size": next((r["world_size"] for r in per_node.values() if r.get("world_size")), None)}
    root = pick_root_cause(failures)
    line = None
    if failed:
        if root:
            line = "rank %s (local_rank %s) on %s exited %s: %s" % (
                root.get("rank"), root.get("local_rank"), root["node"], root.get("exitcode"),
                root.get("message") or "no error message")
        elif preflight.get("errors"):
            line = "preflight: " + "; ".join(preflight["errors"])
        else:
            srun = srun_failures(batch_text)
            line = "; ".join("%s: task %s %s" % (f["node"], f["task"], f["what"]) for f in srun) or \
                "Slurm job state %s%s" % (state, " (%s)" % info["reason"] if info and info.get("reason") else "")
        out.update(root_cause=root, root_cause_line=line)
    rank0 = ""
    for node, entry in per_node.items():
        for rank in entry.get("ranks", []):
            if rank.get("rank") == 0 and rank.get("stdout"):
                rank0 = os.path.relpath(rank["stdout"], job_dir)
    submitted = (read_json(os.path.join(job_dir, "submit.json")) or {}).get("submitted")
    first = first_rank_start(job_dir, nodes)
    out["timings"] = {
        "submit_to_first_rank": round(first - submitted, 3) if first and submitted else None,
        "failure_to_end": round(ended_at - root["timestamp"], 3) if root and root.get("timestamp") else None,
    }
    lines = ["job %s: %s, world size %s on %d node(s), logs in %s" % (
        job_id, state, out["world_size"] or "unknown", len(nodes), job_dir)]
    for node in nodes:
        entry = per_node.get(node, {})
        lines.append("%s: rc %s, ranks %s, %s s%s" % (
            node, entry.get("rc"), ",".join(str(r["rank"]) for r in entry.get("ranks", []) if r.get("rank") is not None)
            or "-", entry.get("duration"), ", timed out" if entry.get("timed_out") else ""))
    timings = out["timings"]
    lines.append("submit to first rank %s s, failure to end %s s" % (
        timings["submit_to_first_rank"], timings["failure_to_end"]))
    if line:
        lines.append("root cause: " + line)
    out.update(lines=lines, rank0_stdout=rank0)
    return out


def status(module):
    p = module.params
    job_id = p["job_id"]
    job_dir = os.path.join(p["job_base"], job_id)
    heartbeat = os.path.join(job_dir, "controller.heartbeat")
    submitted = (read_json(os.path.join(job_dir, "submit.json")) or {}).get("submitted") or time.time()
    deadline = time.time() + max(p["wait"], 0)
    timed_out = False
    while True:
        if os.path.exists(heartbeat):
            os.utime(heartbeat, None)
        info = job_info(module, job_id)
        state = (info or {}).get("state")
        gone = info is None or (state in FINAL_STATES and not in_queue(module, job_id))
        if gone:
            break
        if p["timeout"] and time.time() - submitted > p["timeout"]:
            cancel(module, job_id, p["stop_grace"])
            timed_out = True
            info = job_info(module, job_id)
            break
        if time.time() >= deadline:
            progress = "job %s: %s%s, %s node(s) %s, elapsed %s" % (
                job_id, state, " (%s)" % info["reason"] if info.get("reason") else "",
                info.get("num_nodes"), info.get("nodes") or "-", info.get("elapsed"))
            module.exit_json(changed=False, job_id=job_id, job_dir=job_dir, state=state, done=False,
                             nodes=expand_hostlist(info.get("nodes") or ""), elapsed=info.get("elapsed"),
                             progress=progress)
        time.sleep(1)
    ended_at = time.time()
    out = results(module, job_id, job_dir, info, ended_at)
    if timed_out:
        out["job_failed"] = True
        out["root_cause_line"] = "job %s ran past train_timeout=%ss since submission and was cancelled; %s" % (
            job_id, p["timeout"], out.get("root_cause_line") or "")
        out["lines"].append("timed out: cancelled")
    progress = "job %s: %s, %d node(s), elapsed %s" % (job_id, out["state"], len(out["nodes"]),
                                                       (info or {}).get("elapsed"))
    module.exit_json(changed=timed_out, job_id=job_id, job_dir=job_dir, done=True, progress=progress,
                     elapsed=(info or {}).get("elapsed"), timed_out=timed_out, **out)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", default="status", choices=["submitted", "status", "cancelled"]),
            job_id=dict(type="str"),
            job_base=dict(type="path", required=True),
            bin_dir=dict(type="path"),
            partition=dict(type="str", default=""),
            account=dict(type="str", default=""),
            gres=dict(type="str", default=""),
            gpus_per_node=dict(type="int", default=0),
            time=dict(type="str", default=""),
            constraint=dict(type="str", default=""),
            extra_args=dict(type="list", elements="str", default=[]),
            job_name=dict(type="str", default="multinode-training"),
            nnodes=dict(type="str", default=""),
            nproc_per_node=dict(type="str", default="auto"),
            cpu_nproc=dict(type="int", default=2),
            script=dict(type="path"),
            module=dict(type="str"),
            args=dict(type="list", elements="str", default=[]),
            python=dict(type="path", default="/opt/multinode-training/venv/bin/python"),
            system_python=dict(type="path", default="/usr/bin/python3"),
            rdzv_backend=dict(type="str", default="c10d"),
            rdzv_port=dict(type="int", default=29400),
            rdzv_conf=dict(type="dict", default={}),
            max_restarts=dict(type="int", default=0),
            interface=dict(type="str", default=""),
            ip_version=dict(type="int", default=4, choices=[4, 6]),
            env=dict(type="dict", default={}),
            env_files=dict(type="list", elements="path", default=[]),
            chdir=dict(type="path"),
            tee=dict(type="bool", default=False),
            timeout=dict(type="int", default=0),
            stop_grace=dict(type="int", default=15),
            follow=dict(type="bool", default=False),
            wait=dict(type="int", default=10),
            controller_timeout=dict(type="int", default=120),
            tail_lines=dict(type="int", default=30),
        ),
        mutually_exclusive=[("script", "module")],
        required_if=[("state", "status", ["job_id"]), ("state", "cancelled", ["job_id"]),
                     ("state", "submitted", ["bin_dir"])],
        supports_check_mode=True,
    )
    p = module.params
    if p["state"] == "submitted":
        submit(module)
    if p["state"] == "cancelled":
        was_queued = in_queue(module, p["job_id"])
        seconds = cancel(module, p["job_id"], p["stop_grace"]) if not module.check_mode else 0
        info = job_info(module, p["job_id"])
        module.exit_json(changed=was_queued, job_id=p["job_id"], job_dir=os.path.join(p["job_base"], p["job_id"]),
                         state=(info or {}).get("state"), seconds=seconds)
    status(module)


if __name__ == "__main__":
    main()
