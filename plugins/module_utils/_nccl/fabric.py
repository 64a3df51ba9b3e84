# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NCCL planning from what a node's sysfs tree says (pure; no Ansible imports).

`plan(detected, ...)` turns what _nccl.sysfs's `read_sysfs(root)` read (the RDMA devices
and network interfaces) into the NCCL settings that fit the node:

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
import re

from ansible_collections.multinode.training.plugins.module_utils._nccl.sysfs import FabricError
from ansible_collections.multinode.training.plugins.module_utils._node import fabric_probe

FABRICS = ("auto", "ib", "roce", "socket")
GID_INDEX_MODES = ("auto", "always", "never")
# NCCL 2.21 selects the RoCE GID itself (NCCL_IB_ROCE_VERSION_NUM / NCCL_IB_ADDR_FAMILY).
GID_AUTOSELECT_VERSION = (2, 21)
DEFAULT_CONF_PATH = "/etc/nccl.conf"


def parse_version(text):
    """'2.18.3' / '2.21' / 'v2.19.3-1' -> (2, 18, 3); 'auto', '', None -> None."""
    match = re.match(r"^v?(\d+)\.(\d+)(?:\.(\d+))?", str(text or "").strip())
    if not match:
        return None
    return tuple(int(part) for part in match.groups("0"))


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


def _validate_override_hca(value, detected, node):
    """FabricError unless every entry of NCCL_IB_HCA ``value`` names a device (and port) of the node, read
    as the fabric probe reads it (_node/fabric_probe.parse_hca)."""
    known = {d["name"]: {p["port"] for p in d["ports"]} for d in detected["devices"]}
    _exclude, exact, entries = fabric_probe.parse_hca(value)
    for entry in entries:
        names = [n for n in known if fabric_probe.hca_names(entry, exact, n)]
        if not names or (entry[1] and not any(fabric_probe.hca_names(entry, exact, n, p)
                                              for n in names for p in known[n])):
            token = entry[0] + (":" + entry[1] if entry[1] else "")
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


def _check_choices(fabric, roce_gid_index, node):
    """FabricError when nccl_tuning_fabric or the option roce_gid_index is not one of its choices."""
    if fabric not in FABRICS:
        raise FabricError("%s: nccl_tuning_fabric=%r is not one of %s" % (node, fabric, ", ".join(FABRICS)))
    if roce_gid_index not in GID_INDEX_MODES:
        raise FabricError("%s: roce_gid_index=%r is not one of %s"
                          % (node, roce_gid_index, ", ".join(GID_INDEX_MODES)))


def sort_ports(detected, exclude):
    """Every port of the node -> (usable {"ib": [...], "roce": [...]}, excluded, down).

    A port matched by a pattern of ``exclude`` is excluded whatever its state; a port that is not
    ACTIVE is down; an ACTIVE port of another link layer is left out of all three."""
    usable = {"ib": [], "roce": []}
    excluded, down = [], []
    for device in detected["devices"]:
        for port in device["ports"]:
            pattern = _excluded_by(port, device["netdevs"], exclude)
            if pattern is not None:
                excluded.append({"port": port["name"], "pattern": pattern})
            elif port["kind"] == "down":
                down.append({"port": port["name"], "state": port["state"], "phys_state": port["phys_state"]})
            elif port["kind"] in usable:
                usable[port["kind"]].append(port)
    return usable, excluded, down


def choose_fabric(fabric, usable, excluded, detected, node):
    """The fabric NCCL gets: the asked one, or for ``auto`` ib, else roce, else socket.

    FabricError when ib or roce is asked for and the node has no usable ACTIVE port of it."""
    chosen = fabric
    if fabric == "auto":
        chosen = "ib" if usable["ib"] else "roce" if usable["roce"] else "socket"
    labels = {"ib": "InfiniBand", "roce": "RoCE"}
    if chosen in labels and not usable[chosen]:
        excluded_text = ", ".join("%s (excluded by %r)" % (e["port"], e["pattern"]) for e in excluded)
        raise FabricError("%s: nccl_tuning_fabric=%s but the node has no usable ACTIVE %s port; "
                          "it has: %s%s" % (node, fabric, labels[chosen], describe_devices(detected),
                                            "; excluded: " + excluded_text if excluded_text else ""))
    return chosen


def unused_ports_warning(chosen, unused, node):
    """The warning for ACTIVE RDMA ports NCCL does not get (``unused``), or None."""
    if not unused:
        return None
    if chosen == "socket":
        return "%s: fabric forced to socket although RDMA ports are ACTIVE: %s" % (node, ", ".join(unused))
    return ("%s: ACTIVE %s ports not given to NCCL (fabric %s): %s; exclude them with "
            "nccl_tuning_exclude_devices if they are storage/frontend ports"
            % (node, "RoCE" if chosen == "ib" else "InfiniBand", chosen, ", ".join(unused)))


def odd_rate_warning(ports, node):
    """The warning for ports slower or faster than the most common rate, or None.

    Ports slower than the others are usually storage or frontend HCAs."""
    rates = [p["rate_gbps"] for p in ports if p["rate_gbps"]]
    if not rates:
        return None
    common = max(set(rates), key=rates.count)
    slow = [p for p in ports if p["rate_gbps"] and p["rate_gbps"] != common]
    if not slow:
        return None
    return ("%s: %s run at another rate than the other %d ports (%s): storage HCA? exclude it "
            "with nccl_tuning_exclude_devices" % (
                node, ", ".join("%s (%s)" % (p["name"], p["rate"]) for p in slow),
                len(ports) - len(slow), ports[[p["rate_gbps"] for p in ports].index(common)]["rate"]))


def transport_settings(chosen, ports, forbid_socket_fallback):
    """NCCL_NET and NCCL_IB_HCA for the chosen fabric and its ports (ordered dict)."""
    settings = {}
    if chosen == "socket":
        settings["NCCL_NET"] = "Socket"
    elif forbid_socket_fallback:
        # RoCE goes through the same verbs transport, named IB in NCCL. With NCCL_NET set,
        # NCCL fails at init instead of silently falling back to sockets.
        settings["NCCL_NET"] = "IB"
    if ports:
        settings["NCCL_IB_HCA"] = "=" + ",".join(p["name"] for p in ports)
    return settings


def socket_ifname(ifname, detected, node):
    """NCCL_SOCKET_IFNAME for the cluster interface -> (value or None, warning or None).

    FabricError when the node has network interfaces and ``ifname`` is none of them."""
    if not ifname:
        return None, ("%s: no cluster interface found (no address match and no nccl_tuning_socket_ifname); "
                      "NCCL_SOCKET_IFNAME left unset, NCCL will pick an interface itself" % node)
    if detected["netdevs"] and ifname not in detected["netdevs"]:
        raise FabricError("%s: cluster interface %r (nccl_tuning_socket_ifname or the interface carrying the "
                          "cluster address) is not a network interface of this node; it has: %s"
                          % (node, ifname, ", ".join(detected["netdevs"])))
    return "=" + ifname, None


def roce_gid(ports, roce_gid_index, version, node):
    """The RoCE v2 GID index of the ports -> (index or None, set NCCL_IB_GID_INDEX?, warning or None).

    Set when asked (``always``) or for an NCCL older than 2.21 (``auto``), and only when every
    port has one and all are the same; the index is returned (for the report) whenever it is."""
    indices = {p["name"]: _gid_index_for(p) for p in ports}
    wanted = roce_gid_index == "always" or (
        roce_gid_index == "auto" and version is not None and version < GID_AUTOSELECT_VERSION)
    missing = sorted(name for name, index in indices.items() if index is None)
    distinct = sorted({index for index in indices.values() if index is not None})
    if wanted and missing:
        return None, False, ("%s: no RoCE v2 IPv4-mapped GID on %s (no IPv4 address on the data netdev?); "
                             "NCCL_IB_GID_INDEX left unset" % (node, ", ".join(missing)))
    if wanted and len(distinct) > 1:
        return None, False, ("%s: the RoCE v2 IPv4 GID index differs between ports (%s); NCCL_IB_GID_INDEX is "
                             "global, left unset" % (node, ", ".join("%s=%s" % kv for kv in sorted(indices.items()))))
    if distinct:
        return distinct[0], wanted, None
    return None, False, None


def apply_overrides(settings, overrides, detected, node):
    """The user's NCCL settings over the planned ones: an empty value removes the setting;
    NCCL_IB_HCA and NCCL_SOCKET_IFNAME must name what the node has (FabricError)."""
    for key, value in dict(overrides or {}).items():
        if value is None or value == "":
            settings.pop(key, None)
            continue
        if key == "NCCL_IB_HCA":
            _validate_override_hca(value, detected, node)
        elif key == "NCCL_SOCKET_IFNAME":
            _validate_override_ifname(value, detected, node)
        settings[key] = str(value)
    return settings


def plan(detected, fabric="auto", exclude=(), cluster_interface="", nccl_version=None,
         roce_gid_index="auto", forbid_socket_fallback=True, overrides=None, node="this node"):
    """NCCL settings for one node. Returns a dict; raises FabricError on bad input.

    settings: ordered {NAME: value} for /etc/nccl.conf (values are strings).
    """
    _check_choices(fabric, roce_gid_index, node)
    version = parse_version(nccl_version)
    usable, excluded, down = sort_ports(detected, exclude)
    chosen = choose_fabric(fabric, usable, excluded, detected, node)
    ports = usable.get(chosen, [])
    unused = [p["name"] for kind in ("ib", "roce") if kind != chosen for p in usable[kind]]
    warnings = [unused_ports_warning(chosen, unused, node), odd_rate_warning(ports, node)]
    settings = transport_settings(chosen, ports, forbid_socket_fallback)
    ifname = cluster_interface or ""
    ifname_setting, ifname_warning = socket_ifname(ifname, detected, node)
    if ifname_setting:
        settings["NCCL_SOCKET_IFNAME"] = ifname_setting
    warnings.append(ifname_warning)
    gid_index = None
    if chosen == "roce":
        gid_index, set_gid, gid_warning = roce_gid(ports, roce_gid_index, version, node)
        if set_gid:
            settings["NCCL_IB_GID_INDEX"] = str(gid_index)
        warnings.append(gid_warning)
    apply_overrides(settings, overrides, detected, node)
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
        "warnings": [w for w in warnings if w],
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
