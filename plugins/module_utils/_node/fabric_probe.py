# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fabric check's probe: one rank per node, launched like the job (roles/train/tasks/fabric.yml).

With torch.distributed (gloo on CPU nodes, nccl on GPU nodes, the same calls):

1. rounds of disjoint node pairs (``--schedule``, the controller's
   multinode.training.fabric_schedule): in each pair the lower node sends a buffer
   of ``--bytes`` for about ``--seconds`` (bandwidth, the partner's one-element
   acknowledgement after each), then the higher node sends it back the same way
   (each direction is a link: a shaper or a slow NIC slows one direction only),
   then they ping-pong one element (latency: half the round trip); bandwidth from
   the fastest quarter of the timed steps, latency from the fastest tenth
   (``FAST_STEPS``); nodes not in the round wait at the barrier. The schedule runs
   ``--passes`` times (2) and each link keeps its best figures: a busy host's dip in
   one pass is not the link's, a bad link is slow in both;
2. one all-node all_reduce of the same buffer: the bus bandwidth
   (2 (n-1) / n x bytes / time);
3. a matmul on each GPU of the node (bf16 4096x4096), or on the CPU (fp32 512x512),
   for ``--seconds``, on every node at once after two barriers, once after each pass
   of the links (seconds apart); each device keeps its best pass (as the links: a
   node that shares a busy host got less of it in one pass, a slow node is slow in
   every pass): GFLOP/s, a node's figure is its slowest GPU.
4. the line rate the node's links are judged against (``line_rate``, from sysfs): on a GPU node
   whose NCCL may use RDMA, the slowest ACTIVE InfiniBand/RoCE port it may use (``NCCL_IB_HCA``,
   from the environment or /etc/nccl.conf, as NCCL reads it); otherwise the speed of the socket
   interface (``--probe-iface``, else the default route's).

Every rank gathers every node's figures and writes them, the same on every node,
to ``fabric.json`` in its job directory ($MULTINODE_TRAINING_JOB_DIR), which the
launch brings home; it also prints them as one line ``FABRIC {json}``.

It reaches the nodes as source, as ``fabric_probe.py``: roles/train/tasks/fabric.yml writes its text
(lookup multinode.training.node_source) for the ssh launcher, module slurm_job into the Slurm bin
directory. Importing it needs the standard library only (``run`` imports torch, on the job's python), so
that _nccl/fabric.py reads NCCL_IB_HCA with the same ``parse_hca``.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import socket
import sys
import time


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # Not --node: torchrun's own parser reads the script's arguments too and refuses an
    # abbreviation of its options (--node could be --node-rank).
    parser.add_argument("--probe-node", default=os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0],
                        help="this node's inventory name (default: the Slurm node name, else the short hostname)")
    parser.add_argument("--probe-nodes", required=True, help="JSON list of the nodes, in the play's order")
    parser.add_argument("--schedule", required=True, help="JSON rounds of [low, high] node indexes")
    parser.add_argument("--seconds", type=float, default=0.5, help="time per measurement")
    parser.add_argument("--bytes", type=int, default=8 << 20, help="buffer size for bandwidth")
    parser.add_argument("--passes", type=int, default=2, help="times each link and each device is measured (its best is kept)")
    parser.add_argument("--probe-iface", default="", help="the interface of the node's address (default: the default route's)")
    return parser.parse_args(argv)


def _sync(torch, device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# The step time a link is judged by: this fraction of the timed steps ran at least as fast.
# A fault of the link (a lower line rate, a shaper, a longer path) slows every step; a busy
# node's scheduling slows some, by milliseconds on a loaded host (a median latency of 2 ms
# against 0.12 ms at rest, and 7.4 ms on one healthy link, on the 2-core CI host): the
# fast end of the steps is the link's, the slow end is the host's.
FAST_STEPS = {"bandwidth": 0.25, "latency": 0.1}


def fast_step(steps, fraction):
    """The step time that ``fraction`` of ``steps`` did not exceed (the lower end, never the fastest outlier
    alone once there are ten or more steps)."""
    ordered = sorted(steps)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def _repeat(torch, dist, device, leader, peer_rank, seconds, step, fraction):
    """Agree on a repeat count from one timed step (the leader's), then time each of that many steps.

    Returns ``fast_step(steps, fraction)`` in seconds.
    """
    count = torch.zeros(1, dtype=torch.int64, device=device)
    _sync(torch, device)
    start = time.perf_counter()
    step()
    _sync(torch, device)
    if leader:
        once = max(time.perf_counter() - start, 1e-6)
        count[0] = max(5, min(10000, int(seconds / once)))
        dist.send(count, peer_rank)
    else:
        dist.recv(count, peer_rank)
    _sync(torch, device)
    steps = []
    for _step in range(int(count[0])):
        start = time.perf_counter()
        step()
        _sync(torch, device)
        steps.append(time.perf_counter() - start)
    return fast_step(steps, fraction)


def measure_link(torch, dist, device, peer_rank, leader, args):
    """Gbit/s from the leader to its peer, Gbit/s back, and the one-way latency in ms (the leader's
    measurement) as two links' figures: (leader -> peer, peer -> leader). Both directions, as a
    shaper or a slow NIC slows one of them only."""
    buf = torch.ones(args.bytes // 4, dtype=torch.float32, device=device)
    one = torch.zeros(1, dtype=torch.float32, device=device)

    def exchange(there, back):
        """One step: the leader sends ``there`` and receives ``back``; its peer the other way round."""
        def step():
            if leader:
                dist.send(there, peer_rank)
                dist.recv(back, peer_rank)
            else:
                dist.recv(there, peer_rank)
                dist.send(back, peer_rank)
        return step

    gbps = [args.bytes * 8 / _repeat(torch, dist, device, leader, peer_rank, args.seconds, exchange(there, back),
                                     FAST_STEPS["bandwidth"]) / 1e9 for there, back in ((buf, one), (one, buf))]
    latency = _repeat(torch, dist, device, leader, peer_rank, args.seconds / 2, exchange(one, one),
                      FAST_STEPS["latency"]) / 2
    return tuple({"gbps": round(figure, 4), "latency_ms": round(latency * 1000, 4)} for figure in gbps)


def keep_best(best, pair, figures):
    """A link's best figures over the passes: a dip while a busy node was elsewhere is not the link's."""
    if pair not in best:
        best[pair] = dict(figures)
        return
    best[pair]["gbps"] = max(best[pair]["gbps"], figures["gbps"])
    best[pair]["latency_ms"] = min(best[pair]["latency_ms"], figures["latency_ms"])


def measure_allreduce(torch, dist, device, world, args):
    buf = torch.ones(args.bytes // 4, dtype=torch.float32, device=device)
    dist.all_reduce(buf)
    _sync(torch, device)
    start = time.perf_counter()
    dist.all_reduce(buf)
    _sync(torch, device)
    # every rank ran the timed one; rank 0's count is everybody's
    count = torch.tensor([max(3, min(1000, int(args.seconds / max(time.perf_counter() - start, 1e-6))))],
                         dtype=torch.int64, device=device)
    dist.broadcast(count, 0)
    _sync(torch, device)
    start = time.perf_counter()
    for _step in range(int(count[0])):
        dist.all_reduce(buf)
    _sync(torch, device)
    took = time.perf_counter() - start
    return round(2 * (world - 1) / world * args.bytes * 8 * int(count[0]) / took / 1e9, 4)


def measure_compute(torch, seconds):
    """GFLOP/s of a matmul run for ``seconds`` on each GPU (the slowest) or on the CPU."""
    if torch.cuda.is_available():
        devices = [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
        size, dtype = 4096, torch.bfloat16
    else:
        devices, size, dtype = [torch.device("cpu")], 512, torch.float32
    figures = []
    for device in devices:
        a = torch.randn(size, size, dtype=dtype, device=device)
        b = torch.randn(size, size, dtype=dtype, device=device)
        torch.matmul(a, b)
        _sync(torch, device)
        # A GPU runs what the host queued after the host has moved on: every read of the
        # clock follows a sync, so the time counts the matmuls done, not the ones queued
        # (16 per sync on a GPU: a sync per matmul would time the launches too).
        batch = 16 if device.type == "cuda" else 1
        count, start = 0, time.perf_counter()
        while True:
            for _matmul in range(batch):
                torch.matmul(a, b)
            count += batch
            _sync(torch, device)
            took = time.perf_counter() - start
            if took >= seconds:
                break
        figures.append(2 * size ** 3 * count / took / 1e9)
    return {"gflops": round(min(figures), 3), "devices": [round(f, 3) for f in figures]}


def keep_faster(best, compute):
    """Each device's best GFLOP/s over the passes; the node's figure is its slowest device's best."""
    if best is None:
        return compute
    devices = [max(a, b) for a, b in zip(best["devices"], compute["devices"])]
    return {"gflops": min(devices), "devices": devices}


def _read(path):
    """A sysfs or procfs file's text, stripped, or a directory's sorted entries; None when absent."""
    try:
        if os.path.isdir(path):
            return sorted(os.listdir(path))
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return None


def nccl_setting(name, env, conf="/etc/nccl.conf"):
    """An NCCL setting as NCCL reads it: the environment, else /etc/nccl.conf (NAME=value lines)."""
    if env.get(name) is not None:
        return env[name]
    for line in (_read(conf) or "").splitlines():
        key, _eq, value = line.strip().partition("=")
        if key.strip() == name and _eq:
            return value.strip()
    return None


def parse_rate(text):
    """A port's sysfs ``rate``: '400 Gb/sec (4X NDR)' -> 400.0; unparsable -> None. (_nccl/sysfs.py reads it
    with this too.)"""
    match = re.match(r"\s*([\d.]+)\s*Gb/sec", text or "")
    return float(match.group(1)) if match else None


def parse_hca(spec):
    """NCCL_IB_HCA as NCCL reads it -> (exclude, exact, [(device, port)]): an optional '^' (NCCL uses every
    port but those listed), then an optional '=' (names are whole device names, not prefixes), then a comma
    list of dev[:port] (port '' when none is named). The one reading of the grammar: the probe's
    ``hca_allows`` and the nccl_fabric module's check of an override (_nccl/fabric.py) both use it."""
    text = str(spec or "")
    exclude = text.startswith("^")
    text = text[1:] if exclude else text
    exact = text.startswith("=")
    text = text[1:] if exact else text
    entries = []
    for entry in text.split(","):
        name, _colon, port = entry.strip().partition(":")
        if name or port:
            entries.append((name, port))
    return exclude, exact, entries


def hca_names(entry, exact, device, port=None):
    """Whether ``entry`` (device, port) of a parsed NCCL_IB_HCA names ``device`` and, unless ``port`` is None,
    its port ``port``: the device by its whole name with '=' (``exact``), else by a prefix (``mlx5_1`` also
    names ``mlx5_10``); the port by its number, every port when the entry names none."""
    name, want = entry
    if not (device == name if exact else device.startswith(name)):
        return False
    return port is None or not want or (want.isdigit() and str(port).isdigit() and int(want) == int(port))


def hca_allows(spec, device, port):
    """Whether NCCL_IB_HCA ``spec`` lets NCCL use ``device`` port ``port`` (``parse_hca``; unset: every port)."""
    if not spec:
        return True
    exclude, exact, entries = parse_hca(spec)
    return any(hca_names(entry, exact, device, port) for entry in entries) != exclude


def default_iface(proc="/proc"):
    """The interface of the IPv4 default route (/proc/net/route), or None."""
    for line in (_read(os.path.join(proc, "net", "route")) or "").splitlines()[1:]:
        fields = line.split()
        if len(fields) > 1 and fields[1] == "00000000":
            return fields[0]
    return None


def line_rate(iface, cuda, env, sys_root="/sys", proc="/proc", conf="/etc/nccl.conf"):
    """What this node's links run over and its line rate: {"transport": "rdma"|"socket", "via": port or
    interface, "gbps": Gbit/s or None, "why": when not read}. NCCL on a GPU node uses RDMA when a port
    is ACTIVE and allowed (NCCL_IB_HCA) unless NCCL_IB_DISABLE=1 or NCCL_NET names another network;
    gloo always sockets. A node's figure is its slowest port: one trained down slows the ring."""
    net = (nccl_setting("NCCL_NET", env, conf) or "").strip()
    if cuda and net.lower() not in ("", "ib", "socket"):
        return {"transport": "plugin", "via": "NCCL_NET=" + net, "gbps": None,
                "why": "a network plugin: its line rate is not read"}
    if cuda and nccl_setting("NCCL_IB_DISABLE", env, conf) != "1" and net.lower() != "socket":
        hca, ports = nccl_setting("NCCL_IB_HCA", env, conf), []
        ib = os.path.join(sys_root, "class", "infiniband")
        for device in _read(ib) or []:
            for port in _read(os.path.join(ib, device, "ports")) or []:
                base = os.path.join(ib, device, "ports", port)
                rate = parse_rate(_read(os.path.join(base, "rate")))
                if (_read(os.path.join(base, "state")) or "").endswith("ACTIVE") and rate is not None \
                        and hca_allows(hca, device, port):
                    layer = _read(os.path.join(base, "link_layer")) or "InfiniBand"
                    ports.append((rate, "%s:%s (%s)" % (device, port, layer)))
        if ports:
            gbps, via = min(ports)
            return {"transport": "rdma", "via": via, "gbps": gbps}
    name = iface or default_iface(proc)
    if not name:
        return {"transport": "socket", "via": "-", "gbps": None, "why": "no interface named and no default route"}
    speed = _read(os.path.join(sys_root, "class", "net", name, "speed"))
    try:
        mbps = int(speed)
    except (TypeError, ValueError):
        mbps = -1
    if mbps <= 0:
        return {"transport": "socket", "via": name, "gbps": None,
                "why": "no speed in sysfs (%s)" % (speed or "unreadable")}
    return {"transport": "socket", "via": name, "gbps": mbps / 1000.0}


def run(args):
    import torch
    import torch.distributed as dist

    nodes, schedule = json.loads(args.probe_nodes), json.loads(args.schedule)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo")
    start = time.perf_counter()
    world = dist.get_world_size()
    where = [None] * world
    dist.all_gather_object(where, nodes.index(args.probe_node))
    rank_of = {index: r for r, index in enumerate(where)}
    mine = nodes.index(args.probe_node)
    best, compute = {}, None
    for _pass in range(args.passes):
        for pairs in schedule:
            for low, high in pairs:
                if mine in (low, high) and low in rank_of and high in rank_of:
                    leader = mine == low
                    there, back = measure_link(torch, dist, device, rank_of[high if leader else low], leader, args)
                    if leader:
                        keep_best(best, (nodes[low], nodes[high]), there)
                        keep_best(best, (nodes[high], nodes[low]), back)
            dist.barrier()
        # A compute pass after each pass of the links, so that the passes are seconds apart: a dip of
        # the node's own (another process's burst of a second or two on its CPUs, as a job's progress
        # poll) spoils one of them, not both, as it can back to back. Two barriers: a slow link's
        # backlog (a shaper's queue) holds its node's first barrier message, and it left the barrier
        # up to the queue's length after the others, which computed without it; the second leaves
        # with the queues empty, the nodes within a round trip of each other, so that they compute at
        # the same time.
        dist.barrier()
        dist.barrier()
        compute = keep_faster(compute, measure_compute(torch, args.seconds))
    links = [dict(a=a, b=b, **figures) for (a, b), figures in best.items()]
    busbw = measure_allreduce(torch, dist, device, world, args) if world > 1 else None
    line = line_rate(args.probe_iface, cuda, os.environ)
    everything = [None] * world
    dist.all_gather_object(everything, {"node": args.probe_node, "links": links, "compute": compute, "line": line})
    result = {
        "nodes": [n for n in nodes if n in {e["node"] for e in everything}],
        "backend": dist.get_backend(), "device": "cuda" if cuda else "cpu", "world": world,
        "links": [link for e in everything for link in e["links"]],
        "compute": {e["node"]: e["compute"] for e in everything},
        "line": {e["node"]: e.get("line") for e in everything},
        "allreduce_busbw_gbps": busbw, "bytes": args.bytes,
        "seconds": round(time.perf_counter() - start, 3),
    }
    dist.destroy_process_group()
    return result


def main(argv=None):
    args = parse_args(argv)
    result = run(args)
    job_dir = os.environ.get("MULTINODE_TRAINING_JOB_DIR", "")
    if job_dir:
        with open(os.path.join(job_dir, "fabric.json"), "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=1, sort_keys=True)
    sys.stdout.write("FABRIC " + json.dumps(result, sort_keys=True) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
