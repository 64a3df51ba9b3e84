#!/usr/bin/python
# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Compare the DeepSpeed environments of all nodes and name the ones that differ."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: wheel_env_report
short_description: Consistency report of python, torch, DeepSpeed and ops across nodes
version_added: "0.1.0"
description:
  - Takes the per-node environment summaries returned by M(multinode.training.deepspeed_env_verify)
    and compares python version, torch (and its CUDA), DeepSpeed version, the loaded ops and the wheel
    sha256 across nodes.
  - The value most nodes share is the reference; every node with another value is named.
  - Pure computation; run it once, on the controller (C(run_once), C(delegate_to=localhost)).
author:
  - multinode.training maintainers (@multinode)
options:
  envs:
    description: Mapping of node name to its environment summary.
    type: dict
    required: true
  expected:
    description: Nodes that should have reported; a node listed here but absent from I(envs) is named as missing.
    type: list
    elements: str
    default: []
  fail_on_difference:
    description: Fail, naming the differing nodes, when the environments are not identical.
    type: bool
    default: true
extends_documentation_fragment:
  - multinode.training.attributes.read_only
"""

EXAMPLES = r"""
- name: Environments identical on every node
  multinode.training.wheel_env_report:
    envs: "{{ dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars, 'wheel_distribute_env'))) }}"
    expected: "{{ ansible_play_hosts_all }}"
  run_once: true
  delegate_to: localhost
"""

RETURN = r"""
consistent:
  description: True when every field is identical on every node and no expected node is missing.
  returned: always
  type: bool
differences:
  description: One message per deviating group of nodes, naming them, the field, their value and the reference.
  returned: always
  type: list
  elements: str
  sample: ["node3 has torch 2.12.0, 2 node(s) have 2.13.0+cpu"]
lines:
  description: The report, one line per field.
  returned: always
  type: list
  elements: str
fields:
  description: Per field, each value with the nodes that have it.
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.multinode.training.plugins.module_utils._wheel.verify import REPORT_SPEC, run_report_module


def main():
    run_report_module(AnsibleModule(argument_spec=REPORT_SPEC, supports_check_mode=True))


if __name__ == "__main__":
    main()
