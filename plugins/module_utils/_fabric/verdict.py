# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fabric check's verdict: which node or link is slow, what the gate does, the node-by-node matrix.

Input: the probe's result (roles/train/files/fabric_probe.py, ``fabric.json`` in the
probe job's directory)::

    {"nodes": [names in the play's order], "backend": "gloo", "device": "cpu",
     "links": [{"a": n1, "b": n2, "gbps": 9.1, "latency_ms": 0.08}, {"a": n2, "b": n1, ...}, ...],
     "compute": {n1: {"gflops": 41.0}, ...}, "allreduce_busbw_gbps": 6.2, "seconds": 3.1}

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


def _slow_links(links, typical, best, ratio, min_gbps):
    """[(link, [reasons])] for the slow links, and the references: the median over the nodes of each node's median link."""
    ref_gbps = statistics.median(typical.values()) if typical else None
    # latency: the median of the nodes' best (a node's two links' mean would be half a 20 ms fault)
    ref_lat = statistics.median([b["lat"] for b in best.values()]) if best else None
    slow = []
    for link in links:
        why = []
        if len(best) > 2 and link["gbps"] < ratio * ref_gbps:
            why.append("%.3g Gbit/s < %.3g x median %.3g" % (link["gbps"], ratio, ref_gbps))
        if min_gbps and link["gbps"] < min_gbps:
            why.append("%.3g Gbit/s < train_fabric_min_gbps %.3g" % (link["gbps"], min_gbps))
        if len(best) > 2 and link["latency_ms"] > max(ref_lat / ratio, ref_lat + LATENCY_SLACK_MS):
            why.append("latency %.3g ms > median %.3g ms / %.3g" % (link["latency_ms"], ref_lat, ratio))
        if why:
            slow.append((link, why))
    return slow, ref_gbps, ref_lat


def _node_is_slow(node, side, best, ratio, min_gbps, ref_gbps, ref_lat):
    """Whether ``node``'s best link on ``side`` ("out": sent, "in": received) is slow too."""
    gbps, lat = best[node][side], best[node]["lat"]
    return (gbps < ratio * ref_gbps or (min_gbps and gbps < min_gbps)
            or lat > max(ref_lat / ratio, ref_lat + LATENCY_SLACK_MS))


def _blame(slow, best, ratio, min_gbps, ref_gbps, ref_lat):
    """{node: [reasons]} for the slow links: the sender whose best outgoing link is slow too, the
    receiver whose best incoming link is, else both."""
    def is_slow(node, side):
        return _node_is_slow(node, side, best, ratio, min_gbps, ref_gbps, ref_lat)

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


def decide(flagged, hosts, mode, nnodes):
    """What the gate does: {'action': ok|warn|fail|drop, 'keep': [...], 'drop': [...]}."""
    if mode not in MODES:
        raise FabricError("train_fabric_check=%r: valid: %s" % (mode, ", ".join(MODES)))
    bad = [h for h in hosts if h in flagged]
    good = [h for h in hosts if h not in flagged]
    if mode == "off" or not bad:
        return {"action": "ok", "keep": list(hosts), "drop": []}
    if mode == "warn":
        return {"action": "warn", "keep": list(hosts), "drop": []}
    low, high = _nnodes(nnodes, hosts)
    if low < high and len(good) >= low:
        return {"action": "drop", "keep": good, "drop": bad}
    return {"action": "fail", "keep": list(hosts), "drop": []}


def matrix(result, flagged):
    """The node-by-node matrix as lines: Gbit/s (latency ms) from the row's node to the column's, compute per
    node, '*' for flagged."""
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
    return lines


def verdict(result, hosts, mode="warn", ratio=RATIO, min_gbps=None, nnodes=""):
    """The probe's result -> flagged nodes with reasons, the gate's decision, the headline, the matrix and a
    summary."""
    nodes = _check(result)
    if not 0 < float(ratio) < 1:
        raise FabricError("train_fabric_ratio=%r: valid: between 0 and 1" % (ratio,))
    ratio = float(ratio)
    min_gbps = float(min_gbps) if min_gbps else None
    links = _directed(result.get("links", []))
    best = _best(nodes, links)
    slow, ref_gbps, ref_lat = _slow_links(links, _typical(nodes, links), best, ratio, min_gbps)
    flagged = _blame(slow, best, ratio, min_gbps, ref_gbps, ref_lat)
    slow_compute, ref_compute = _slow_compute(nodes, result.get("compute", {}), ratio)
    for node, why in slow_compute.items():
        flagged.setdefault(node, []).extend(why)
    missing = [h for h in hosts if h not in nodes]
    for node in missing:
        flagged.setdefault(node, []).append("no result (the probe did not run there)")
    decision = decide(flagged, hosts, mode, nnodes)
    summary = ["%s: %s" % (node, " | ".join(flagged[node])) for node in hosts if node in flagged]
    return {
        "flagged": {n: flagged[n] for n in hosts if n in flagged},
        "action": decision["action"], "keep": decision["keep"], "drop": decision["drop"],
        "median": {"gbps": ref_gbps, "latency_ms": ref_lat, "gflops": ref_compute},
        "allreduce_busbw_gbps": result.get("allreduce_busbw_gbps"),
        "headline": headline(result), "matrix": matrix(result, flagged), "summary": summary,
    }


def headline(result):
    """The line above the matrix: backend, device, the probe's seconds, the all_reduce figure."""
    return "%s on %s, %s s; all_reduce bus bandwidth %s Gbit/s" % (
        result.get("backend", "no result"), result.get("device", "-"), result.get("seconds", "-"),
        result.get("allreduce_busbw_gbps"))
