#!/usr/bin/python
# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: train_node
short_description: Internal only - the steps of role train on one node before its launch - access, preflight probe, platform variables
version_added: 0.1.0
description:
  - The steps role P(multinode.training.train#role) takes on each node before it starts a job; each task gives exactly
    one step, as the option of that name, with the step's own options.
  - O(access) (the security step - ssh ports, firewall, the job's account, what it can reach, its directories;
    optionally the probe too, in the same round trip), O(probe) (everything preflight compares across the nodes) and
    O(platform_env) (the job variables a container platform hands each container, mapped to
    M(multinode.training.torchrun)'s options).
  - Each step returns its own values; RETURN names the step that returns each one.
  - Internal only - a play calls the role, not this module; the steps and their options change with the role's tasks.
author: multinode.training maintainers (@multinode)
options:
  access:
    description:
      - The security step of a training job on one node, in one round trip.
      - One round trip per node for the security step of role multinode.training.train, in this order.
      - Refuses a rendezvous port that is one of ssh's ports (C(Port) lines of O(access.sshd_config), 22 when there are
        none, and O(access.ssh_ports)); finds C(nft) and C(iptables), tries the job's nftables rule in nft's check mode
        (C(nft -c)) and decides whether this node guards the rendezvous port (O(access.firewall)).
      - Resolves the job's account (uid, primary and supplementary groups, home). A missing account is created when O(access.create)
        is set, its group exists and nothing stood in the way so far - as ansible.builtin.user creates a system account
        with a home on the node's own disk and no login shell (C(useradd -r -m -d /var/lib/<user> -s /usr/sbin/nologin),
        C(-u) O(access.uid), C(-g) O(access.group), C(-G) those of O(access.user_groups)
        that exist; C(-N) where a group of the account's name exists and O(access.group) is unset). An existing account
        is never changed.
      - Before the account is created - every path the job opens (O(access.job)) as the module's own user sees it - with
        C(refuse_missing) in O(access.job) a missing one, or one of another kind (a script that is a directory), is a problem;
        an env file the module's user cannot read is one (the launcher reads the env files for the job, as that user - they
        need not be the account's).
      - Checks as that account - in a child process that switched to its uid, gid and groups - that it can execute, read,
        enter or write the given paths (O(access.checks)) and the paths the job opens (O(access.job) - C(train_python) and
        its venv's C(pyvenv.cfg) and site-packages, C(train_script), C(train_chdir), the way to C(train_code_dir)). A path
        the code copy makes (C(train_code_src) set - a path of the controller's code manifest below C(train_code_dir), or C(train_code_dir)
        itself, which this call gives the account) is not checked; every other one must be reachable now. A path that does
        not exist for the module's own user is left out here (without C(refuse_missing), the launcher's preflight reports
        it).
      - Only when nothing stands in the way - starts the short-lived listener of preflight's reachability check (O(access.listen),
        on the first node - it binds the rendezvous address, detached, accepts one connection per node and exits; a port
        in use is a problem), then makes the account's O(access.directories) (owner, group, mode; changed only when one
        is created or changed), then, with O(access.probe), the preflight probe of step O(probe) -
        the security step and the preflight probe of a launch in one round trip.
      - Every problem is returned in RV(problems), one line naming the variable, the value and what is valid; the module
        itself fails only on unusable options, and with O(access.fail_on_problems) on any problem.
      - Check mode - In check mode the directories are reported, not made.
    type: dict
    suboptions:
      user:
        description:
          - The job's account (train_user).
          - Unset - only the port and firewall checks.
        type: str
      group:
        description: Primary group (train_group); unset - the account's own.
        type: str
      create:
        description: Create O(access.user) when it is missing (the role sets it when the play runs as root).
        type: bool
        default: false
      uid:
        description:
          - The uid a created O(access.user) gets (C(useradd -u)), the one it has on every node of the job (filter
            P(multinode.training.train_account_uid#filter)); unset - useradd picks one.
        type: int
      user_groups:
        description: Supplementary groups for a created account, those that exist (RV(groups_present)).
        type: list
        elements: str
        default: []
      checks:
        description:
          - What the account must be able to do - dicts with C(var) (the variable, for messages), C(path) and C(need) -
            V(x) execute, V(r) read, V(rx) enter a directory, V(w) write, V(wx) write into a directory.
        type: list
        elements: dict
        default: []
      job:
        description:
          - The job whose paths to check (P(multinode.training.train#role) passes its variables) - C(python) (train_python),
            C(venv) (train_venv, for messages), C(script) (train_script; empty - a module job), C(chdir) (train_chdir; empty
            - none), C(env_files) (dicts with C(var) and C(path)), C(configs) (C({variable - controller path}) of the accelerate
            / DeepSpeed configs, which travel into C(code_dir)), C(code_dir), C(sync_code) (train_code_src set), C(data)
            (train_data_paths - read by the account), C(checkpoint_dir) (train_checkpoint_dir - written into by the account
            where it exists), C(manifest)
            (the relative paths of train_code_src below C(code_dir); unset - those of O(access.probe)'s C(code), else not
            known - everything below C(code_dir) counts as the copy's) and C(refuse_missing) (a missing path is a problem
            here - preflight follows, which would otherwise copy the code before it refuses).
          - Unset - only O(access.checks).
        type: dict
      directories:
        description:
          - Directories owned by the account (and O(access.group) when set) - dicts with C(var) (for messages), C(path)
            and C(mode) (octal string, default V(0750)). Made only when every check passed and the account exists.
          - With C(keep_existing) true, a directory that exists is left as it is (owner and mode); only a missing one is
            made (train_checkpoint_dir - on shared storage it serves others too).
          - With C(min_free_gib) (> 0), the free space where the directory lies (its nearest existing parent before it
            is made; C(statvfs), as an unprivileged writer sees it) must be at least that many GiB, checked with the
            paths, before anything is made; C(min_free_var) names the variable in the message.
        type: list
        elements: dict
        default: []
      port:
        description: The rendezvous port (train_rdzv_port).
        type: int
        required: true
      ssh_ports:
        description: More ports that ssh uses on this node (for example the connection's C(ansible_port)).
        type: list
        elements: int
        default: []
      sshd_config:
        description: sshd configuration whose C(Port) lines name ssh's ports.
        type: path
        default: /etc/ssh/sshd_config
      firewall:
        description: train_firewall - V(auto), V(true) or V(false).
        type: str
        default: auto
      probe:
        description:
          - Also preflight's probe, after everything else passed - the options of step O(probe)
            (C(python), C(script), C(chdir), C(env_files), C(code), C(connect_host), C(connect_port), C(connect_timeout));
            RV(probe) is its result. Unset - no probe.
        type: dict
      listen:
        description:
          - Start the reachability check's listener here (the first node) - C(addr), C(port), C(expected) (connections to
            wait for, one per node) and C(timeout) (seconds it lives at most, default 135); unset - none.
          - A listener that an earlier run left on the same port is stopped first.
        type: dict
      shared:
        description:
          - Prove that C(path) (train_checkpoint_dir) is one directory every node sees, as the account, once the
            directories are made - C(path), C(token) (the same on every node, new for each run), C(node) (this node),
            C(nodes) (every node of the job), C(first) (the node whose file the others answer) and C(wait)
            (seconds each side waits for the other's file, default 30). Every node of the job must run it at the
            same time (one task). A node that does not see the other side's file within C(wait) is a problem; the
            check's files are removed. Unset - no check.
        type: dict
      node:
        description: The node's name, put before the message of a failure with O(access.fail_on_problems).
        type: str
        default: ''
      fail_on_problems:
        description:
          - Fail when there are RV(problems) instead of returning them for an assert task - the message is O(access.node),
            a colon and the problems joined by semicolons; every return value comes with it.
        type: bool
        default: false
  probe:
    description:
      - Everything a training job's preflight compares, from one node in one round trip.
      - Reads, without changing anything, what role multinode.training.train compares across the nodes before it starts
        a job - whether O(probe.python) exists and is executable, what it holds (python, torch and DeepSpeed versions, DeepSpeed's
        prebuilt ops and every installed package, read from package metadata by O(probe.python) itself, no torch import),
        the sha256 of O(probe.script), whether O(probe.chdir) is a directory, whether each of O(probe.env_files) exists,
        whether the node's copy of the training code is the controller's (O(probe.code)) and whether this node reaches the
        rendezvous address over TCP (O(probe.connect_host)).
      - Never fails for what it finds; filter P(multinode.training.train_preflight_problems#filter) compares the nodes'
        results and names every problem.
    type: dict
    suboptions:
      python:
        description: The job's python (train_python).
        type: path
        required: true
      script:
        description: The training script (train_script); unset - a module job, nothing to checksum.
        type: path
      chdir:
        description: The job's working directory (train_chdir); unset - none to check.
        type: path
      env_files:
        description: Files the job reads its environment from - dicts with C(var) (the variable, for messages) and C(path).
        type: list
        elements: dict
        default: []
      code:
        description:
          - The controller's train_code_src to compare this node's copy with - C(dest) (train_code_dir), C(manifest) (filter
            P(multinode.training.code_manifest#filter)), C(owner) and C(group) (empty - not compared). RV(code) says whether
            a copy is needed.
        type: dict
      connect_host:
        description: The rendezvous address to reach over TCP from this node; unset - no connect.
        type: str
      connect_port:
        description: Its port (train_rdzv_port).
        type: int
      connect_timeout:
        description: Seconds to keep trying (every second).
        type: int
        default: 15
  platform_env:
    description:
      - Read the job variables a container platform hands each container and map them to torchrun's options.
      - For O(platform_env.platform) V(sensecore) (C(MASTER_ADDR), C(MASTER_PORT), C(WORLD_SIZE) node count, C(RANK) node
        rank), V(aistation) (C(MASTER_ADDR), C(MASTER_PORT), C(NNODES) or C(MIN_NNODES)/C(MAX_NNODES), optional C(NPROC_PER_NODE)
        and C(RDZV_ID)) and V(generic) (like AIStation, with C(NODE_RANK)); V(auto) picks V(aistation) when C(NNODES) or
        C(MIN_NNODES)/C(MAX_NNODES) is set, V(sensecore) when C(WORLD_SIZE) is.
      - Returns the node count, the rendezvous endpoint, a rendezvous id that is the same in every container of one job
        (C(RDZV_ID) when set, else a hash of endpoint and node count) and whether this container hosts the rendezvous store
        (node rank 0 when the platform gives a node rank, else whether C(MASTER_ADDR) is one of its addresses).
      - Fails naming the missing or invalid variable and listing the platform variables the container has.
    type: dict
    suboptions:
      platform:
        description: V(auto), V(sensecore), V(aistation) or V(generic).
        type: str
        choices: [auto, sensecore, aistation, generic]
        default: auto
      nnodes:
        description: Node count V(N) or V(MIN:MAX) that overrides the platform's.
        type: str
        default: ''
      rdzv_id:
        description: Rendezvous id that overrides C(RDZV_ID) and the derived one.
        type: str
        default: ''
extends_documentation_fragment:
  - multinode.training.attributes
  - multinode.training.attributes.platform
attributes:
  check_mode:
    support: full
    details:
      - O(probe) and O(platform_env) only read; O(access) reports the account and directories it would make, and makes none.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: O(access) changes only what is missing (the account, a directory); the other steps never report a change.
  platform:
    support: full
    platforms: posix
"""

EXAMPLES = r"""
- name: May mtrain run the job here, and can this node guard the rendezvous port?
  multinode.training.train_node:
    access:
      user: mtrain
      checks:
        - {var: train_python, path: /opt/multinode-training/venv/bin/python, need: x}
        - {var: train_script, path: /opt/multinode-training/code/smoke_train.py, need: r}
      port: 29400
      ssh_ports: [22]
      firewall: auto
  register: access

- name: Fail naming node and variable
  ansible.builtin.assert:
    that: access.problems | length == 0
    fail_msg: "{{ inventory_hostname }}: {{ access.problems | join('; ') }}"

- name: The same in one task - fail on any problem, naming the node
  multinode.training.train_node:
    access:
      user: mtrain
      port: 29400
      node: "{{ inventory_hostname }}"
      fail_on_problems: true

- name: Probe every node
  multinode.training.train_node:
    probe:
      python: /opt/multinode-training/venv/bin/python
      script: /opt/multinode-training/code/smoke_train.py
      env_files:
        - {var: train_nccl, path: /etc/multinode-training/nccl.env}
  register: probe

- name: What the platform gave this container
  multinode.training.train_node:
    platform_env:
      platform: auto
  register: launch
"""

RETURN = r"""
account:
  description: The account - C(name), C(uid), C(gid), C(groups) (supplementary gids), C(group_names), C(home).
  returned: with O(access), when the account exists
  type: dict
access:
  description: Per check made as the account - C(var), C(path), C(need), C(ok), C(error), C(part_of).
  returned: with O(access)
  type: list
  elements: dict
paths:
  description:
    - Per path of O(access.checks) and O(access.job) - C(var), C(path), C(need), C(who) (V(account) or V(self), the module's
      user), C(provided) (the code copy makes it) and C(state) (V(file), V(dir), V(other), V(missing) or V(unknown), as
      the module's user sees it).
  returned: with O(access)
  type: list
  elements: dict
nft:
  description: Path of nft, or null.
  returned: with O(access)
  type: str
iptables:
  description: Path of iptables, or null.
  returned: with O(access)
  type: str
firewall:
  description: C(enabled) (this node can guard the port) and C(note) (what that means).
  returned: with O(access)
  type: dict
memlock:
  description:
    - The locked memory the job gets here - C(rdma) (the node's InfiniBand/RoCE devices) and C(limit) (bytes, null for
      unlimited). A node with RDMA devices and a limit gets a warning naming it and the way out.
  returned: with O(access)
  type: dict
ssh_ports:
  description: Ports ssh uses here.
  returned: with O(access)
  type: list
  elements: int
problems:
  description: One line per problem, naming variable, value and what is valid; empty when all is well.
  returned: with O(access)
  type: list
  elements: str
account_missing:
  description: O(access.user) did not exist on this node when the call began.
  returned: with O(access)
  type: bool
account_created:
  description: O(access.user) was created by this call (in check mode - would be).
  returned: with O(access)
  type: bool
groups_present:
  description: Those of O(access.user_groups) that exist on this node.
  returned: with O(access)
  type: list
  elements: str
directories:
  description: Per directory made or checked - C(path), C(changed).
  returned: with O(access)
  type: list
  elements: dict
probe:
  description: What step O(probe) returns, for O(access.probe); null without it or when
    there are RV(problems).
  returned: with O(access)
  type: dict
listener:
  description: The listener started for O(access.listen) - C(pid), C(error); null without O(access.listen).
  returned: with O(access)
  type: dict
shared:
  description: Whether O(access.shared)'s directory was proven shared with every node; absent without O(access.shared)
    or when a problem came before it.
  returned: with O(access.shared)
  type: bool
python:
  description: O(probe.python) and whether it is an executable file.
  returned: with O(probe)
  type: dict
  sample:
    path: /opt/multinode-training/venv/bin/python
    executable: true
environment:
  description: What O(probe.python) holds; null when it cannot run or its probe failed (see RV(probe_error)).
  returned: with O(probe)
  type: dict
  sample:
    python: 3.11.2
    torch: 2.13.0+cpu
    deepspeed: 0.19.8
    ops: [cpu_adam_op]
    packages: [torch==2.13.0+cpu]
probe_error:
  description: Why RV(environment) is null when O(probe.python) is executable.
  returned: with O(probe)
  type: str
script:
  description: O(probe.script), whether it exists and its sha256; null without O(probe.script).
  returned: with O(probe)
  type: dict
chdir:
  description: O(probe.chdir) and whether it is a directory; null without O(probe.chdir).
  returned: with O(probe)
  type: dict
env_files:
  description: Each of O(probe.env_files) with C(exists).
  returned: with O(probe)
  type: list
  elements: dict
code:
  description:
    - C(same) (the node's copy under C(dest) has every file of the manifest with its content, mode and owner), C(differ)
      (up to 20 paths that differ); null without O(probe.code).
  returned: with O(probe)
  type: dict
connect:
  description: Whether the TCP connect to O(probe.connect_host):O(probe.connect_port) succeeded (C(ok), C(error), C(seconds));
    null without O(probe.connect_host).
  returned: with O(probe)
  type: dict
platform:
  description: The platform whose mapping was used.
  returned: with O(platform_env), success
  type: str
  sample: sensecore
nnodes:
  description: C(N) or C(MIN:MAX).
  returned: with O(platform_env), success
  type: str
  sample: '2'
rdzv_endpoint:
  description: C(MASTER_ADDR:MASTER_PORT) (IPv6 bracketed).
  returned: with O(platform_env), success
  type: str
  sample: 10.0.0.11:29500
rdzv_id:
  description: Rendezvous id, the same in every container of the job.
  returned: with O(platform_env), success
  type: str
  sample: env-3f2a9c0d1e4b
job_id:
  description: Job directory name on this container - the rendezvous id plus this container's start time of the job.
  returned: with O(platform_env), success
  type: str
nproc_per_node:
  description: C(NPROC_PER_NODE) when set, else null.
  returned: with O(platform_env), success
  type: str
is_host:
  description:
    - Whether this container hosts the rendezvous store - node rank 0 where the platform gives a rank, else whether C(MASTER_ADDR)
      is one of this container's addresses.
  returned: with O(platform_env), success
  type: bool
variables:
  description: The platform variables found.
  returned: with O(platform_env)
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.multinode.training.plugins.module_utils import _stepped
from ansible_collections.multinode.training.plugins.module_utils._launch import platform_env
from ansible_collections.multinode.training.plugins.module_utils._train import access, preflight

STEPS = {
    "access": (access.ARGUMENT_SPEC, access.run_module, {}),
    "probe": (preflight.PROBE_SPEC, preflight.run_probe_module, dict(required_by=preflight.PROBE_REQUIRED_BY)),
    "platform_env": (platform_env.ARGUMENT_SPEC, platform_env.run_module, {}),
}


def main():
    _stepped.run(AnsibleModule(**_stepped.module_args(STEPS)), STEPS)


if __name__ == "__main__":
    main()
