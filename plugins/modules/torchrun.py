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
  - A started job is run by a small supervisor process (the session leader), C(supervisor.py) in the job
    directory (standard library only, written there by the module). It enforces O(timeout) even when the
    controller has gone away, records torchrun's exit status and kills leftovers of the job.
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
        waits. Fails when the job fails, naming the rank, its exit code and the root-cause error. Then stops
        whatever of the job is left on the node, like V(stopped), and fails if one survives.
      - V(stopped) stops the job - SIGTERM to its process group, SIGKILL after O(stop_grace) seconds, then every
        process still carrying the job marker - and fails if one survives.
      - V(status) reports the job's progress on this node (RV(progress)) and renews its controller lease
        (O(watch.lease)); fails when no job with this id was started here. The action plugin polls it with
        O(follow).
    type: str
    choices: [started, finished, stopped, status]
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
      - With C(CUDA_VISIBLE_DEVICES) in the job's environment (O(env), O(env_files)), V(auto) counts the GPUs it
        lists, as CUDA reads it (the entries before the first one that is not an index or a GPU-/MIG- UUID; an
        index the node does not have is refused).
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
  max_no_progress_restarts:
    description:
      - A crash loop. With O(max_restarts) > 0, the job is stopped on every node, naming why, once this many
        attempts in a row made no progress - no step line past every earlier attempt's (O(step_pattern)), no new
        file in the checkpoint directory (C(MULTINODE_TRAINING_CHECKPOINT_DIR) in O(env)). V(0) - never.
    type: int
    default: 3
  hang_timeout:
    description:
      - A hang. Each rank's sampler reads torch's flight recorder (NCCL's on torch >= 2.5, gloo's on torch >= 2.8;
        C(TORCH_FR_BUFFER_SIZE=2000) in the job's environment unless O(env) sets it) and, while it stands still,
        the script's stack. Where a backend has no recorder, the progress says once C(hang detection off on <node>). When for this many
        seconds no rank's collectives change while some ranks wait in a collective that others did not enter,
        the job is stopped on every node, naming those ranks, their node, the collective and their stack line
        (C(hang.json) in the first node's job directory keeps every rank's). V(0) - never.
      - Ranks that all wait in the same collective (a network fault) are left to the backend's own timeout.
    type: int
    default: 300
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
  follow:
    description:
      - With O(state=finished), poll the node with O(state=status) until the job ended, printing a progress line
        on the controller every O(poll) seconds, then return the result (the action plugin does the loop; each
        poll renews the lease).
      - With O(state=started), start the job, then wait for it the same way in the same task (the job's
        O(job_id) or O(rdzv_id), O(log_dir), O(timeout), O(stop_grace)); a start that fails, or does not leave
        a running job, is the task's result.
    type: bool
    default: false
  poll:
    description: Seconds between progress lines with O(follow).
    type: int
    default: 10
  poll_slack:
    description:
      - With O(follow), how long a poll may take beyond its window before the node counts as not answering (frozen,
        or the module stuck on it) - the wait on that node fails naming it, and the other nodes' watchers stop the
        job when they lose it. Over ssh the keepalives of the collection's C(ansible.cfg) end a frozen node's call
        sooner; this bounds every connection. The last poll also packs the node's job directory.
    type: int
    default: 300
  follow_limit:
    description:
      - Set by the action for each long poll of O(follow) (leave it unset) - with O(state=finished) and a started
        job, wait on the node at most this many seconds (at most a third of the job's lease, O(watch.lease)),
        returning at once when the job ended there (RV(done) true, the full result) and otherwise its progress
        (RV(done) false, RV(progress)); the lease is renewed once, at the start. V(0) - wait until the end.
    type: float
    default: 0
  stream_ranks:
    description:
      - With O(follow), the output of these global ranks (their C(stdout.log), then their C(stderr.log)) reaches the
        controller while the job runs, each line printed as C(<node>:<rank> <line>) between the progress lines;
        a long poll ends about 5 s after they printed. A list of global ranks, or V(all). Empty - none.
      - The whole output stays in each rank's log either way.
    type: list
    elements: str
    default: []
  stream_offsets:
    description:
      - Set by the action for each long poll of O(follow) (leave it unset) - where the last poll left off in each
        rank log of O(stream_ranks) (C(<attempt>/<local rank>/<stdout|stderr>) to a byte offset, RV(stream_offsets)).
    type: dict
    default: {}
  stream_tail:
    description:
      - A rank log that O(stream_offsets) does not name yet starts at its last this many lines, V(0) - at its
        start. With O(follow), the action's default is 10 for O(state=finished) (an attach) and V(0) for
        O(state=started); a wait that follows its own launch sets V(0) (the ranks' output from their start).
    type: int
    default: 0
  archive:
    description:
      - With O(follow_limit) - pack the job directory when the job ended (RV(archive)); an archive larger than
        O(archive_inline_max) bytes is written under a new directory of its own (mode 0700, in C(/var/tmp)) with
        this path's file name, for the controller to fetch, then remove with its directory (C(remove) in RV(archive)),
        not beside this path in the log directory that the job's account owns.
        The action sets it from its C(collect_to) (a controller directory the job directory is unpacked into).
    type: path
  archive_inline_max:
    description: Largest archive (bytes) that travels inline, base64 in RV(archive).
    type: int
    default: 16777216
  watch:
    description:
      - The job's watcher (C(mt_watch.py) in the job directory, started next to the supervisor). Every rank runs
        under C(mt_rank.py), which records its exit; the watcher of the hub node collects the other nodes'
        heartbeats and stops the job on every node on the first failure or a lost node.
    type: dict
    suboptions:
      hub:
        description: This node's watcher is the hub (the first node, the c10d store host).
        type: bool
        default: false
      hub_addr:
        description: Address of the hub node; unset - this node is the only one (no network).
        type: str
      hub_node:
        description: Name of the hub node, for messages.
        type: str
      port:
        description: TCP port the hub listens on.
        type: int
      node:
        description: Name of this node in the job (the inventory host name); default the host name.
        type: str
      nodes:
        description: Names of all nodes of the job.
        type: list
        elements: str
        default: []
      token:
        description: Secret every message between the watchers carries.
        type: str
      lost:
        description: Seconds without a heartbeat after which a node is lost.
        type: int
        default: 10
      lease:
        description:
          - Seconds without a poll (O(state=status), or a followed wait) of any node of the job after which the
            job is stopped on every node; V(0) - no lease. Each node's watcher tells the hub's how old its own
            lease is, and the hub judges the job's (the controller may follow the job through some of its nodes).
        type: int
        default: 0
      start_grace:
        description:
          - Seconds, from the hub's start, after which a node never heard from is lost (the launch starts the
            nodes a few at a time, Ansible's forks). Default the rendezvous's O(rdzv_conf) C(join_timeout),
            else 600 (torchrun's own default, as long as it waits for the nodes to join).
        type: int
      fail_grace:
        description: Seconds between SIGTERM and SIGKILL when the watchers stop the job.
        type: int
        default: 5
      interval:
        description: Seconds between heartbeats.
        type: float
        default: 0.5
  exit_barrier_grace:
    description:
      - Seconds to wait, after all ranks on this node succeeded, for torchrun's exit barrier (it waits
        for the other nodes' agents; torch gives it 300 s, and an agent that failed never arrives).
        After that the node's torchrun is stopped and the node reports success with
        RV(exit_barrier_abandoned); the failing node reports the failure. V(0) waits until torchrun ends.
      - Default V(0) when O(watch.nodes) names several nodes (their watchers stop the job everywhere when
        a node fails or is lost, which ends the barrier, and a node still at work, such as a rank writing
        its last checkpoint, must not lose the first node's rendezvous store), else V(30).
    type: int
extends_documentation_fragment:
  - multinode.training.attributes
  - multinode.training.attributes.platform
  - multinode.training.progress
  - multinode.training.local_rank
attributes:
  check_mode:
    support: full
    details:
      - V(started) and V(finished) validate everything and return the command without starting it.
        V(stopped) reports what it would kill.
  diff_mode:
    support: none
  idempotent:
    support: partial
    details:
      - A launch is not idempotent by nature. Starting a job id that is running changes nothing; stopping a job
        that is gone changes nothing; a finished job id is refused rather than run again.
  platform:
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
  description: Pids that were signalled to stop the job (with V(finished) - leftovers after it ended).
  returned: state is stopped or finished
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
progress:
  description: One line - running ranks, restarts, seconds since the start, last line of local rank 0.
  returned: state is status
  type: str
live:
  description:
    - The job report's latest samples on this node (CPU plus run-queue wait summed over the local ranks of the
      latest attempt, their count, the latest sample's time, the last candidate step lines of the lowest local
      rank); null before the first sample. The action's progress lines use it (O(step_pattern)).
  returned: state is status, or with O(follow_limit) while the job runs
  type: dict
stream:
  description:
    - The lines the ranks of O(stream_ranks) on this node printed since O(stream_offsets), as C([global rank, line])
      (per rank its stdout's, then its stderr's); the action prints them and drops them from the task's result.
  returned: with O(follow_limit) and O(stream_ranks)
  type: list
  elements: list
stream_offsets:
  description: Where this poll left off in each streamed rank log, for the next poll's O(stream_offsets).
  returned: with O(follow_limit) and O(stream_ranks)
  type: dict
done:
  description: Whether the job ended on this node.
  returned: state is status, or with O(follow_limit)
  type: bool
stop_line:
  description: Why the watchers stopped the job everywhere (first failure, lost node, lease); null when they did not.
  returned: state is finished or status
  type: str
first_failure:
  description: The first failure across all nodes (node, rank, local_rank, exitcode, message, time).
  returned: state is finished and the watchers stopped the job because of a failure
  type: dict
lost:
  description: Nodes the hub declared lost.
  returned: state is finished or status
  type: list
  elements: str
archive:
  description:
    - The job directory packed for the controller - C(inline) (base64 of the tar.gz, or null), C(path) (the file
      on the node when too big for inline, or null) and C(remove) (its private directory, to remove after the
      fetch), C(size); the action unpacks it and drops it from the result.
  returned: with O(archive), when the job ended
  type: dict
survivors:
  description: Processes of the job still alive after stopping (the module fails when there are any).
  returned: state is stopped or finished
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.multinode.training.plugins.module_utils._torchrun.job import (
    ARGUMENT_SPEC,
    MUTUALLY_EXCLUSIVE,
    run_module,
)


def main():
    run_module(AnsibleModule(argument_spec=ARGUMENT_SPEC, mutually_exclusive=MUTUALLY_EXCLUSIVE,
                             supports_check_mode=True))


if __name__ == "__main__":
    main()
