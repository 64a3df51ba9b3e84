#!/usr/bin/python
# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: train_access
short_description: The security step of a training job on one node, in one round trip
version_added: 0.1.0
description:
  - One round trip per node for the security step of role multinode.training.train, in this order.
  - Refuses a rendezvous port that is one of ssh's ports (C(Port) lines of O(sshd_config), 22 when there are
    none, and O(ssh_ports)); finds C(nft) and C(iptables), tries the job's nftables rule in nft's check mode
    (C(nft -c)) and decides whether this node guards the rendezvous port (O(firewall)).
  - Resolves the job's account (uid, primary and supplementary groups, home). A missing account is
    created when O(create) is set, its group exists and nothing stood in the way so far - as
    ansible.builtin.user creates a system account with a home and no login shell (C(useradd -r -m -s
    /usr/sbin/nologin), C(-g) O(group), C(-G) those of O(user_groups) that exist; C(-N) where a group of
    the account's name exists and O(group) is unset). An existing account is never changed.
  - Before the account is created - every path the job opens (O(job)) as the module's own user sees it -
    with C(refuse_missing) in O(job) a missing one, or one of another kind (a script that is a directory), is a
    problem; an env file the module's user cannot read is one (the launcher reads the env files for the job,
    as that user - they need not be the account's).
  - Checks as that account - in a child process that switched to its uid, gid and groups - that it can
    execute, read, enter or write the given paths (O(checks)) and the paths the job opens (O(job) -
    C(train_python) and its venv's C(pyvenv.cfg) and site-packages, C(train_script), C(train_chdir), the way to
    C(train_code_dir)). A path the code copy makes (C(train_sync_code) - a path of the controller's code
    manifest below C(train_code_dir), or C(train_code_dir) itself, which this call gives the account) is not
    checked; every other one must be reachable now. A path that does not exist for the module's own user is
    left out here (without C(refuse_missing), the launcher's preflight reports it).
  - Only when nothing stands in the way - starts the short-lived listener of preflight's reachability check
    (O(listen), on the first node - it binds the rendezvous address, detached, accepts one connection per node
    and exits; a port in use is a problem), then makes the account's O(directories) (owner, group, mode;
    changed only when one is created or changed), then, with O(probe), the preflight probe of module
    P(multinode.training.train_probe#module) - the security step and the preflight probe of a launch in one
    round trip.
  - Every problem is returned in RV(problems), one line naming the variable, the value and what is valid;
    the module itself fails only on unusable options, and with O(fail_on_problems) on any problem.
author:
  - multinode.training maintainers (@multinode)
options:
  user:
    description:
      - The job's account (train_user).
      - Unset - only the port and firewall checks.
    type: str
  group:
    description: Primary group (train_group); unset - the account's own.
    type: str
  create:
    description: Create O(user) when it is missing (the role sets it when the play runs as root).
    type: bool
    default: false
  user_groups:
    description: Supplementary groups for a created account, those that exist (RV(groups_present)).
    type: list
    elements: str
    default: []
  checks:
    description:
      - What the account must be able to do - dicts with C(var) (the variable, for messages), C(path) and
        C(need) - V(x) execute, V(r) read, V(rx) enter a directory, V(w) write.
    type: list
    elements: dict
    default: []
  job:
    description:
      - The job whose paths to check (P(multinode.training.train#role) passes its variables) - C(python)
        (train_python), C(venv) (train_venv, for messages), C(script) (train_script; empty - a module job),
        C(chdir) (train_chdir; empty - none), C(env_files) (dicts with C(var) and C(path)), C(configs)
        (C({variable - controller path}) of the accelerate / DeepSpeed configs, which travel into C(code_dir)),
        C(code_dir), C(sync_code) (train_sync_code), C(manifest) (the relative paths of train_code_src below
        C(code_dir); unset - those of O(probe)'s C(code), else not known - everything below C(code_dir) counts
        as the copy's) and C(refuse_missing) (a missing path is a problem here - preflight follows, which would
        otherwise copy the code before it refuses).
      - Unset - only O(checks).
    type: dict
  directories:
    description:
      - Directories owned by the account (and O(group) when set) - dicts with C(var) (for messages), C(path)
        and C(mode) (octal string, default V(0750)). Made only when every check passed and the account exists.
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
      - Also preflight's probe, after everything else passed - the options of module
        P(multinode.training.train_probe#module) (C(python), C(script), C(chdir), C(env_files), C(code),
        C(connect_host), C(connect_port), C(connect_timeout)); RV(probe) is its result. Unset - no probe.
    type: dict
  listen:
    description:
      - Start the reachability check's listener here (the first node) - C(addr), C(port), C(expected)
        (connections to wait for, one per node) and C(timeout) (seconds it lives at most); unset - none.
      - A listener that an earlier run left on the same port is stopped first.
    type: dict
  node:
    description: The node's name, put before the message of a failure with O(fail_on_problems).
    type: str
    default: ""
  fail_on_problems:
    description:
      - Fail when there are RV(problems) instead of returning them for an assert task - the message is O(node),
        a colon and the problems joined by semicolons; every return value comes with it.
    type: bool
    default: false
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
    details:
      - In check mode the directories are reported, not made.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
  idempotent:
    description: Whether the module changes nothing when run twice.
    support: full
  platform:
    description: Target OS/families that can be operated against.
    support: full
    platforms: posix
"""

EXAMPLES = r"""
- name: May mtrain run the job here, and can this node guard the rendezvous port?
  multinode.training.train_access:
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
  multinode.training.train_access:
    user: mtrain
    port: 29400
    node: "{{ inventory_hostname }}"
    fail_on_problems: true
"""

RETURN = r"""
account:
  description: The account - C(name), C(uid), C(gid), C(groups) (supplementary gids), C(group_names), C(home).
  returned: when the account exists
  type: dict
access:
  description: Per check made as the account - C(var), C(path), C(need), C(ok), C(error), C(part_of).
  returned: always
  type: list
  elements: dict
paths:
  description:
    - Per path of O(checks) and O(job) - C(var), C(path), C(need), C(who) (V(account) or V(self), the module's
      user), C(provided) (the code copy makes it) and C(state) (V(file), V(dir), V(other), V(missing) or
      V(unknown), as the module's user sees it).
  returned: always
  type: list
  elements: dict
nft:
  description: Path of nft, or null.
  returned: always
  type: str
iptables:
  description: Path of iptables, or null.
  returned: always
  type: str
firewall:
  description: C(enabled) (this node can guard the port) and C(note) (what that means).
  returned: always
  type: dict
ssh_ports:
  description: Ports ssh uses here.
  returned: always
  type: list
  elements: int
problems:
  description: One line per problem, naming variable, value and what is valid; empty when all is well.
  returned: always
  type: list
  elements: str
account_missing:
  description: O(user) did not exist on this node when the call began.
  returned: always
  type: bool
account_created:
  description: O(user) was created by this call (in check mode - would be).
  returned: always
  type: bool
groups_present:
  description: Those of O(user_groups) that exist on this node.
  returned: always
  type: list
  elements: str
directories:
  description: Per directory made or checked - C(path), C(changed).
  returned: always
  type: list
  elements: dict
probe:
  description: What module P(multinode.training.train_probe#module) returns, for O(probe); null without it or when there are RV(problems).
  returned: always
  type: dict
listener:
  description: The listener started for O(listen) - C(pid), C(error); null without O(listen).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.multinode.training.plugins.module_utils._train.access import ARGUMENT_SPEC, run_module


def main():
    run_module(AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True))


if __name__ == "__main__":
    main()
