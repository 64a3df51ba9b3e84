# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a node's sysfs tree says about its fabric (pure reading; no Ansible imports).

`read_sysfs(root)` reads the RDMA devices (class/infiniband/<dev>/ports/<n>/...) and
network interfaces (class/net/<if>/...) under `root` (normally /sys, in tests a recorded
tree); `read_gpu_state(sysfs_root, proc_root)` the GPU driver and GPUDirect RDMA modules.
What NCCL should be told about it is _nccl.fabric's `plan`.
"""
from __future__ import annotations

import os
import re

# A port's rate is read as the fabric check's probe reads it on the nodes.
from ansible_collections.multinode.training.plugins.module_utils._node.fabric_probe import parse_rate

IPV4_MAPPED_PREFIX = "0000:0000:0000:0000:0000:ffff:"
ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"


class FabricError(Exception):
    """Bad input or an unusable tree; the message is meant for the user as is."""


def _read(path):
    """Stripped content of a sysfs attribute, or None when absent/unreadable (EINVAL on empty GIDs)."""
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return None


def _listdir(path):
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def natural_key(name):
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _parse_state(text):
    """'4: ACTIVE' -> 'ACTIVE'; '5: LinkUp' -> 'LinkUp'; None -> 'UNKNOWN'."""
    if not text:
        return "UNKNOWN"
    return text.split(":", 1)[-1].strip()


def gid_ipv4(gid):
    """The IPv4 address of an IPv4-mapped GID (::ffff:a.b.c.d), else None."""
    if not gid or not gid.lower().startswith(IPV4_MAPPED_PREFIX):
        return None
    tail = gid.lower()[len(IPV4_MAPPED_PREFIX):].split(":")
    if len(tail) != 2:
        return None
    value = int(tail[0], 16) << 16 | int(tail[1], 16)
    return ".".join(str((value >> shift) & 0xFF) for shift in (24, 16, 8, 0))


def _read_netdev(root, name):
    base = os.path.join(root, "class", "net", name)
    bonding = os.path.isdir(os.path.join(base, "bonding"))
    slaves = (_read(os.path.join(base, "bonding", "slaves")) or "").split() if bonding else []
    dev_type = _read(os.path.join(base, "type"))
    return {
        "name": name,
        "operstate": _read(os.path.join(base, "operstate")) or "unknown",
        "address": _read(os.path.join(base, "address")),
        "mtu": int(_read(os.path.join(base, "mtu")) or 0),
        # ARPHRD: 1 ethernet, 32 infiniband (IPoIB), 772 loopback
        "type": {"1": "ether", "32": "infiniband", "772": "loopback"}.get(dev_type or "", dev_type or "unknown"),
        "bond": bonding,
        "slaves": slaves,
        "dev_port": _read(os.path.join(base, "dev_port")),
    }


def _read_port(dev_dir, device, port, device_netdevs, netdevs):
    pdir = os.path.join(dev_dir, "ports", port)
    gids = []
    for index in sorted(_listdir(os.path.join(pdir, "gids")), key=natural_key):
        gid = _read(os.path.join(pdir, "gids", index))
        if not gid or gid == ZERO_GID:
            continue
        gids.append({
            "index": int(index),
            "gid": gid,
            "type": _read(os.path.join(pdir, "gid_attrs", "types", index)),
            "ndev": _read(os.path.join(pdir, "gid_attrs", "ndevs", index)),
            "ipv4": gid_ipv4(gid),
        })
    link_layer = _read(os.path.join(pdir, "link_layer")) or "InfiniBand"
    state = _parse_state(_read(os.path.join(pdir, "state")))
    phys_state = _parse_state(_read(os.path.join(pdir, "phys_state")))
    rate = _read(os.path.join(pdir, "rate"))
    # The port's data netdev: for RoCE the netdev its GIDs are bound to (bond0 for a
    # LAG device), otherwise the device's netdev whose dev_port matches the port.
    netdev = next((g["ndev"] for g in gids if g["ndev"]), None)
    if netdev is None and device_netdevs:
        if len(device_netdevs) == 1:
            netdev = device_netdevs[0]
        else:
            for name in device_netdevs:
                if (netdevs.get(name) or {}).get("dev_port") == str(int(port) - 1):
                    netdev = name
    if state != "ACTIVE":
        kind = "down"
    elif link_layer == "InfiniBand":
        kind = "ib"
    elif link_layer == "Ethernet":
        kind = "roce"
    else:
        kind = "unknown"
    types = {g["type"] for g in gids}
    return {
        "device": device,
        "port": int(port),
        "name": "%s:%s" % (device, port),
        "state": state,
        "phys_state": phys_state,
        "link_layer": link_layer,
        "rate": rate,
        "rate_gbps": parse_rate(rate),
        "kind": kind,
        "roce_version": ("v2" if "RoCE v2" in types else "v1") if link_layer == "Ethernet" else None,
        "netdev": netdev,
        "gids": gids,
    }


def read_sysfs(root):
    """Devices, ports and netdevs under a sysfs tree. Raises FabricError when the tree is unusable."""
    if not os.path.isdir(root):
        raise FabricError("sysfs root %s does not exist or is not a directory" % root)
    if not os.access(root, os.R_OK | os.X_OK):
        raise FabricError("sysfs root %s is not readable" % root)
    net_dir = os.path.join(root, "class", "net")
    if not os.path.isdir(net_dir):
        raise FabricError("sysfs root %s has no class/net: not a sysfs tree (entries: %s)"
                          % (root, ", ".join(_listdir(root)) or "none"))
    netdevs = {name: _read_netdev(root, name) for name in _listdir(net_dir)}
    ib_dir = os.path.join(root, "class", "infiniband")
    devices = []
    for device in sorted(_listdir(ib_dir), key=natural_key):
        dev_dir = os.path.join(ib_dir, device)
        device_netdevs = _listdir(os.path.join(dev_dir, "device", "net"))
        ports = [_read_port(dev_dir, device, port, device_netdevs, netdevs)
                 for port in sorted(_listdir(os.path.join(dev_dir, "ports")), key=natural_key)]
        devices.append({
            "name": device,
            "fw_ver": _read(os.path.join(dev_dir, "fw_ver")),
            "node_desc": _read(os.path.join(dev_dir, "node_desc")),
            "netdevs": device_netdevs,
            "ports": ports,
        })
    return {
        "root": root,
        "has_infiniband_class": os.path.isdir(ib_dir),
        "devices": devices,
        "netdevs": netdevs,
    }


def read_gpu_state(sysfs_root, proc_root):
    """GPU driver and GPUDirect RDMA module state: nvidia / nvidia_peermem (or legacy nv_peer_mem)."""
    modules_text = _read(os.path.join(proc_root, "modules")) or ""
    loaded = {line.split()[0] for line in modules_text.splitlines() if line.strip()}

    def present(name):
        return name in loaded or os.path.isdir(os.path.join(sysfs_root, "module", name))

    gpus = _listdir(os.path.join(proc_root, "driver", "nvidia", "gpus"))
    return {
        "nvidia_driver": present("nvidia"),
        "gpu_count": len(gpus),
        "peermem_loaded": present("nvidia_peermem") or present("nv_peer_mem"),
    }
