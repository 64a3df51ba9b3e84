# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fabric detection and NCCL planning from a sysfs tree (pure; no Ansible imports).

`read_sysfs(root)` reads the RDMA devices (class/infiniband/<dev>/ports/<n>/...) and
network interfaces (class/net/<if>/...) under `root` (normally /sys, in tests a recorded
tree). `plan(...)` turns that into the NCCL settings that fit the node:

- InfiniBand: NCCL_IB_HCA with the exact-match form (`=mlx5_0:1,...`, so `mlx5_1` does
  not also pick `mlx5_10..19`), only ACTIVE ports of devices not excluded by pattern;
- RoCE: the same, plus NCCL_IB_GID_INDEX (the RoCE v2 IPv4-mapped GID on the port's
  data netdev) when NCCL is older than 2.21 or when asked;
- Ethernet only: NCCL_NET=Socket;
- every fabric: NCCL_SOCKET_IFNAME (`=<if>`) on the interface carrying the cluster address.

Errors are raised as FabricError with a message that names the node, the value and
what the node has, so a caller can show it unchanged.
"""
from __future__ import annotations

import fnmatch
import os
import re

FABRICS = ("auto", "ib", "roce", "socket")
GID_INDEX_MODES = ("auto", "always", "never")
# NCCL 2.21 selects the RoCE GID itself (NCCL_IB_ROCE_VERSION_NUM / NCCL_IB_ADDR_FAMILY).
GID_AUTOSELECT_VERSION = (2, 21)
IPV4_MAPPED_PREFIX = "0000:0000:0000:0000:0000:ffff:"
ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
DEFAULT_CONF_PATH = "/etc/nccl.conf"


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


def _natural_key(name):
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _parse_state(text):
    """'4: ACTIVE' -> 'ACTIVE'; '5: LinkUp' -> 'LinkUp'; None -> 'UNKNOWN'."""
    if not text:
        return "UNKNOWN"
    return text.split(":", 1)[-1].strip()


def parse_rate(text):
    """'400 Gb/sec (4X NDR)' -> 400.0; unparsable -> None."""
    match = re.match(r"\s*([\d.]+)\s*Gb/sec", text or "")
    return float(match.group(1)) if match else None


def gid_ipv4(gid):
    """The IPv4 address of an IPv4-mapped GID (::ffff:a.b.c.d), else None."""
    if not gid or not gid.lower().startswith(IPV4_MAPPED_PREFIX):
        return None
    tail = gid.lower()[len(IPV4_MAPPED_PREFIX):].split(":")
    if len(tail) != 2:
        return None
    value = int(tail[0], 16) << 16 | int(tail[1], 16)
    return ".".join(str((value >> shift) & 0xFF) for shift in (24, 16, 8, 0))


def parse_version(text):
    """'2.18.3' / '2.21' / 'v2.19.3-1' -> (2, 18, 3); 'auto', '', None -> None."""
    match = re.match(r"^v?(\d+)\.(\d+)(?:\.(\d+))?", str(text or "").strip())
    if not match:
        return None
    return tuple(int(part) for part in match.groups("0"))


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
    for index in sorted(_listdir(os.path.join(pdir, "gids")), key=_natural_key):
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
    for device in sorted(_listdir(ib_dir), key=_natural_key):
        dev_dir = os.path.join(ib_dir, device)
        device_netdevs = _listdir(os.path.join(dev_dir, "device", "net"))
        ports = [_read_port(dev_dir, device, port, device_netdevs, netdevs)
                 for port in sorted(_listdir(os.path.join(dev_dir, "ports")), key=_natural_key)]
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


def _excluded_by(port, device_netdevs, patterns):
    """The first pattern that excludes a port (matched on device, device:port or netdev), else None."""
    candidates = [port["device"], port["name"]] + ([port["netdev"]] if port["netdev"] else []) + list(device_netdevs)
    for pattern in patterns:
        if any(fnmatch.fnmatchcase(candidate, pattern) for candidate in candidates):
            return pattern
    return None


def describe_devices(detected):
    """'mlx5_0:1 (InfiniBand, ACTIVE, 400 Gb/sec (4X NDR)), ...' for error messages."""
    parts = []
    for device in detected["devices"]:
        for port in device["ports"]:
            parts.append("%s (%s, %s%s)" % (port["name"], port["link_layer"], port["state"],
                                            ", " + port["rate"] if port["rate"] else ""))
    if not parts:
        where = "class/infiniband" if detected.get("has_infiniband_class") else "no class/infiniband"
        return "no RDMA device (%s under %s)" % (where, detected["root"])
    return ", ".join(parts)


def _hca_tokens(value):
    """NCCL_IB_HCA syntax: optional '^' (exclude) and '=' (exact), then comma list of dev[:port]."""
    text = str(value)
    text = text[1:] if text.startswith("^") else text
    text = text[1:] if text.startswith("=") else text
    return [token.strip() for token in text.split(",") if token.strip()]


def _validate_override_hca(value, detected, node):
    known = {d["name"]: {p["port"] for p in d["ports"]} for d in detected["devices"]}
    exact = str(value).lstrip("^").startswith("=")
    for token in _hca_tokens(value):
        name, _sep, port = token.partition(":")
        names = [n for n in known if (n == name if exact else n.startswith(name))]
        if not names or (port and not any(port.isdigit() and int(port) in known[n] for n in names)):
            raise FabricError("%s: NCCL_IB_HCA override %r names %r, which does not exist on this node; "
                              "it has: %s" % (node, value, token, describe_devices(detected)))


def _validate_override_ifname(value, detected, node):
    text = str(value)
    if text.startswith("^"):
        return
    exact = text.startswith("=")
    names = list(detected["netdevs"])
    for token in [t.strip() for t in text.lstrip("=").split(",") if t.strip()]:
        if not any((n == token if exact else n.startswith(token)) for n in names):
            raise FabricError("%s: NCCL_SOCKET_IFNAME override %r names %r, which matches no interface on "
                              "this node; it has: %s" % (node, value, token, ", ".join(names) or "none"))


def _gid_index_for(port):
    """Lowest GID index of type RoCE v2 with an IPv4-mapped GID on the port's data netdev."""
    candidates = [g for g in port["gids"] if g["type"] == "RoCE v2" and g["ipv4"]]
    on_netdev = [g for g in candidates if port["netdev"] and g["ndev"] == port["netdev"]]
    chosen = (on_netdev or candidates or [None])[0]
    return chosen["index"] if chosen else None


def plan(detected, fabric="auto", exclude=(), cluster_interface="", nccl_version=None,
         roce_gid_index="auto", forbid_socket_fallback=True, overrides=None, node="this node"):
    """NCCL settings for one node. Returns a dict; raises FabricError on bad input.

    settings: ordered {NAME: value} for /etc/nccl.conf (values are strings).
    """
    if fabric not in FABRICS:
        raise FabricError("%s: nccl_tuning_fabric=%r is not one of %s" % (node, fabric, ", ".join(FABRICS)))
    if roce_gid_index not in GID_INDEX_MODES:
        raise FabricError("%s: nccl_tuning_roce_gid_index=%r is not one of %s"
                          % (node, roce_gid_index, ", ".join(GID_INDEX_MODES)))
    overrides = dict(overrides or {})
    version = parse_version(nccl_version)
    warnings = []
    usable = {"ib": [], "roce": []}
    excluded, down, other = [], [], []
    for device in detected["devices"]:
        for port in device["ports"]:
            pattern = _excluded_by(port, device["netdevs"], exclude)
            if pattern is not None:
                excluded.append({"port": port["name"], "pattern": pattern})
            elif port["kind"] == "down":
                down.append({"port": port["name"], "state": port["state"], "phys_state": port["phys_state"]})
            elif port["kind"] in usable:
                usable[port["kind"]].append(port)
            else:
                other.append(port["name"])

    def no_port_error(kind_label):
        excluded_text = ", ".join("%s (excluded by %r)" % (e["port"], e["pattern"]) for e in excluded)
        return FabricError("%s: nccl_tuning_fabric=%s but the node has no usable ACTIVE %s port; "
                           "it has: %s%s" % (node, fabric, kind_label, describe_devices(detected),
                                             "; excluded: " + excluded_text if excluded_text else ""))

    if fabric == "auto":
        chosen = "ib" if usable["ib"] else "roce" if usable["roce"] else "socket"
    else:
        chosen = fabric
    if chosen == "ib" and not usable["ib"]:
        raise no_port_error("InfiniBand")
    if chosen == "roce" and not usable["roce"]:
        raise no_port_error("RoCE")

    ports = usable.get(chosen, [])
    unused = [p["name"] for kind in ("ib", "roce") if kind != chosen for p in usable[kind]]
    if unused:
        if chosen == "socket":
            warnings.append("%s: fabric forced to socket although RDMA ports are ACTIVE: %s"
                            % (node, ", ".join(unused)))
        else:
            warnings.append("%s: ACTIVE %s ports not given to NCCL (fabric %s): %s; exclude them with "
                            "nccl_tuning_exclude_devices if they are storage/frontend ports"
                            % (node, "RoCE" if chosen == "ib" else "InfiniBand", chosen, ", ".join(unused)))

    # Ports slower than the others are usually storage or frontend HCAs.
    rates = [p["rate_gbps"] for p in ports if p["rate_gbps"]]
    if rates:
        common = max(set(rates), key=rates.count)
        slow = [p for p in ports if p["rate_gbps"] and p["rate_gbps"] != common]
        if slow:
            warnings.append("%s: %s run at another rate than the other %d ports (%s): storage HCA? exclude it "
                            "with nccl_tuning_exclude_devices" % (
                                node, ", ".join("%s (%s)" % (p["name"], p["rate"]) for p in slow),
                                len(ports) - len(slow), ports[[p["rate_gbps"] for p in ports].index(common)]["rate"]))

    settings = {}
    if chosen == "socket":
        settings["NCCL_NET"] = "Socket"
    elif forbid_socket_fallback:
        # RoCE goes through the same verbs transport, named IB in NCCL. With NCCL_NET set,
        # NCCL fails at init instead of silently falling back to sockets.
        settings["NCCL_NET"] = "IB"
    if ports:
        settings["NCCL_IB_HCA"] = "=" + ",".join(p["name"] for p in ports)

    ifname = cluster_interface or ""
    if ifname:
        if detected["netdevs"] and ifname not in detected["netdevs"]:
            raise FabricError("%s: cluster interface %r (nccl_tuning_socket_ifname or the interface carrying the "
                              "cluster address) is not a network interface of this node; it has: %s"
                              % (node, ifname, ", ".join(detected["netdevs"])))
        settings["NCCL_SOCKET_IFNAME"] = "=" + ifname
    else:
        warnings.append("%s: no cluster interface found (no address match and no nccl_tuning_socket_ifname); "
                        "NCCL_SOCKET_IFNAME left unset, NCCL will pick an interface itself" % node)

    gid_index = None
    if chosen == "roce":
        indices = {p["name"]: _gid_index_for(p) for p in ports}
        wanted = roce_gid_index == "always" or (
            roce_gid_index == "auto" and version is not None and version < GID_AUTOSELECT_VERSION)
        missing = sorted(name for name, index in indices.items() if index is None)
        distinct = sorted({index for index in indices.values() if index is not None})
        if wanted and missing:
            warnings.append("%s: no RoCE v2 IPv4-mapped GID on %s (no IPv4 address on the data netdev?); "
                            "NCCL_IB_GID_INDEX left unset" % (node, ", ".join(missing)))
        elif wanted and len(distinct) > 1:
            warnings.append("%s: the RoCE v2 IPv4 GID index differs between ports (%s); NCCL_IB_GID_INDEX is "
                            "global, left unset" % (node, ", ".join("%s=%s" % kv for kv in sorted(indices.items()))))
        elif distinct:
            gid_index = distinct[0]
            if wanted:
                settings["NCCL_IB_GID_INDEX"] = str(gid_index)

    for key, value in overrides.items():
        if value is None or value == "":
            settings.pop(key, None)
            continue
        if key == "NCCL_IB_HCA":
            _validate_override_hca(value, detected, node)
        elif key == "NCCL_SOCKET_IFNAME":
            _validate_override_ifname(value, detected, node)
        settings[key] = str(value)

    return {
        "fabric": chosen,
        "ports": [p["name"] for p in ports],
        "rate": ports[0]["rate"] if ports else None,
        "excluded": excluded,
        "down": down,
        "unused": unused,
        "socket_ifname": ifname or None,
        "gid_index": gid_index,
        "nccl_version": ".".join(str(v) for v in version) if version else None,
        "settings": settings,
        "warnings": warnings,
        "signature": signature(chosen, ports),
    }


def signature(fabric, ports):
    """What nodes of one job should share: 'ib x8 @ 400 Gb/sec (4X NDR)', 'socket'."""
    if not ports:
        return fabric
    rates = sorted({p["rate"] or "?" for p in ports})
    return "%s x%d @ %s" % (fabric, len(ports), "/".join(rates))


def odd_nodes(signatures):
    """Nodes whose fabric signature differs from the most common one.

    signatures: {node: signature}. Returns {"majority": sig or None, "odd": {node: sig}}.
    With no strict majority (a tie) every node not in the first-sorted largest group is named.
    """
    counts = {}
    for sig in signatures.values():
        counts[sig] = counts.get(sig, 0) + 1
    if not counts:
        return {"majority": None, "odd": {}, "groups": {}}
    majority = sorted(counts, key=lambda sig: (-counts[sig], sig))[0]
    groups = {}
    for node, sig in sorted(signatures.items()):
        groups.setdefault(sig, []).append(node)
    return {
        "majority": majority,
        "odd": {node: sig for node, sig in sorted(signatures.items()) if sig != majority},
        "groups": groups,
    }


def launcher_env(conf_path, extra=None, async_error_handling=True, debug=""):
    """Environment for the launcher (env file): ordered {NAME: value}."""
    env = {}
    if async_error_handling:
        env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "1"
    if conf_path and conf_path != DEFAULT_CONF_PATH:
        # NCCL reads /etc/nccl.conf on its own; any other path must be named.
        env["NCCL_CONF_FILE"] = conf_path
    if debug:
        env["NCCL_DEBUG"] = debug
    for key, value in (extra or {}).items():
        if value is None or value == "":
            env.pop(key, None)
        else:
            env[key] = str(value)
    return env
