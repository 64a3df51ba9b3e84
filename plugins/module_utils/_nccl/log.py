# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which transport an NCCL job actually used, from its NCCL_DEBUG=INFO output (pure).

NCCL prefixes its lines with `host:pid:tid [cudaDev] NCCL INFO`; launchers may add their
own prefix (`[default0]:`, `[rank3]:`). The lines that tell the transport:

    NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.0.0.1<0>   (RoCE ports end in /RoCE)
    NET/IB : No device found.
    NET/Socket : Using [0]eth0:10.0.0.1<0>
    Using network IB | Socket
    Channel 00/0 : 1[1] -> 2[0] [receive] via NET/IB/0/GDRDMA            (what a connection really uses)

`parse(text)` groups them per process (host, pid) and per host; `socket_fallbacks(...)`
names the hosts that went over sockets although they have active IB/RoCE ports.
"""
from __future__ import annotations

import re

_PREFIX = re.compile(r"(?P<host>[A-Za-z0-9][A-Za-z0-9_.\-]*):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] "
                     r"NCCL (?P<level>INFO|WARN) (?P<msg>.*)$")
_NET_IB_USING = re.compile(r"^NET/IB : Using (?P<devs>.*?)(?:\s*;\s*OOB (?P<oob>\S+))?\s*$")
_IB_DEV = re.compile(r"\[(?P<index>\d+)\](?P<dev>[^\s/\[\]]+)/(?P<ll>IB|RoCE)")
_NET_SOCKET_USING = re.compile(r"^NET/Socket : Using (?P<devs>.*)$")
_SOCKET_DEV = re.compile(r"\[(?P<index>\d+)\](?P<ifname>[^\s:\[\]]+):(?P<addr>\S+?)<\d+>")
_USING_NETWORK = re.compile(r"^Using network (?P<net>\S+)")
_CHANNEL = re.compile(r"^Channel \d+/\d+ : (?P<src>\d+)\[\d+\] -> (?P<dst>\d+)\[\d+\]"
                      r"(?: \[(?P<dir>send|receive)\])? via (?P<via>\S+)")
_COMM = re.compile(r"\brank (?P<rank>\d+) nranks (?P<nranks>\d+) cudaDev (?P<dev>\d+)")
_VERSION = re.compile(r"^NCCL version (?P<version>\S+)")

TRANSPORTS = ("IB", "RoCE", "Socket")


def _process(procs, host, pid):
    key = (host, int(pid))
    if key not in procs:
        procs[key] = {
            "host": host,
            "pid": int(pid),
            "ranks": [],
            "nranks": None,
            "version": None,
            "ib_devices": [],
            "socket_devices": [],
            "no_ib_device": False,
            "network": None,
            "channels": {},
            "gdrdma": False,
            "warnings": [],
        }
    return procs[key]


def _transport(proc):
    """IB / RoCE / Socket / other net name, or None when nothing says (single node, P2P only)."""
    counts = {}
    for via, count in proc["channels"].items():
        if via.startswith("NET/"):
            name = via.split("/")[1]
            counts[name] = counts.get(name, 0) + count
    # A process uses one net; if several were counted, the most used one wins.
    net = max(sorted(counts), key=counts.get) if counts else None
    net = net or proc["network"] or (
        "IB" if proc["ib_devices"] else "Socket" if proc["socket_devices"] else None)
    if net == "IB" and proc["ib_devices"] and all(d["link_layer"] == "RoCE" for d in proc["ib_devices"]):
        return "RoCE"
    return net


def _note_channel(proc, via):
    """Count a connection's transport: NET/IB/0/GDRDMA -> NET/IB/0 counted, GDRDMA noted;
    P2P/IPC, SHM/direct kept whole."""
    parts = via.split("/")
    key = "/".join(parts[:3]) if parts[0] == "NET" else "/".join(parts[:2])
    proc["channels"][key] = proc["channels"].get(key, 0) + 1
    if "GDRDMA" in parts:
        proc["gdrdma"] = True


def _note_info(proc, msg):
    """What one INFO message says about its process (devices, net, channel, rank, version)."""
    found = _NET_IB_USING.match(msg)
    if found:
        proc["ib_devices"] = [{"device": d.group("dev"), "link_layer": d.group("ll")}
                              for d in _IB_DEV.finditer(found.group("devs"))]
        return
    if msg.startswith("NET/IB : No device found"):
        proc["no_ib_device"] = True
        return
    found = _NET_SOCKET_USING.match(msg)
    if found:
        proc["socket_devices"] = [{"interface": d.group("ifname"), "address": d.group("addr")}
                                  for d in _SOCKET_DEV.finditer(found.group("devs"))]
        return
    found = _USING_NETWORK.match(msg)
    if found:
        proc["network"] = found.group("net")
        return
    found = _CHANNEL.match(msg)
    if found:
        _note_channel(proc, found.group("via"))
        return
    found = _COMM.search(msg)
    if found:
        rank = int(found.group("rank"))
        if rank not in proc["ranks"]:
            proc["ranks"].append(rank)
        proc["nranks"] = int(found.group("nranks"))
        return
    found = _VERSION.match(msg)
    if found:
        proc["version"] = found.group("version")


def _by_host(processes):
    """The processes' findings merged per host: {host: {transports, transport, ranks, devices, ...}}."""
    hosts = {}
    for proc in processes:
        host = hosts.setdefault(proc["host"], {
            "transports": [], "ranks": [], "ib_devices": [], "socket_devices": [],
            "no_ib_device": False, "gdrdma": False, "inter_node": False, "version": None})
        if proc["transport"] and proc["transport"] not in host["transports"]:
            host["transports"].append(proc["transport"])
        host["ranks"].extend(proc["ranks"])
        for dev in proc["ib_devices"]:
            if dev["device"] not in host["ib_devices"]:
                host["ib_devices"].append(dev["device"])
        for dev in proc["socket_devices"]:
            if dev["interface"] not in host["socket_devices"]:
                host["socket_devices"].append(dev["interface"])
        host["no_ib_device"] = host["no_ib_device"] or proc["no_ib_device"]
        host["gdrdma"] = host["gdrdma"] or proc["gdrdma"]
        host["inter_node"] = host["inter_node"] or proc["inter_node"]
        host["version"] = host["version"] or proc["version"]
    for host in hosts.values():
        host["ranks"] = sorted(set(host["ranks"]))
        host["transport"] = "/".join(sorted(host["transports"])) if host["transports"] else None
    return hosts


def _by_rank(processes):
    """{rank: {host, pid, transport, gdrdma}}, sorted by rank."""
    ranks = {}
    for proc in processes:
        for rank in proc["ranks"]:
            ranks[rank] = {"host": proc["host"], "pid": proc["pid"], "transport": proc["transport"],
                           "gdrdma": proc["gdrdma"]}
    return dict(sorted(ranks.items()))


def parse(text):
    """Per-process and per-host transport from NCCL INFO output.

    Returns {"processes": [...], "hosts": {host: {...}}, "ranks": {rank: {...}}, "lines": n}.
    """
    procs = {}
    count = 0
    for raw in text.splitlines():
        match = _PREFIX.search(raw)
        if not match:
            continue
        count += 1
        proc = _process(procs, match.group("host"), match.group("pid"))
        msg = match.group("msg").strip()
        if match.group("level") == "WARN":
            proc["warnings"].append(msg)
        else:
            _note_info(proc, msg)
    processes = []
    for key in sorted(procs):
        proc = procs[key]
        proc["transport"] = _transport(proc)
        proc["inter_node"] = any(via.startswith("NET/") for via in proc["channels"])
        processes.append(proc)
    return {"processes": processes, "hosts": _by_host(processes), "ranks": _by_rank(processes), "lines": count}


def socket_fallbacks(parsed, active_ib):
    """Hosts whose NCCL used sockets although the host has active IB/RoCE ports.

    active_ib: True/False for every host in the log (a node checking its own log), or a
    collection / dict of host names that have active ports.
    Returns a list of {"host", "ranks", "reason"} sorted by host.
    """
    found = []
    for name, host in sorted(parsed["hosts"].items()):
        if isinstance(active_ib, bool):
            has_ib = active_ib
        elif isinstance(active_ib, dict):
            has_ib = bool(active_ib.get(name))
        else:
            has_ib = name in active_ib
        if not has_ib or "Socket" not in host["transports"]:
            continue
        if host["no_ib_device"]:
            reason = "NET/IB : No device found (no RDMA device visible to the job: container without " \
                     "/dev/infiniband, missing libibverbs, or rdma modules not loaded)"
        else:
            reason = "NCCL used NET/Socket (NCCL_NET=Socket or NCCL_IB_DISABLE=1 in the job's environment?)"
        found.append({"host": name, "ranks": host["ranks"], "reason": reason,
                      "interfaces": host["socket_devices"]})
    return found


def summary(parsed):
    """One line per host: 'gpu-node01: IB (GDRDMA) ranks 0,1 via mlx5_0:1,...'."""
    lines = []
    for name, host in sorted(parsed["hosts"].items()):
        transport = host["transport"] or "no inter-node transport seen"
        devices = host["ib_devices"] if host["transport"] in ("IB", "RoCE") else host["socket_devices"]
        lines.append("%s: %s%s ranks %s%s" % (
            name, transport, " (GDRDMA)" if host["gdrdma"] else "",
            ",".join(str(r) for r in host["ranks"]) or "?",
            " via " + ",".join(devices) if devices else ""))
    return lines
