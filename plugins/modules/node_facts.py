#!/usr/bin/python
# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_facts
short_description: The network and user facts of a node, from three ip calls
version_added: 0.1.0
description:
  - Gathers the facts that C(setup) gathers with C(gather_subset=[network, user]), in the same shape and
    under the same names (C(ansible_interfaces), one C(ansible_<interface>) each with C(device), C(ipv4),
    C(ipv4_secondaries) and C(ipv6), C(ansible_default_ipv4) and C(ansible_default_ipv6),
    C(ansible_all_ipv4_addresses) and C(ansible_all_ipv6_addresses), the user facts), from one
    C(ip -j -d addr show) and two C(ip -j route get) calls instead of C(setup)'s two C(ip) calls, an
    ethtool call and sysfs reads per interface.
  - C(playbooks/train.yml) calls it as its first task; it also serves as a facts module
    (C(ansible_facts_modules)). Where C(ip) has no JSON output (iproute2 older than 4.14) it gathers with
    C(setup)'s own collectors.
  - Interface facts not needed by the collection's roles (speed, features, PCI ids) are not gathered.
author:
  - multinode.training maintainers (@multinode)
options:
  account:
    description:
      - Also gather the job account's facts (C(multinode_training_account)) - this account's uid on the node
        (null where it is missing), the system uids other accounts hold and the system uid range of
        C(/etc/login.defs) - from which C(playbooks/train.yml) gives the account one uid on every node.
        Empty - the account role C(train) creates (C(mtrain)).
    type: str
  writes:
    description:
      - Also report, for each of these paths, what keeps the connecting user from writing it
        (C(multinode_training_writes)) - the path itself where it exists, else its nearest existing
        ancestor - from which C(playbooks/train.yml) names the steps that need root before any work.
        Nothing is reported for root.
    type: list
    elements: str
extends_documentation_fragment:
  - multinode.training.attributes
  - multinode.training.attributes.read_only
"""

EXAMPLES = r"""
- name: A play that gathers only what train.yml reads
  hosts: train
  gather_facts: false
  tasks:
    - name: Facts (addresses, interfaces, the connecting user)
      multinode.training.node_facts:

    - name: The address on the default route's interface
      ansible.builtin.debug:
        msg: "{{ ansible_facts.default_ipv4.address }}"
"""

RETURN = r"""
ansible_facts:
  description: The network and user facts, as C(setup) names them.
  returned: always
  type: dict
  contains:
    multinode_training_platform:
      description:
        - C(machine) (C(uname -m), C(x86_64)) and C(glibc) (its version, C(2.36); null without glibc), read
          without a subprocess - the platform role C(wheel_distribute) resolves the job requirements for.
      type: dict
      returned: always
    multinode_training_account:
      description:
        - With O(account) - C(name), C(uid) (null where the account is missing), C(used) (the system uids other
          accounts hold), C(sys_uid_min) and C(sys_uid_max).
      type: dict
      returned: when O(account) is set
    multinode_training_writes:
      description:
        - With O(writes) - each path to the directory (or file) that keeps the connecting user from writing
          it, or an empty string where nothing does; empty for root.
      type: dict
      returned: when O(writes) is set
    ansible_interfaces:
      description: The node's interface names.
      type: list
      elements: str
    ansible_default_ipv4:
      description: The default route's interface (C(interface)), its address (C(address)), gateway and prefix; {} without a route.
      type: dict
    ansible_all_ipv4_addresses:
      description: Every IPv4 address of the node but loopback's.
      type: list
      elements: str
    ansible_user_id:
      description: The connecting user.
      type: str
facts_source:
  description: C(ip) (the three calls) or C(setup) (setup's collectors, where C(ip -j) is missing).
  returned: always
  type: str
  sample: ip
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.multinode.training.plugins.module_utils._train.node_facts import ARGUMENT_SPEC, run_module


def main():
    run_module(AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True))


if __name__ == "__main__":
    main()
