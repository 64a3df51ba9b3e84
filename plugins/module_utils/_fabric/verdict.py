# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fabric check's verdict: which node or link is slow, what the gate does, the node-by-node matrix.

Input: the probe's result (module_utils/_node/fabric_probe.py, ``fabric.json`` in the
probe job's directory)::

    {"nodes": [names in the play's order], "backend": "gloo", "device": "cpu",
     "links": [{"a": n1, "b": n2, "gbps": 9.1, "latency_ms": 0.08}, {"a": n2, "b": n1, ...}, ...],
     "compute": {n1: {"gflops": 41.0}, ...}, "allreduce_busbw_gbps": 6.2, "seconds": 3.1,
     "line": {n1: {"gbps": 10.0, "via": "eth0", "transport": "socket"}, ...}}

A link is one direction: ``a`` sends, ``b`` receives (the probe measures both; a result with
one direction of a pair stands for both).

Rules (docs/fabric.md):

* links: the reference is the median over the nodes of each node's median link
  Gbit/s (latency: of each node's best link). A link below ``ratio`` x reference Gbit/s, or whose latency is
  above reference / ``ratio`` and more than ``LATENCY_SLACK_MS`` above it, is slow;
  so is one below ``min_gbps``. Per node first, so one bad node among three is
  found although two of the three links are slow (their median would be a slow
  one); the median per node, not its best, so a healthy link's 2x jitter on a busy
  host is not slow against the fastest link seen.
* a slow link is blamed on its sender when the sender's best outgoing link is slow too
  (its egress: a shaper, a slow NIC), on its receiver when the receiver's best incoming
  link is (its ingress); else on an end slow on either side (TCP's acknowledgements of a
  link travel the other way); when neither is (a bad cable between two good nodes), both
  are named.
* compute: a node below ``ratio`` x the median GFLOP/s is slow.
* the line rate (``line``: each node's NIC rate from its sysfs, the probe's ``line_rate``), so that a
  two-node cluster's one link is judged too: a node whose line rate is below ``ratio`` x the fastest
  node's is slow (a port trained down); a link below ``line_ratio`` x the slower end's line rate is
  slow, and so is the all_reduce's bus bandwidth below ``line_ratio`` x the slowest node's (a finding
  of the cluster: with no node flagged, gate fails). A socket transport (gloo, NCCL's socket
  transport) is judged against at most ``SOCKET_GBPS``: one TCP stream per pair does not fill a
  faster NIC.
* the gate: ``off`` nothing; ``warn`` names the flagged nodes and goes on; ``gate``
  fails, unless the job is elastic (``MIN:MAX``) and at least MIN nodes remain
  without the flagged ones: then it drops them.
"""
from __future__ import annotations

import statistics

MODES = ("off", "warn", "gate")
# Latencies on busy nodes (containers, VMs, a loaded host) jitter by milliseconds
# even as medians: a link is slow by latency only more than this above the median
# (a misrouted path, a congested switch, netem's 20 ms); bandwidth finds the rest.
LATENCY_SLACK_MS = 5.0
# The fraction of the median below which a link or node is slow, when the caller gives none:
# train_fabric_ratio in roles/train/defaults/main.yml mirrors it. Dedicated GPU nodes of one
# kind measure within a few per cent of each other; 0.8 flags a link trained down to half
# its rate and a GPU at 0.7 of the others (power- or heat-capped), which 0.5 let through.
RATIO = 0.8
# The fraction of the line rate below which a link or the all_reduce is slow, when the caller gives
# none: train_fabric_line_ratio mirrors it. One H100 per node over InfiniBand moves an 8 MiB
# all_reduce at about 0.7 of one 400 Gbit/s port (nccl-tests #232: 36 GB/s busbw at 8 MiB); NCCL
# fallen back to TCP sockets moves 1 to 3 GB/s there (0.02 to 0.06), a link shaped to 50 Mbit/s
# 0.005 of a 10 Gbit/s port: 0.25 sits at least 2.8x from the one and 4x from the others.
LINE_RATIO = 0.25
# What a socket transport is judged against at most, in Gbit/s: gloo sends over one TCP stream per
# pair, the kernel's copies on one core (measured here: 8 to 14 Gbit/s over a veth on the 2-core
# test host); a 100 Gbit/s NIC is not filled by it, a 10 Gbit/s one is.
SOCKET_GBPS = 10.0


class FabricError(ValueError):
    """A result or an option the verdict cannot read; the message names it."""


def _nnodes(value, hosts):
    text = str(value).strip()
    if not text:
        return len(hosts), len(hosts)
    low, _colon, high = text.partition(":")
    try:
        return int(low), int(high or low)
    except ValueError as exc:
        raise FabricError("train_nnodes=%r: expected N or MIN:MAX" % (value,)) from exc


def _check(result):
    if not isinstance(result, dict) or not isinstance(result.get("nodes"), list):
        raise FabricError("fabric result: expected a mapping with 'nodes', got %r" % (result,))
    nodes = result["nodes"]
    for link in result.get("links", []):
        if link.get("a") not in nodes or link.get("b") not in nodes:
            raise FabricError("fabric result: link %r names a node not in %s" % (link, nodes))
    return nodes


def _directed(links):
    """Every pair in both directions: a pair measured one way (a -> b) stands for both, the
    copy marked ``mirrored`` (it counts in the figures, it is not named twice)."""
    have = {(link["a"], link["b"]) for link in links}
    return list(links) + [dict(link, a=link["b"], b=link["a"], mirrored=True)
                          for link in links if (link["b"], link["a"]) not in have]


def _best(nodes, links):
    """{node: {"out": best Gbit/s sent, "in": best Gbit/s received, "lat": best latency ms}} over
    ``_directed`` links (a node with a link has one each way)."""
    best = {}
    for node in nodes:
        out = [link["gbps"] for link in links if link["a"] == node]
        if out:
            best[node] = {"out": max(out), "in": max(link["gbps"] for link in links if link["b"] == node),
                          "lat": min(link["latency_ms"] for link in links if node in (link["a"], link["b"]))}
    return best


def _typical(nodes, links):
    """{node: median Gbit/s} over the node's links."""
    out = {}
    for node in nodes:
        mine = [link["gbps"] for link in links if node in (link["a"], link["b"])]
        if mine:
            out[node] = statistics.median(mine)
    return out


def _limits(result):
    """{node: (Gbit/s a link of the node is judged against, what it is)} for the nodes whose line rate
    the probe read: the NIC's line rate, at most ``SOCKET_GBPS`` on a socket transport."""
    out = {}
    for node, line in (result.get("line") or {}).items():
        gbps = (line or {}).get("gbps")
        if not gbps or gbps <= 0:
            continue
        text = "%s %s %.3g Gbit/s" % (node, line.get("via") or "-", gbps)
        if line.get("transport") != "rdma" and gbps > SOCKET_GBPS:
            out[node] = (SOCKET_GBPS, text + ", over sockets at most %.3g" % SOCKET_GBPS)
        else:
            out[node] = (float(gbps), text)
    return out


def _slow_lines(result, ratio):
    """{node: [reason]} for the nodes whose NIC's line rate is below ``ratio`` x the fastest node's."""
    rates = {n: line["gbps"] for n, line in (result.get("line") or {}).items() if line and line.get("gbps")}
    if len(rates) < 2:
        return {}
    top = max(rates.values())
    return {n: ["line rate %.3g Gbit/s (%s) < %.3g x the fastest node's %.3g" % (
        gbps, result["line"][n].get("via") or "-", ratio, top)] for n, gbps in rates.items() if gbps < ratio * top}


def _line_floor(limits, line_ratio, *nodes):
    """(Gbit/s, the slower end's line) a link between ``nodes`` (or a node's own link) must reach; None
    when a node's line rate is unknown or the rule is off."""
    if not line_ratio or any(n not in limits for n in nodes):
        return None
    gbps, text = min(limits[n] for n in nodes)
    return line_ratio * gbps, text


def _slow_links(links, typical, best, ratio, min_gbps, limits, line_ratio):
    """[(link, [reasons])] for the slow links, and the references: the median over the nodes of each node's median link."""
    ref_gbps = statistics.median(typical.values()) if typical else None
    # latency: the median of the nodes' best (a node's two links' mean would be half a 20 ms fault)
    ref_lat = statistics.median([b["lat"] for b in best.values()]) if best else None
    slow = []
    for link in links:
        why = []
        floor = _line_floor(limits, line_ratio, link["a"], link["b"])
        if floor and link["gbps"] < floor[0]:
            why.append("%.3g Gbit/s < %.3g x line rate (%s)" % (link["gbps"], line_ratio, floor[1]))
        if len(best) > 2 and link["gbps"] < ratio * ref_gbps:
            why.append("%.3g Gbit/s < %.3g x median %.3g" % (link["gbps"], ratio, ref_gbps))
        if min_gbps and link["gbps"] < min_gbps:
            why.append("%.3g Gbit/s < train_fabric_min_gbps %.3g" % (link["gbps"], min_gbps))
        if len(best) > 2 and link["latency_ms"] > max(ref_lat / ratio, ref_lat + LATENCY_SLACK_MS):
            why.append("latency %.3g ms > median %.3g ms / %.3g" % (link["latency_ms"], ref_lat, ratio))
        if why:
            slow.append((link, why))
    return slow, ref_gbps, ref_lat


def _node_is_slow(node, side, best, ratio, min_gbps, ref_gbps, ref_lat, floor):
    """Whether ``node``'s best link on ``side`` ("out": sent, "in": received) is slow too (``floor``:
    the node's line-rate floor, (Gbit/s, what) or None). The relative rules need three nodes."""
    gbps, lat = best[node][side], best[node]["lat"]
    relative = len(best) > 2 and (gbps < ratio * ref_gbps or lat > max(ref_lat / ratio, ref_lat + LATENCY_SLACK_MS))
    return bool(relative or (min_gbps and gbps < min_gbps) or (floor and gbps < floor[0]))


def _blame(slow, best, ratio, min_gbps, ref_gbps, ref_lat, limits, line_ratio):
    """{node: [reasons]} for the slow links: the sender whose best outgoing link is slow too, the
    receiver whose best incoming link is, else both. With two nodes each has one link each way, so a
    slow direction is the sender's egress or the receiver's ingress alike: both are named."""
    def is_slow(node, side):
        return _node_is_slow(node, side, best, ratio, min_gbps, ref_gbps, ref_lat,
                             _line_floor(limits, line_ratio, node))

    flagged = {}
    for link, why in slow:
        if link.get("mirrored"):
            continue
        ends = [link["a"], link["b"]]
        guilty = [n for n, side in zip(ends, ("out", "in")) if is_slow(n, side)]
        # A link's acknowledgements (TCP's, the probe's one-element reply) travel the other
        # way: a node with a slow egress can slow what it receives too, without its best
        # incoming link being slow. Such a link is that node's, not a cable between two good
        # nodes. (Measured on containers, a 50 Mbit/s tc tbf on one node's egress left what
        # it received at full speed: 9.2 and 8.5 Gbit/s, the other links 8.1 to 8.8.)
        guilty = guilty or [n for n in ends if is_slow(n, "out") or is_slow(n, "in")]
        for node in guilty or ends:
            flagged.setdefault(node, []).append("link %s -> %s: %s" % (link["a"], link["b"], "; ".join(why)))
    return flagged


def _slow_compute(nodes, compute, ratio):
    figures = {n: compute[n]["gflops"] for n in nodes if n in compute}
    if len(figures) < 2:
        return {}, None
    ref = statistics.median(figures.values())
    return {n: ["compute %.3g GFLOP/s < %.3g x median %.3g" % (v, ratio, ref)]
            for n, v in figures.items() if v < ratio * ref}, ref


def _slow_allreduce(result, limits, line_ratio):
    """[reason] when the all_reduce's bus bandwidth is below ``line_ratio`` x the slowest node's line."""
    busbw, nodes = result.get("allreduce_busbw_gbps"), result.get("nodes") or []
    floor = _line_floor(limits, line_ratio, *nodes) if len(nodes) > 1 else None
    if busbw is None or not floor or busbw >= floor[0]:
        return []
    return ["all_reduce bus bandwidth %.3g Gbit/s < %.3g x line rate (%s, the slowest)" % (busbw, line_ratio, floor[1])]


def decide(flagged, hosts, mode, nnodes, cluster=()):
    """What the gate does: {'action': ok|warn|fail|drop, 'keep': [...], 'drop': [...]}. ``cluster``: findings
    of no one node (a slow all_reduce); with no node flagged, gate fails on them (nothing to leave out)."""
    if mode not in MODES:
        raise FabricError("train_fabric_check=%r: valid: %s" % (mode, ", ".join(MODES)))
    bad = [h for h in hosts if h in flagged]
    good = [h for h in hosts if h not in flagged]
    if mode == "off" or not (bad or cluster):
        return {"action": "ok", "keep": list(hosts), "drop": []}
    if mode == "warn":
        return {"action": "warn", "keep": list(hosts), "drop": []}
    if not bad:
        return {"action": "fail", "keep": list(hosts), "drop": []}
    low, high = _nnodes(nnodes, hosts)
    if low < high and len(good) >= low:
        return {"action": "drop", "keep": good, "drop": bad}
    return {"action": "fail", "keep": list(hosts), "drop": []}


def matrix(result, flagged):
    """The node-by-node matrix as lines: Gbit/s (latency ms) from the row's node to the column's, compute and
    the NIC's line rate per node ('-': not read), '*' for flagged."""
    nodes = result["nodes"]
    cells = {}
    for link in _directed(result.get("links", [])):
        cells[(link["a"], link["b"])] = "%.3g (%.3g)" % (link["gbps"], link["latency_ms"])
    width = max([len(n) for n in nodes] + [len(c) for c in cells.values()] + [7]) + 2
    first = max([len(n) + 1 for n in nodes] + [19]) + 2
    lines = ["Gbit/s (latency ms)".ljust(first) + "".join(n.ljust(width) for n in nodes).rstrip()]
    for row in nodes:
        mark = "*" if row in flagged else ""
        lines.append((row + mark).ljust(first) + "".join(
            cells.get((row, col), "-").ljust(width) for col in nodes).rstrip())
    compute = result.get("compute", {})
    lines.append("GFLOP/s".ljust(first) + "".join(
        ("%.3g" % compute[n]["gflops"] if n in compute else "-").ljust(width) for n in nodes).rstrip())
    line = result.get("line") or {}
    if line:
        lines.append("line rate Gbit/s".ljust(first) + "".join(
            ("%.3g" % line[n]["gbps"] if (line.get(n) or {}).get("gbps") else "-").ljust(width)
            for n in nodes).rstrip())
    return lines


def verdict(result, hosts, mode="warn", ratio=RATIO, min_gbps=None, nnodes="", line_ratio=LINE_RATIO):
    """The probe's result -> flagged nodes with reasons, the gate's decision, the headline, the matrix and a
    summary."""
    nodes = _check(result)
    if not 0 < float(ratio) < 1:
        raise FabricError("train_fabric_ratio=%r: valid: between 0 and 1" % (ratio,))
    if not 0 <= float(line_ratio or 0) < 1:
        raise FabricError("train_fabric_line_ratio=%r: valid: 0 (off) or between 0 and 1" % (line_ratio,))
    ratio, line_ratio = float(ratio), float(line_ratio or 0)
    min_gbps = float(min_gbps) if min_gbps else None
    links = _directed(result.get("links", []))
    best = _best(nodes, links)
    limits = _limits(result)
    slow, ref_gbps, ref_lat = _slow_links(links, _typical(nodes, links), best, ratio, min_gbps, limits, line_ratio)
    flagged = _blame(slow, best, ratio, min_gbps, ref_gbps, ref_lat, limits, line_ratio)
    for node, why in _slow_lines(result, ratio).items():
        flagged.setdefault(node, []).extend(why)
    slow_compute, ref_compute = _slow_compute(nodes, result.get("compute", {}), ratio)
    for node, why in slow_compute.items():
        flagged.setdefault(node, []).extend(why)
    missing = [h for h in hosts if h not in nodes]
    for node in missing:
        flagged.setdefault(node, []).append("no result (the probe did not run there)")
    cluster = _slow_allreduce(result, limits, line_ratio)
    decision = decide(flagged, hosts, mode, nnodes, cluster)
    summary = ["%s: %s" % (node, " | ".join(flagged[node])) for node in hosts if node in flagged]
    summary += ["all nodes: %s" % why for why in cluster]
    return {
        "flagged": {n: flagged[n] for n in hosts if n in flagged}, "cluster": cluster,
        "action": decision["action"], "keep": decision["keep"], "drop": decision["drop"],
        "median": {"gbps": ref_gbps, "latency_ms": ref_lat, "gflops": ref_compute},
        "line": {n: limits[n][0] for n in nodes if n in limits}, "line_ratio": line_ratio,
        "allreduce_busbw_gbps": result.get("allreduce_busbw_gbps"),
        "headline": headline(result), "matrix": matrix(result, flagged), "summary": summary,
    }


def headline(result):
    """The line above the matrix: backend, device, the probe's seconds, the all_reduce figure."""
    return "%s on %s, %s s; all_reduce bus bandwidth %s Gbit/s" % (
        result.get("backend", "no result"), result.get("device", "-"), result.get("seconds", "-"),
        result.get("allreduce_busbw_gbps"))
