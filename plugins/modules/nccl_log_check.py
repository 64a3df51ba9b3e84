#!/usr/bin/python
# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Report the transport an NCCL job used, from its NCCL_DEBUG=INFO output."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: nccl_log_check
short_description: Tell which transport (IB, RoCE, Socket) an NCCL job actually used, from its NCCL_DEBUG=INFO log
version_added: 0.1.0
description:
  - >-
    Parses C(NCCL_DEBUG=INFO) output (C(NET/IB : Using [0]mlx5_0:1/IB ...), C(NET/Socket : Using ...),
    C(NET/IB : No device found.), C(Using network ...), C(Channel ... via NET/IB/0/GDRDMA)) and reports
    the transport per host, per process and per rank, and whether GPUDirect RDMA was used.
  - Flags a socket fallback on a node that has active InfiniBand or RoCE ports (O(active_ib)) and, with
    O(fail_on_fallback), fails with a message naming the node, its ranks and the likely cause.
  - Reads only; never changes the node.
author:
  - multinode.training maintainers (@multinode)
extends_documentation_fragment:
  - multinode.training.attributes
  - multinode.training.attributes.read_only
  - multinode.training.node_name
options:
  paths:
    description: Log files on the node to read (launcher or rank logs holding NCCL INFO lines).
    type: list
    elements: path
    default: []
  content:
    description: Log text to parse in addition to O(paths) (for example a registered C(stdout)).
    type: str
    default: ''
  active_ib:
    description:
      - Whether the node has active InfiniBand or RoCE ports (C(nccl_tuning_detected.active_rdma_ports) not empty).
        Every host in the log is then expected to use them.
    type: bool
    default: false
  fail_on_fallback:
    description: Fail when a socket fallback is found on a node with O(active_ib); otherwise only warn.
    type: bool
    default: true
  require_info:
    description: Fail when the logs hold no NCCL INFO line at all (NCCL_DEBUG=INFO was not set).
    type: bool
    default: false
seealso:
  - module: multinode.training.nccl_fabric
"""

EXAMPLES = r"""
- name: Check that the job did not fall back to sockets
  multinode.training.nccl_log_check:
    paths: [/var/log/multinode-training/job-42/rank0.log]
    active_ib: "{{ nccl_tuning_detected.active_rdma_ports | length > 0 }}"
    node_name: "{{ inventory_hostname }}"
  register: nccl_transport

- name: Parse a registered launcher output on the controller, report only
  multinode.training.nccl_log_check:
    content: "{{ launch.stdout }}"
    active_ib: true
    fail_on_fallback: false
  delegate_to: localhost
"""

RETURN = r"""
hosts:
  description: Per host seen in the log, the transport(s), ranks, devices and whether GDRDMA was used.
  returned: always
  type: dict
  sample:
    gpu-node01: {transport: IB, transports: [IB], ranks: [0, 1], ib_devices: ["mlx5_0:1"], socket_devices: [],
                 no_ib_device: false, gdrdma: true, inter_node: true, version: 2.21.5+cuda12.4}
ranks:
  description: Per rank, its host, pid, transport and GDRDMA use.
  returned: always
  type: dict
  sample: {"0": {host: gpu-node01, pid: 2841, transport: IB, gdrdma: true}}
transports:
  description: Every transport seen, sorted.
  returned: always
  type: list
  elements: str
  sample: [IB]
summary:
  description: One line per host.
  returned: always
  type: list
  elements: str
  sample: ["gpu-node01: IB (GDRDMA) ranks 0,1 via mlx5_0:1,mlx5_1:1"]
fallback:
  description: Whether a socket fallback on a node with active IB/RoCE ports was found.
  returned: always
  type: bool
fallbacks:
  description: The hosts that fell back, with their ranks and the likely cause.
  returned: always
  type: list
  elements: dict
  sample: [{host: gpu-node01, ranks: [0], reason: "NET/IB : No device found ...", interfaces: [eth0]}]
lines:
  description: Number of NCCL INFO/WARN lines read.
  returned: always
  type: int
  sample: 32
files:
  description: The files read.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.multinode.training.plugins.module_utils._nccl.log_check import (
    ARGUMENT_SPEC,
    REQUIRED_ONE_OF,
    run_module,
)


def main():
    run_module(AnsibleModule(argument_spec=ARGUMENT_SPEC, required_one_of=REQUIRED_ONE_OF, supports_check_mode=True))


if __name__ == "__main__":
    main()
