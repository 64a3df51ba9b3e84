# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Module nccl_fabric's work on a node: read its sysfs, plan its NCCL settings, report the GPU state.

Pure reading (sysfs.py) and planning (fabric.py) happen there; this file holds the module's argument
spec and the one call that turns the plan into the module's result and warnings.
"""
from __future__ import annotations

import socket

from ansible_collections.multinode.training.plugins.module_utils._nccl.fabric import (
    FABRICS,
    GID_INDEX_MODES,
    FabricError,
    launcher_env,
    plan,
)
from ansible_collections.multinode.training.plugins.module_utils._nccl.sysfs import read_gpu_state, read_sysfs

ARGUMENT_SPEC = dict(
    sysfs_root=dict(type="path", default="/sys"),
    proc_root=dict(type="path", default="/proc"),
    fabric=dict(type="str", choices=list(FABRICS), default="auto"),
    exclude=dict(type="list", elements="str", default=[]),
    cluster_interface=dict(type="str", default=""),
    nccl_version=dict(type="str", default="auto"),
    roce_gid_index=dict(type="str", choices=list(GID_INDEX_MODES), default="auto"),
    forbid_socket_fallback=dict(type="bool", default=True),
    overrides=dict(type="dict", default={}),
    conf_path=dict(type="path", default="/etc/nccl.conf"),
    env=dict(type="dict", default={}),
    async_error_handling=dict(type="bool", default=True),
    debug=dict(type="str", default=""),
    node_name=dict(type="str"),
)

PEERMEM_WARNING = ("%s: nvidia_peermem is not loaded: GPUDirect RDMA (GDRDMA) is off unless the driver "
                   "supports DMA-BUF; run `modprobe nvidia_peermem` (and add it to /etc/modules-load.d)")


def node_warnings(node, result, gpu):
    """The plan's warnings, plus nvidia_peermem's absence on an RDMA fabric with the GPU driver loaded."""
    warnings = list(result.pop("warnings"))
    if result["fabric"] in ("ib", "roce") and gpu["nvidia_driver"] and not gpu["peermem_loaded"]:
        warnings.append(PEERMEM_WARNING % node)
    return warnings


def active_rdma_ports(detected, result):
    """Every ACTIVE InfiniBand or RoCE port that the plan did not exclude, whatever fabric it chose."""
    excluded = {e["port"] for e in result["excluded"]}
    return [p["name"] for d in detected["devices"] for p in d["ports"]
            if p["kind"] in ("ib", "roce") and p["name"] not in excluded]


def run_module(module):
    """The module nccl_fabric: fail naming the node on a FabricError, else the plan and what was read."""
    params = module.params
    node = params["node_name"] or socket.gethostname()
    try:
        detected = read_sysfs(params["sysfs_root"])
        result = plan(detected, fabric=params["fabric"], exclude=params["exclude"],
                      cluster_interface=params["cluster_interface"], nccl_version=params["nccl_version"],
                      roce_gid_index=params["roce_gid_index"],
                      forbid_socket_fallback=params["forbid_socket_fallback"], overrides=params["overrides"],
                      node=node)
    except FabricError as exc:
        message = str(exc)
        if not message.startswith(node + ":"):
            message = "%s: %s" % (node, message)
        module.fail_json(msg=message)
    gpu = read_gpu_state(params["sysfs_root"], params["proc_root"])
    warnings = node_warnings(node, result, gpu)
    for warning in warnings:
        module.warn(warning)
    module.exit_json(
        changed=False,
        env=launcher_env(params["conf_path"], params["env"], params["async_error_handling"], params["debug"]),
        gpu=gpu,
        active_rdma_ports=active_rdma_ports(detected, result),
        fabric_warnings=warnings,
        devices=detected["devices"],
        netdevs=detected["netdevs"],
        **result
    )
