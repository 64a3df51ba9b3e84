#!/usr/bin/python
# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: torchrun
short_description: Start, wait for or stop a torchrun (torch.distributed.run) job on this node
version_added: 0.1.0
description:
  - Runs C(python -m torch.distributed.run) from a configured venv as an argv list (never through a
    shell), in its own process session, so that the whole job can be stopped as a group.
  - A job lives under O(log_dir)/O(job_id)/ on the node - C(job.json) (what was started),
    C(torchrun.log) (the agent's output), C(result.json) (rc and times), and C(ranks/) with torchrun's
    per-rank C(stdout.log), C(stderr.log) and C(error.json) (C(--log_dir), C(--redirects 3)).
  - Every process of the job carries C(MULTINODE_TRAINING_JOB=<job id>) in its environment. O(state=stopped)
    uses it to find and kill what is left after the process group was signalled, including workers that
    torchrun started in sessions of their own, and fails if anything survives.
  - A started job is run by a small supervisor process (the session leader). It enforces O(timeout) even
    when the controller has gone away, records torchrun's exit status and kills leftovers of the job.
  - When a job fails, the module reads torchrun's failure summary and the per-rank C(error.json) files and
    returns per-rank exit codes, the root-cause error (the first first-hand failure, not the peers that
    died because of it) and the tail of the failing rank's log.
  - Job ids are never reused - O(state=started) refuses an id whose job directory already holds a finished
    job, because a reused rendezvous id lets two jobs join each other.
author:
  - multinode.training maintainers (@multinode)
options:
  state:
    description:
      - V(started) spawns the job detached and returns its pid/pgid and job directory. Starting a job id that is
        running already changes nothing.
      - V(finished) waits for a started job with this O(job_id) to end, or when none was started, runs one and
        waits. Fails when the job fails, naming the rank, its exit code and the root-cause error.
      - V(stopped) stops the job - SIGTERM to its process group, SIGKILL after O(stop_grace) seconds, then every
        process still carrying the job marker - and fails if one survives.
    type: str
    choices: [started, finished, stopped]
    default: finished
  script:
    description:
      - Training script passed to torchrun. Relative paths are relative to O(chdir). Must exist on the node.
      - Mutually exclusive with O(module).
    type: path
  module:
    description: Python module to run instead of a script (torchrun C(-m)).
    type: str
  args:
    description:
      - Arguments for the script, a list. Each item reaches the script as exactly one argument, unchanged -
        spaces, quotes, V(;) and V($) included (no shell is involved).
      - Anything but a list is refused (a string would be split by Ansible's list conversion).
    type: raw
    default: []
  nnodes:
    description: Number of nodes, V(N), or an elastic range V(MIN:MAX) with MIN <= MAX.
    type: str
    default: "1"
  nproc_per_node:
    description:
      - Processes (ranks) on this node. V(auto) uses the node's GPU count (C(nvidia-smi -L), else
        C(/proc/driver/nvidia/gpus)); on a node without GPUs O(cpu_nproc) processes.
    type: str
    default: auto
  cpu_nproc:
    description: Process count for O(nproc_per_node=auto) on a node without GPUs.
    type: int
  node_rank:
    description: Rank of this node, for static rendezvous. Leave unset with c10d (ranks are assigned).
    type: int
  rdzv_backend:
    description: Rendezvous backend (C(--rdzv_backend)).
    type: str
    default: c10d
  rdzv_endpoint:
    description:
      - Rendezvous endpoint C(host:port); IPv6 addresses in brackets (V([fd00::1]:29400)); a bare IPv6 address
        is refused. Required when the job spans more than one node.
    type: str
  rdzv_id:
    description:
      - Rendezvous id of the job (C(--rdzv_id)); must be unique per job. Letters, digits, C(_), C(.), C(-).
      - Required for O(state=started) and O(state=finished) when no job was started.
    type: str
  job_id:
    description:
      - Names the job directory and the C(MULTINODE_TRAINING_JOB) marker. Defaults to O(rdzv_id).
      - O(state=stopped) and waiting with O(state=finished) identify the job with it.
    type: str
  rdzv_conf:
    description:
      - Rendezvous configuration as a dictionary, passed as C(--rdzv_conf key=value,...), for example
        C(join_timeout) (seconds to wait for all nodes) or C(read_timeout).
    type: dict
    default: {}
  max_restarts:
    description: How often torchrun restarts the worker group after a failure.
    type: int
    default: 0
  local_addr:
    description: Address of this node that the rendezvous advertises (C(--local_addr)).
    type: str
  env:
    description:
      - Extra environment for the job, over the node's environment and O(env_files).
      - Values of keys that look secret (containing C(TOKEN), C(KEY), C(SECRET), C(PASSWORD), C(PASSWD),
        C(CREDENTIAL)) are masked in everything the module returns; they are never written to the job
        files.
    type: dict
    default: {}
  env_files:
    description:
      - Files of C(KEY=VALUE) lines (C(#) comments, optional C(export), optional quotes) read in order and
        added to the job's environment, e.g. the NCCL file written by role multinode.training.nccl_tuning.
      - A missing or malformed file is an error before anything starts.
    type: list
    elements: path
    default: []
  venv:
    description: Virtual environment whose C(bin/python) runs torchrun. Ignored when O(python) is set.
    type: path
    default: /opt/multinode-training/venv
  python:
    description: Python interpreter that runs torchrun (has torch installed).
    type: path
  chdir:
    description: Working directory of the job. Defaults to the job directory.
    type: path
  log_dir:
    description: Directory holding one directory per job (see description).
    type: path
    default: /var/log/multinode-training
  tee:
    description: Also copy every rank's output into C(torchrun.log) (torchrun C(--tee 3)), prefixed by rank.
    type: bool
    default: false
  timeout:
    description:
      - Seconds the job may run before it is stopped (enforced on the node by the supervisor); V(0) means
        no limit. With O(state=finished) the module also stops waiting after it.
    type: int
    default: 0
  stop_grace:
    description: Seconds between SIGTERM and SIGKILL when a job is stopped or times out.
    type: int
    default: 15
  tail_lines:
    description: Lines of the failing rank's log returned in RV(log_tail).
    type: int
    default: 30
  user:
    description:
      - Account that runs the supervisor, torchrun and the ranks. When it is not the module's own user,
        the module must run as root (become); the job's processes get the account's uid, primary group
        (or O(group)) and supplementary groups (for example C(video)/C(render) for the GPUs), its C(HOME),
        C(USER) and C(LOGNAME), and umask C(027).
      - The job directory and its files are owned by it, mode C(0750)/C(0640).
      - Unset - the module's own user.
    type: str
  group:
    description: Primary group for O(user); unset - the account's own primary group.
    type: str
  firewall_allow:
    description:
      - When not empty, this node (the rendezvous store host) lets only these addresses (and loopback)
        connect to the rendezvous port while the job runs; any other source gets a TCP reset.
      - The rule is an nftables table of its own per job (C(inet mt_<job>_<hash>)); a root keeper
        process deletes it when the job's supervisor ends, O(state=stopped) deletes it too, and its
        guard expires after O(firewall_ttl) seconds unless the keeper renews it, so a killed keeper does
        not leave the port closed. Needs C(nft) and root.
    type: list
    elements: str
    default: []
  firewall_ttl:
    description: Seconds the guard lives without renewal by the keeper (renewed every third of it).
    type: int
    default: 60
  exit_barrier_grace:
    description:
      - Seconds to wait, after all ranks on this node succeeded, for torchrun's exit barrier (it waits
        for the other nodes' agents; torch gives it 300 s, and an agent that failed never arrives).
        After that the node's torchrun is stopped and the node reports success with
        RV(exit_barrier_abandoned); the failing node reports the failure.
    type: int
    default: 30
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
    details:
      - V(started) and V(finished) validate everything and return the command without starting it.
        V(stopped) reports what it would kill.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
  idempotent:
    description: Whether the module changes nothing when run twice.
    support: partial
    details:
      - A launch is not idempotent by nature. Starting a job id that is running changes nothing; stopping a job
        that is gone changes nothing; a finished job id is refused rather than run again.
  platform:
    description: Target OS/families that can be operated against.
    support: full
    platforms: posix
notes:
  - The node needs Linux C(/proc) (the job's processes are found through their environment).
  - The module runs torchrun with C(LOGLEVEL=INFO) (unless O(env) sets it) so that the agent logs the rendezvous
    result, where RV(world_size) and the node's global ranks come from.
seealso:
  - name: torchrun (Elastic Launch)
    description: torchrun's options and rendezvous.
    link: https://pytorch.org/docs/stable/elastic/run.html
  - name: Error propagation
    description: How torchrun records per-rank errors (C(@record), C(error.json)).
    link: https://pytorch.org/docs/stable/elastic/errors.html
"""

EXAMPLES = r"""
- name: Run a two-node job and wait for it (on every node of the play)
  multinode.training.torchrun:
    script: /srv/train/train.py
    args: ["--config", "conf/run 1.yaml", "--note", "a;b $HOME"]
    nnodes: 2
    nproc_per_node: auto
    rdzv_endpoint: "10.0.0.11:29400"
    rdzv_id: "job-20261121-a1b2"
    rdzv_conf:
      join_timeout: 300
    env:
      HF_TOKEN: "{{ vault_hf_token }}"
    env_files:
      - /etc/multinode-training/nccl.env
    timeout: 7200

- name: Start the job on every node concurrently, then wait for all of them
  multinode.training.torchrun:
    state: started
    module: mypkg.train
    nnodes: "1:4"
    cpu_nproc: 2
    rdzv_endpoint: "[fd00::11]:29400"
    rdzv_id: "{{ job_id }}"
    timeout: 3600

- name: Wait for it
  multinode.training.torchrun:
    state: finished
    job_id: "{{ job_id }}"
    timeout: 3600

- name: Stop the job everywhere and check that nothing of it survives
  multinode.training.torchrun:
    state: stopped
    job_id: "{{ job_id }}"
    stop_grace: 10
"""

RETURN = r"""
job_id:
  description: The job's id (job directory name and process marker).
  returned: always
  type: str
  sample: job-20261121-a1b2
job_dir:
  description: Directory of the job on the node; fetch it to collect the logs.
  returned: always
  type: str
  sample: /var/log/multinode-training/job-20261121-a1b2
cmd:
  description: The torchrun argv, secrets masked.
  returned: when a job was started or found
  type: list
  elements: str
  sample: ["/opt/multinode-training/venv/bin/python", "-m", "torch.distributed.run", "--nnodes", "2"]
pid:
  description: Pid of the job's supervisor, the leader of its process session and group.
  returned: when a job was started or found
  type: int
pgid:
  description: Process group of the job (equal to RV(pid)).
  returned: when a job was started or found
  type: int
nproc_per_node:
  description: Processes started on this node (O(nproc_per_node=auto) resolved).
  returned: when a job was started or found
  type: int
gpu_count:
  description: GPUs found on the node when O(nproc_per_node=auto).
  returned: when O(nproc_per_node=auto)
  type: int
rc:
  description: torchrun's exit status (negative - killed by that signal); null while it runs.
  returned: state is finished or stopped
  type: int
duration:
  description: Seconds from start to end of torchrun.
  returned: state is finished
  type: float
world_size:
  description: World size of the job, from the rendezvous result torchrun logged; null when it never got there.
  returned: state is finished
  type: int
group_rank:
  description: Rank of this node in the rendezvous.
  returned: state is finished
  type: int
ranks:
  description: Per local rank - global rank, exit code and state (succeeded, failed, terminated, unknown).
  returned: state is finished
  type: list
  elements: dict
  sample: [{"local_rank": 0, "rank": 2, "exitcode": 1, "state": "failed"}]
failures:
  description:
    - Failed ranks on this node with exit code, message (last line of the error), error file, time stamp
      (C(timestamp), seconds since the epoch) and C(peer) (true when the error looks like the consequence of
      another rank's failure or of a kill by the agent).
  returned: state is finished
  type: list
  elements: dict
root_cause:
  description: The failure that happened first on this node (first-hand failures before peer errors).
  returned: state is finished and the job failed
  type: dict
  sample: {"rank": 3, "local_rank": 1, "exitcode": 1, "message": "RuntimeError: injected failure"}
root_cause_line:
  description: One line naming rank, node and error.
  returned: state is finished and the job failed
  type: str
log_tail:
  description: Last O(tail_lines) lines of the failing rank's log (stderr, else stdout; C(torchrun.log) when no rank failed).
  returned: state is finished and the job failed
  type: str
timed_out:
  description: Whether the job was stopped because it ran past O(timeout).
  returned: state is finished
  type: bool
exit_barrier_abandoned:
  description: Whether this node's ranks succeeded and torchrun was stopped in its exit barrier (see O(exit_barrier_grace)).
  returned: state is finished
  type: bool
stopped:
  description: Whether the job was stopped (O(state=stopped) or a signal) rather than ending by itself.
  returned: state is finished or stopped
  type: bool
killed:
  description: Pids that were signalled to stop the job.
  returned: state is stopped
  type: list
  elements: int
user:
  description: Account that runs the job's processes.
  returned: when a job was started or found
  type: str
  sample: mtrain
firewall_table:
  description: nftables table that guards the rendezvous port on this node; null when there is none.
  returned: when a job was started or found, and state is stopped
  type: str
  sample: mt_verify_abc_1a2b3c4d
survivors:
  description: Processes of the job still alive after stopping (the module fails when there are any).
  returned: state is stopped
  type: list
  elements: dict
"""

import grp
import json
import os
import pwd
import socket
import sys
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.multinode.training.plugins.module_utils._torchrun import (
    JOB_DIR_ENV,
    JOB_ENV,
    TorchrunError,
    build_argv,
    check_env,
    count_gpus_nvidia_smi,
    local_workers_succeeded,
    mask,
    parse_env_file,
    resolve_nproc,
    secret_values,
    validate_job_id,
)
from ansible_collections.multinode.training.plugins.module_utils._torchrun_collect import (
    read_json,
    read_text,
    collect,
)
from ansible_collections.multinode.training.plugins.module_utils._train_security import (
    SecurityError,
    job_tables,
    parse_tables,
    render_delete,
    render_refresh,
    render_table,
    table_name,
)
from ansible_collections.multinode.training.plugins.module_utils._torchrun_proc import (
    KEEPER_SOURCE,
    SUPERVISOR_SOURCE,
    describe,
    find_job_processes,
    process_state,
    stop_job,
)


def _write_json(path, data):
    tmp = path + ".tmp"
    with open(tmp, "w") as handle:
        json.dump(data, handle, indent=1, sort_keys=True)
    os.rename(tmp, path)


def gpu_count(module):
    smi = module.get_bin_path("nvidia-smi")
    if smi:
        rc, out, _err = module.run_command([smi, "-L"])
        if rc == 0:
            return count_gpus_nvidia_smi(out)
    try:
        return len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return 0


def job_alive(pid, job_id, job_dir, started=None):
    """The supervisor still runs (and the pid was not reused by something else).

    Right after the spawn /proc may still show the pre-exec environment, without the
    job marker: within the first seconds a live pid is taken as the supervisor.
    """
    if not pid or process_state(pid) in (None, "Z", "X"):
        return False
    if started and time.time() - started < 10:
        return True
    return pid in find_job_processes(job_id, exclude=(), job_dir=job_dir)


def _read_tail(path, size=16384):
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, os.path.getsize(path) - size))
            return handle.read().decode("utf-8", "replace")
    except (IOError, OSError):
        return ""


def build_env(module, job_id, job_dir, secrets_out):
    env = {}
    for path in module.params["env_files"]:
        if not os.path.isfile(path):
            module.fail_json(msg="env_files: %s does not exist on %s (for the NCCL file: apply role "
                                 "multinode.training.nccl_tuning first)" % (path, socket.gethostname()))
        try:
            env.update(parse_env_file(read_text(path), path))
        except TorchrunError as exc:
            module.fail_json(msg="env_files: %s" % exc)
    try:
        check_env(module.params["env"])
    except TorchrunError as exc:
        module.fail_json(msg="%s (on %s)" % (exc, socket.gethostname()))
    for key, value in (module.params["env"] or {}).items():
        env[str(key)] = "" if value is None else str(value)
    secrets_out.extend(secret_values(env))
    full = dict(os.environ)
    full.update(env)
    full.setdefault("LOGLEVEL", "INFO")
    full["PYTHONUNBUFFERED"] = full.get("PYTHONUNBUFFERED", "1")
    full[JOB_ENV] = job_id
    full[JOB_DIR_ENV] = job_dir
    full["TORCHELASTIC_ERROR_FILE"] = os.path.join(job_dir, "torchrun_error.json")
    return full


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", default="finished", choices=["started", "finished", "stopped"]),
            script=dict(type="path"),
            module=dict(type="str"),
            args=dict(type="raw", default=[]),
            nnodes=dict(type="str", default="1"),
            nproc_per_node=dict(type="str", default="auto"),
            cpu_nproc=dict(type="int"),
            node_rank=dict(type="int"),
            rdzv_backend=dict(type="str", default="c10d"),
            rdzv_endpoint=dict(type="str"),
            rdzv_id=dict(type="str"),
            job_id=dict(type="str"),
            rdzv_conf=dict(type="dict", default={}),
            max_restarts=dict(type="int", default=0),
            local_addr=dict(type="str"),
            env=dict(type="dict", default={}),
            env_files=dict(type="list", elements="path", default=[]),
            venv=dict(type="path", default="/opt/multinode-training/venv"),
            python=dict(type="path"),
            chdir=dict(type="path"),
            log_dir=dict(type="path", default="/var/log/multinode-training"),
            tee=dict(type="bool", default=False),
            timeout=dict(type="int", default=0),
            stop_grace=dict(type="int", default=15),
            tail_lines=dict(type="int", default=30),
            exit_barrier_grace=dict(type="int", default=30),
            user=dict(type="str"),
            group=dict(type="str"),
            firewall_allow=dict(type="list", elements="str", default=[]),
            firewall_ttl=dict(type="int", default=60),
        ),
        mutually_exclusive=[("script", "module")],
        supports_check_mode=True,
    )
    p = module.params
    host = socket.gethostname()
    secrets = []
    for value in secret_values(p["env"]):
        module.no_log_values.add(value)
        secrets.append(value)

    try:
        job_id = validate_job_id(p["job_id"] or p["rdzv_id"], "job_id" if p["job_id"] else "rdzv_id")
    except TorchrunError as exc:
        module.fail_json(msg="%s (on %s)" % (exc, host))
    job_dir = os.path.join(p["log_dir"], job_id)
    job_file = os.path.join(job_dir, "job.json")
    result = dict(changed=False, job_id=job_id, job_dir=job_dir)
    job = read_json(job_file)

    if p["state"] == "stopped":
        pgid = job.get("pgid") if job else None
        pids = find_job_processes(job_id, job_dir=job_dir)
        result["cmd"] = job.get("cmd") if job else None
        if module.check_mode:
            result.update(changed=bool(pids), killed=pids, survivors=[], firewall_table=None)
            module.exit_json(**result)
        killed, survivors = stop_job(job_id, pgid=pgid if pids else None, grace=p["stop_grace"], job_dir=job_dir)
        result["firewall_table"] = remove_firewall(module, job_id)
        if job and not os.path.exists(os.path.join(job_dir, "result.json")):
            _write_json(os.path.join(job_dir, "result.json"),
                        {"rc": None, "start": job.get("start"), "end": time.time(), "timed_out": False,
                         "stopped": True, "leftovers_killed": killed})
            # Like the job's other files: the job's user's, not world-readable.
            os.chmod(os.path.join(job_dir, "result.json"), 0o640)
            owner = os.stat(job_dir)
            os.chown(os.path.join(job_dir, "result.json"), owner.st_uid, owner.st_gid)
        result.update(changed=bool(killed) or bool(result["firewall_table"]), killed=killed, survivors=describe(survivors), stopped=bool(killed))
        if survivors:
            module.fail_json(msg="job %s: %d process(es) survived SIGKILL on %s: %s"
                                 % (job_id, len(survivors), host, describe(survivors)), **result)
        module.exit_json(**result)

    wait_only = p["state"] == "finished" and job is not None
    if job is None:
        if p["state"] == "finished" and not (p["script"] or p["module"]):
            module.fail_json(msg="job %s was never started on %s and neither script nor module is set"
                                 % (job_id, host), **result)
        job = start(module, job_id, job_dir, job_file, secrets, result, host)
        result["changed"] = True
    elif p["state"] == "started":
        result.update(cmd=job.get("cmd"), pid=job.get("pid"), pgid=job.get("pgid"),
                      nproc_per_node=job.get("nproc_per_node"))
        if job_alive(job.get("pid"), job_id, job_dir):
            module.exit_json(msg="job %s is running already" % job_id, **result)
        module.fail_json(msg="job id %s was used before on %s (%s): rendezvous ids must not be reused, "
                             "pick a new one" % (job_id, host, job_dir), **result)
    result.update(cmd=job.get("cmd"), pid=job.get("pid"), pgid=job.get("pgid"),
                  nproc_per_node=job.get("nproc_per_node"), user=job.get("user"),
                  firewall_table=job.get("firewall_table"))
    if "gpu_count" in job:
        result["gpu_count"] = job["gpu_count"]
    if module.check_mode or p["state"] == "started":
        module.exit_json(**result)
    if wait_only:
        result["changed"] = False
    wait(module, job_id, job_dir, job, result, host)


def start(module, job_id, job_dir, job_file, secrets, result, host):
    p = module.params
    python = p["python"] or os.path.join(p["venv"], "bin", "python")
    if not os.access(python, os.X_OK):
        module.fail_json(msg="python %s not found or not executable on %s: is the venv there (role "
                             "multinode.training.wheel_distribute, variable venv/python)?" % (python, host), **result)
    chdir = p["chdir"]
    if chdir and not os.path.isdir(chdir):
        module.fail_json(msg="chdir %s is not a directory on %s" % (chdir, host), **result)
    if p["script"]:
        script = p["script"] if os.path.isabs(p["script"]) or not chdir else os.path.join(chdir, p["script"])
        if not os.path.isfile(script):
            module.fail_json(msg="script %s does not exist on %s" % (script, host), **result)
    if not isinstance(p["args"], list):
        module.fail_json(msg="args=%r on %s: must be a list; each item reaches the script as one argument"
                             % (p["args"], host), **result)
    gpus = None
    try:
        if p["nproc_per_node"] == "auto":
            gpus = gpu_count(module)
        nproc = resolve_nproc(p["nproc_per_node"], gpus, p["cpu_nproc"])
        opts = dict(p, nproc_per_node=nproc, log_dir=os.path.join(job_dir, "ranks"), rdzv_id=p["rdzv_id"] or job_id)
        argv = build_argv(python, opts)
    except TorchrunError as exc:
        module.fail_json(msg="%s (on %s)" % (exc, host), **result)
    account = resolve_account(module, host, result)
    env = build_env(module, job_id, job_dir, secrets)
    for value in secrets:
        module.no_log_values.add(value)
    if account:
        env.update(HOME=account["home"], USER=account["name"], LOGNAME=account["name"])
    masked = mask(argv, secrets)
    job = {"job_id": job_id, "cmd": masked, "nproc_per_node": nproc, "timeout": p["timeout"],
           "stop_grace": p["stop_grace"], "host": host,
           "user": account["name"] if account else pwd.getpwuid(os.geteuid()).pw_name}
    if gpus is not None:
        job["gpu_count"] = gpus
    nft = None
    if p["firewall_allow"]:
        nft = module.get_bin_path("nft")
        if not nft or os.geteuid() != 0:
            module.fail_json(msg="firewall_allow (train_firewall) on %s: needs nft (package nftables) and root; "
                                 "found nft=%s, uid %d" % (host, nft, os.geteuid()), **result)
        job["firewall_table"] = table_name(job_id)
    if module.check_mode:
        return job
    if nft:
        port = int(argv[argv.index("--rdzv_endpoint") + 1].rsplit(":", 1)[1]) if "--rdzv_endpoint" in argv else None
        try:
            script = render_table(job["firewall_table"], port, p["firewall_allow"], p["firewall_ttl"])
        except (SecurityError, TypeError) as exc:
            module.fail_json(msg="firewall_allow on %s: %s (rdzv_endpoint %s)" % (host, exc, p["rdzv_endpoint"]),
                             **result)
        rc, _out, err = module.run_command([nft, "-f", "-"], data=script, binary_data=True)
        if rc != 0:
            module.fail_json(msg="train_firewall on %s: nft refused the rule: %s" % (host, err.strip()), **result)
    try:
        os.makedirs(job_dir)
    except OSError as exc:
        remove_firewall(module, job_id)
        module.fail_json(msg="cannot create job directory %s on %s: %s (a reused job id?)" % (job_dir, host, exc),
                         **result)
    os.chmod(job_dir, 0o750)
    log = os.path.join(job_dir, "torchrun.log")
    log_fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
    if account:
        for path in (job_dir, log):
            os.chown(path, account["uid"], account["gid"])
    # Detached on purpose (run_command waits): the supervisor leads a new session as the job's
    # user, stdin is /dev/null, stdout and stderr go to torchrun.log; it outlives this module.
    # The job's python runs the supervisor: the account can run it (preflight checks that), the
    # module's own interpreter may lie where it cannot.
    supervisor = [python, "-c", SUPERVISOR_SOURCE, job_dir, job_id, str(p["timeout"]),
                  str(p["stop_grace"]), chdir or job_dir, "--"] + argv
    try:
        pid = spawn(supervisor, env, log_fd, account)
    except OSError as exc:
        remove_firewall(module, job_id)
        module.fail_json(msg="cannot start the job on %s as %s: %s" % (host, job["user"], exc), **result)
    finally:
        os.close(log_fd)
    job.update(pid=pid, pgid=pid, start=time.time())
    _write_json(job_file, job)
    os.chmod(job_file, 0o640)
    if account:
        os.chown(job_file, account["uid"], account["gid"])
    if nft:
        with open(os.devnull, "wb") as null:
            spawn([sys.executable, "-c", KEEPER_SOURCE, nft, str(pid), os.path.join(job_dir, "result.json"),
                   str(p["firewall_ttl"]), render_refresh(job["firewall_table"], port, p["firewall_ttl"]),
                   render_delete(job["firewall_table"])],
                  {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")}, null.fileno(), None)
    return job


def spawn(argv, env, out_fd, account, umask=0o027):
    """Start argv detached: new session, stdin /dev/null, stdout+stderr to out_fd, as ``account``
    (uid, gid, supplementary groups) when given, umask 027; returns its pid. Nobody waits for it."""
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: only async-signal-safe work until exec
        try:
            os.close(err_r)
            os.setsid()
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(out_fd, 1)
            os.dup2(out_fd, 2)
            os.set_inheritable(err_w, False)
            os.closerange(3, err_w)
            os.closerange(err_w + 1, 65536)
            if account:
                os.setgroups(account["groups"])
                os.setgid(account["gid"])
                os.setuid(account["uid"])
            os.umask(umask)
            os.execve(argv[0], argv, env)
        except OSError as exc:
            os.write(err_w, str(exc).encode("utf-8", "replace"))
        finally:
            os._exit(127)
    os.close(err_w)
    # The pipe closes on exec (close-on-exec); anything written means the child never got there.
    message = os.read(err_r, 4096)
    os.close(err_r)
    if message:
        os.waitpid(pid, 0)
        raise OSError(message.decode("utf-8", "replace"))
    return pid


def resolve_account(module, host, result):
    """O(user)/O(group) -> uid, gid, supplementary groups and home; None when the job runs as the module's user."""
    p = module.params
    if not p["user"]:
        return None
    try:
        entry = pwd.getpwnam(p["user"])
    except KeyError:
        module.fail_json(msg="user=%s (train_user) does not exist on %s" % (p["user"], host), **result)
    gid = entry.pw_gid
    if p["group"]:
        try:
            gid = grp.getgrnam(p["group"]).gr_gid
        except KeyError:
            module.fail_json(msg="group=%s (train_group) does not exist on %s" % (p["group"], host), **result)
    if entry.pw_uid == os.geteuid() and gid == os.getegid():
        return None
    if os.geteuid() != 0:
        module.fail_json(msg="user=%s (train_user) on %s: the module runs as uid %d and cannot switch; run it "
                             "with become" % (p["user"], host, os.geteuid()), **result)
    groups = sorted(set(os.getgrouplist(entry.pw_name, gid)))
    return {"name": entry.pw_name, "uid": entry.pw_uid, "gid": gid, "groups": groups, "home": entry.pw_dir}


def remove_firewall(module, job_id):
    """Delete the job's nftables table when it exists; its name, or None."""
    nft = module.get_bin_path("nft")
    if not nft or os.geteuid() != 0:
        return None
    rc, out, _err = module.run_command([nft, "-j", "list", "tables"])
    try:
        tables = job_tables(parse_tables(out), job_id) if rc == 0 else []
    except ValueError:
        tables = []
    if not tables or module.check_mode:
        return tables[0] if tables else None
    rc, _out, err = module.run_command([nft, "-f", "-"], data=render_delete(tables[0]), binary_data=True)
    if rc != 0:
        module.fail_json(msg="job %s: cannot delete nftables table %s on %s: %s"
                             % (job_id, tables[0], socket.gethostname(), err.strip()))
    return tables[0]


def wait(module, job_id, job_dir, job, result, host):
    p = module.params
    result_file = os.path.join(job_dir, "result.json")
    timeout = p["timeout"] or job.get("timeout") or 0
    grace = job.get("stop_grace", p["stop_grace"])
    deadline = job["start"] + timeout + grace + 30 if timeout else None
    gave_up = False
    local_done = None
    barrier_abandoned = False
    log_file = os.path.join(job_dir, "torchrun.log")
    while not os.path.exists(result_file):
        if not job_alive(job.get("pid"), job_id, job_dir, job.get("start")):
            time.sleep(0.5)
            if not os.path.exists(result_file):
                break
        if deadline and time.time() > deadline:
            stop_job(job_id, pgid=job.get("pgid"), grace=grace, job_dir=job_dir)
            gave_up = True
            break
        # This node's ranks all succeeded and torchrun only waits in its exit barrier for
        # the other agents; an agent that failed never arrives (torch waits 300 s).
        if local_done is None and local_workers_succeeded(_read_tail(log_file)):
            local_done = time.time()
        if local_done and time.time() - local_done > p["exit_barrier_grace"]:
            stop_job(job_id, pgid=job.get("pgid"), grace=grace, job_dir=job_dir)
            barrier_abandoned = True
            break
        time.sleep(0.5)
    data = read_json(result_file)
    result.update(collect(job_dir, job, data, p["tail_lines"], host))
    if gave_up:
        result["timed_out"] = True
    result["exit_barrier_abandoned"] = barrier_abandoned
    if barrier_abandoned and not result["failures"]:
        result.update(rc=0, stopped=False, root_cause=None, root_cause_line=None)
        for entry in result["ranks"]:
            entry.update(exitcode=0, state="succeeded")
        module.warn("job %s: the ranks on %s succeeded; torchrun's exit barrier was abandoned after %ss "
                    "(another node did not finish)" % (job_id, host, p["exit_barrier_grace"]))
        module.exit_json(**result)
    if data is None and not gave_up:
        module.fail_json(msg="job %s on %s: the supervisor (pid %s) ended without recording a result; "
                             "see %s/torchrun.log" % (job_id, host, job.get("pid"), job_dir), **result)
    if result["timed_out"]:
        module.fail_json(msg="job %s timed out after %ss on %s and was stopped" % (job_id, timeout, host), **result)
    if result["rc"] != 0:
        if result["stopped"] and not result["failures"]:
            module.fail_json(msg="job %s was stopped on %s (rc %s)" % (job_id, host, result["rc"]), **result)
        module.fail_json(msg="job %s failed on %s: %s" % (job_id, host, result["root_cause_line"]), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
