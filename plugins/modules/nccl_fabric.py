#!/usr/bin/python
# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Detect a node's RDMA fabric from sysfs and plan its NCCL settings."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: nccl_fabric
short_description: Detect a node's InfiniBand / RoCE / Ethernet fabric and plan its NCCL settings
version_added: 0.1.0
description:
  - Reads the RDMA devices (C(class/infiniband/<dev>/ports/<n>/{state,phys_state,link_layer,rate,gids,gid_attrs}))
    and network interfaces (C(class/net/<if>)) under O(sysfs_root) and classifies every port as
    InfiniBand, RoCE (v1/v2) or down.
  - Skips ports that are not ACTIVE and ports of devices matching O(exclude) (storage HCAs, bonds).
  - Plans the NCCL settings that fit the fabric, for C(/etc/nccl.conf), and the environment for the launcher.
    InfiniBand and RoCE get the exact HCA list (C(NCCL_IB_HCA==mlx5_0:1,...)); RoCE also gets the GID
    index of the RoCE v2 IPv4-mapped GID on the data netdev when NCCL is older than 2.21 or when asked;
    plain Ethernet gets C(NCCL_NET=Socket). Every fabric gets C(NCCL_SOCKET_IFNAME==<cluster interface>).
  - Reports whether the GPU driver is loaded and whether C(nvidia_peermem) is, from O(proc_root) and O(sysfs_root).
  - Fails, before anything is written by the caller, on an absent or unreadable O(sysfs_root), a O(fabric)
    the node cannot provide, or an override naming an HCA or interface the node does not have; the message
    names the node, the value and the devices the node has.
  - Reads only; never changes the node.
author:
  - multinode.training maintainers (@multinode)
extends_documentation_fragment:
  - multinode.training.attributes
  - multinode.training.attributes.read_only
  - multinode.training.node_name
options:
  sysfs_root:
    description: Root of the sysfs tree to read (a recorded tree in tests).
    type: path
    default: /sys
  proc_root:
    description: Root of the procfs tree used for C(modules) and C(driver/nvidia/gpus).
    type: path
    default: /proc
  fabric:
    description:
      - V(auto) picks InfiniBand if a usable ACTIVE InfiniBand port exists, else RoCE, else sockets.
      - V(ib) and V(roce) fail when the node has no usable ACTIVE port of that kind.
      - V(socket) forces C(NCCL_NET=Socket).
    type: str
    choices: [auto, ib, roce, socket]
    default: auto
  exclude:
    description:
      - Shell-style patterns (fnmatch) of ports NCCL must not use, matched against the device name
        (V(mlx5_8)), V(device:port) and the port's netdevs (V(bond*)).
    type: list
    elements: str
    default: []
  cluster_interface:
    description:
      - Interface that carries the node's cluster address, used for C(NCCL_SOCKET_IFNAME) (bootstrap and
        socket traffic). Must exist under O(sysfs_root)C(/class/net). Empty leaves C(NCCL_SOCKET_IFNAME) unset.
    type: str
    default: ''
  nccl_version:
    description:
      - NCCL version of the training environment (V(2.18.6)), or V(auto) when unknown.
      - Decides, with O(roce_gid_index=auto), whether C(NCCL_IB_GID_INDEX) is set (NCCL older than 2.21).
    type: str
    default: auto
  roce_gid_index:
    description:
      - V(auto) sets C(NCCL_IB_GID_INDEX) on RoCE when O(nccl_version) is known and older than 2.21;
        V(always) sets it whenever it can be determined; V(never) leaves it to NCCL.
    type: str
    choices: [auto, always, never]
    default: auto
  forbid_socket_fallback:
    description:
      - On InfiniBand and RoCE, set C(NCCL_NET=IB) so that NCCL fails at init instead of silently
        falling back to sockets.
    type: bool
    default: true
  overrides:
    description:
      - NCCL settings that replace or add to the planned ones (C(NCCL_IB_QPS_PER_CONNECTION), ...).
        A null or empty value removes a planned setting.
      - C(NCCL_IB_HCA) and C(NCCL_SOCKET_IFNAME) overrides are checked against the node's devices and interfaces.
    type: dict
    default: {}
  conf_path:
    description:
      - Where the caller writes the settings. When not C(/etc/nccl.conf), the launcher environment
        gets C(NCCL_CONF_FILE) so NCCL still reads it.
    type: path
    default: /etc/nccl.conf
  env:
    description: Extra variables passed through to the launcher environment; a null or empty value removes one.
    type: dict
    default: {}
  async_error_handling:
    description: Put C(TORCH_NCCL_ASYNC_ERROR_HANDLING=1) in the launcher environment.
    type: bool
    default: true
  debug:
    description: C(NCCL_DEBUG) for the launcher environment (V(INFO) to let the log check see the transport); empty to leave unset.
    type: str
    default: ''
notes:
  - Detection reads files only; it does not need C(ibv_devinfo) or C(rdma-core) on the node.
seealso:
  - module: multinode.training.nccl_log_check
"""

EXAMPLES = r"""
- name: Plan NCCL settings for this node
  multinode.training.nccl_fabric:
    exclude: ["mlx5_8", "*bond*"]
    cluster_interface: "{{ ansible_default_ipv4.interface }}"
    node_name: "{{ inventory_hostname }}"
  register: fabric

- name: Plan from a recorded sysfs tree, forcing RoCE with the GID index set
  multinode.training.nccl_fabric:
    sysfs_root: /fixture-sysfs
    proc_root: /fixture-proc
    fabric: roce
    roce_gid_index: always
    cluster_interface: eth0
    overrides:
      NCCL_IB_QPS_PER_CONNECTION: 4
"""

RETURN = r"""
fabric:
  description: The fabric chosen for NCCL.
  returned: success
  type: str
  sample: ib
ports:
  description: The ports given to NCCL, as C(device:port).
  returned: success
  type: list
  elements: str
  sample: [mlx5_0:1, mlx5_1:1]
active_rdma_ports:
  description: Every ACTIVE InfiniBand or RoCE port that is not excluded, whatever the chosen fabric.
  returned: success
  type: list
  elements: str
  sample: [mlx5_0:1, mlx5_1:1]
rate:
  description: Link rate of the first port given to NCCL.
  returned: success
  type: str
  sample: 400 Gb/sec (4X NDR)
excluded:
  description: Ports skipped by O(exclude), with the pattern that matched.
  returned: success
  type: list
  elements: dict
  sample: [{port: "mlx5_8:1", pattern: "mlx5_8"}]
down:
  description: Ports that are not ACTIVE.
  returned: success
  type: list
  elements: dict
  sample: [{port: "mlx5_5:1", state: DOWN, phys_state: Polling}]
unused:
  description: ACTIVE RDMA ports of the other kind, not given to NCCL.
  returned: success
  type: list
  elements: str
  sample: []
socket_ifname:
  description: The interface used for C(NCCL_SOCKET_IFNAME), or null.
  returned: success
  type: str
  sample: eth0
gid_index:
  description: The RoCE v2 IPv4-mapped GID index found on the data netdev (set in C(settings) only when wanted).
  returned: success
  type: int
  sample: 3
nccl_version:
  description: The NCCL version the plan assumed, or null when unknown.
  returned: success
  type: str
  sample: 2.18.6
settings:
  description: NCCL settings for C(/etc/nccl.conf), in order.
  returned: success
  type: dict
  sample: {NCCL_NET: IB, NCCL_IB_HCA: "=mlx5_0:1,mlx5_1:1", NCCL_SOCKET_IFNAME: "=eth0"}
env:
  description: Environment for the launcher (the env file), in order.
  returned: success
  type: dict
  sample: {TORCH_NCCL_ASYNC_ERROR_HANDLING: "1"}
signature:
  description: What nodes of one job should share (fabric, port count, rate); compared across nodes.
  returned: success
  type: str
  sample: ib x8 @ 400 Gb/sec (4X NDR)
gpu:
  description: GPU driver state.
  returned: success
  type: dict
  sample: {nvidia_driver: true, gpu_count: 8, peermem_loaded: false}
fabric_warnings:
  description: Findings that do not stop the run (also emitted as warnings).
  returned: success
  type: list
  elements: str
  sample: ["node1: mlx5_8:1 (200 Gb/sec (4X HDR)) run at another rate than the other 7 ports"]
devices:
  description: Every RDMA device read, with its ports, GIDs and netdevs.
  returned: success
  type: list
  elements: dict
netdevs:
  description: Every network interface read under C(class/net), by name.
  returned: success
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.multinode.training.plugins.module_utils._nccl.node_plan import ARGUMENT_SPEC, run_module


def main():
    run_module(AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True))


if __name__ == "__main__":
    main()
