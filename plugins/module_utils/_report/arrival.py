# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The straggler from the flight recorder: which node's ranks reach the collectives last.

In a synchronous job every rank leaves a collective at about the same moment and the next one starts
when the last rank enters it; the others wait. The rank's sampler (_node.sampler) records, per block of
consecutive collectives of a process group (``frb``), when the rank created each (the mean creation time)
and, on NCCL with TORCH_NCCL_ENABLE_TIMING (the user's choice), how long each ran on the GPU (a rank that came early waits
inside the collective's kernel). The same block of every rank makes one comparison:

- the wait per collective of a rank: the latest rank's mean creation time less its own (CPU time stamps:
  the nodes' clocks must agree, as NTP keeps them, to well under the time per collective), or, where every
  rank has GPU durations, its mean duration less the shortest mean duration (no clock is compared);
- the time per collective: the block's span over its collectives (the median over the ranks);
- the rank's **time per collective not spent waiting** for other ranks: the time per collective less
  its wait. It is what the rank itself needs per collective (compute, data, its own part of the
  collective): the same on every node of an even job, the highest on the node that holds the others up;
- what a node **costs** the others: the share of their time per collective they spend waiting in the
  collectives where one of its ranks came last (``cost``). The time per collective not spent waiting holds
  the collective's own time, so where the collective takes most of a step, a node that makes the others
  wait a fifth of their time reads only 1.1x; its cost says it.

A node's figures are the medians over its ranks, over every block seen on two or more nodes; the straggler
rule (_report.straggler.cost_verdict) names a node by its cost, with its ratio to the median beside it. CPU time does not enter,
so ranks that spin while they wait (CUDA's default synchronisation, NCCL's proxy threads), that sleep
(blocking synchronisation) or whose node is throttled are all judged by when they arrive. Pure: records in,
figures out.
"""
from __future__ import annotations

import statistics

# Blocks seen on two or more nodes that a rank's figure needs (at 8 collectives a block, 24 collectives).
MIN_BLOCKS = 3
# Copies of one block whose times are further apart than this are different attempts of the job (a
# restart counts its collectives from 1 again), not ranks of one attempt.
SLACK = 10.0
# The block record's fields (_node.sampler.fr_blocks).
PG, FIRST, SIZE, T_FIRST, T_LAST, T_MEAN, DURATION = range(7)


def rank_blocks(records):
    """One rank file's records (_node.sampler's samples) -> [(segment, block)]: a block whose number does
    not go up in its group starts a new segment (a new process of a restarted job writes to the same file)."""
    out, last, segment = [], {}, 0
    for record in records:
        for block in record.get("frb") or []:
            if not isinstance(block, list) or len(block) != 7:
                continue
            if block[PG] in last and block[FIRST] <= last[block[PG]]:
                segment, last = segment + 1, {}
            last[block[PG]] = block[FIRST]
            out.append((segment, block))
    return out


def matched(ranks):
    """{(host, rank key): [(segment, block)]} -> [{(host, rank key, segment): block}]: the copies of one block
    of one group, at most one per local rank of a node, from one attempt (copies within SLACK seconds)."""
    groups = {}
    for (host, key), blocks in ranks.items():
        for segment, block in blocks:
            groups.setdefault((block[PG], block[FIRST], block[SIZE]), []).append(((host, key, segment), block))
    out = []
    for _key, copies in sorted(groups.items()):
        copies.sort(key=lambda item: item[1][T_FIRST])
        cluster, seen, end = {}, set(), None
        for rid, block in copies:
            local = (rid[0], str(rid[1]).rsplit("_", 1)[-1])
            if cluster and (local in seen or block[T_FIRST] > end + SLACK):
                out.append(cluster)
                cluster, seen, end = {}, set(), None
            cluster[rid], end = block, block[T_LAST] if end is None else max(end, block[T_LAST])
            seen.add(local)
        if cluster:
            out.append(cluster)
    return out


def compare(cluster):
    """One block's copies -> (time per collective, {rank: wait per collective}, by GPU durations or not, the host
    of the rank that came last: the one the others waited for)."""
    blocks = list(cluster.values())
    size = blocks[0][SIZE]
    period = statistics.median((b[T_LAST] - b[T_FIRST]) / max(1, size - 1) for b in blocks)
    if all(b[DURATION] is not None for b in blocks):
        low = min(b[DURATION] for b in blocks)
        last = min(cluster, key=lambda rid: (cluster[rid][DURATION], rid))
        return period, {rid: (b[DURATION] - low) / 1000.0 for rid, b in cluster.items()}, True, last[0]
    late = max(b[T_MEAN] for b in blocks)
    last = max(cluster, key=lambda rid: (cluster[rid][T_MEAN], rid))
    return period, {rid: late - b[T_MEAN] for rid, b in cluster.items()}, False, last[0]


def compared(ranks):
    """The matched copies (``matched``) seen on two or more hosts: the blocks that compare nodes."""
    return [c for c in matched(ranks) if len({rid[0] for rid in c}) >= 2]


def figures(ranks, clusters=None):
    """{(host, rank key): [(segment, block)]} -> {host: {work, wait, period, blocks, gpu}} for every host with
    a rank over MIN_BLOCKS compared blocks: ``work`` the median over its ranks of the time per collective not
    spent waiting, ``wait`` and ``period`` the same medians of the wait and of the time per collective,
    ``blocks`` the blocks compared, ``gpu`` whether GPU durations decided. Only the complete copies count
    (as many ranks as the most seen for that group) seen on two or more hosts; ``clusters``: those copies
    (``compared(ranks)``) where the caller has them already."""
    clusters = compared(ranks) if clusters is None else clusters
    most = {}
    for cluster in clusters:
        pg = next(iter(cluster.values()))[PG]
        most[pg] = max(most.get(pg, 0), len(cluster))
    sums = {}
    for cluster in clusters:
        block = next(iter(cluster.values()))
        if len(cluster) < most[block[PG]]:
            continue
        period, waits, gpu, last = compare(cluster)
        for rid, wait in waits.items():
            total = sums.setdefault(rid, {"n": 0, "work": 0.0, "wait": 0.0, "period": 0.0, "blocks": 0, "gpu": True,
                                          "waited_for": {}})
            total["n"] += block[SIZE]
            total["work"] += block[SIZE] * (period - wait)
            total["wait"] += block[SIZE] * wait
            total["period"] += block[SIZE] * period
            total["blocks"] += 1
            total["gpu"] = total["gpu"] and gpu
            if last != rid[0]:
                total["waited_for"][last] = total["waited_for"].get(last, 0.0) + block[SIZE] * wait
    by_host = {}
    for (host, _key, _segment), total in sums.items():
        if total["blocks"] >= MIN_BLOCKS:
            by_host.setdefault(host, []).append(total)
    out = {}
    for host, totals in by_host.items():
        out[host] = {name: round(statistics.median(t[name] / t["n"] for t in totals), 6)
                     for name in ("work", "wait", "period")}
        out[host]["work"] = max(out[host]["work"], 1e-6)  # a rank that waited the whole time: nothing to do
        out[host]["blocks"] = max(t["blocks"] for t in totals)
        out[host]["gpu"] = all(t["gpu"] for t in totals)
    for host in out:
        out[host]["cost"] = cost_of(host, by_host)
    return out


def cost_of(host, by_host):
    """What ``host`` costs the other nodes: the share of their time per collective they spend waiting for it (the
    collectives where one of its ranks came last), a median over each other node's ranks, then over those nodes;
    0.0 with no other node."""
    shares = [statistics.median(t["waited_for"].get(host, 0.0) / t["period"] if t["period"] > 0 else 0.0
                                for t in totals)
              for other, totals in sorted(by_host.items()) if other != host]
    return round(statistics.median(shares), 4) if shares else 0.0


def node_ranks(nodes):
    """The report's nodes (_report.timeline.node_model: samples by rank key) -> figures()' input."""
    return {(host, key): rank_blocks(records) for host, node in nodes.items()
            for key, records in node["samples"].items()}


def span(clusters):
    """Seconds between the first and the last of the compared blocks (``compared``; 0 with none)."""
    times = [b[T_FIRST] for c in clusters for b in c.values()]
    return max(times) - min(times) if times else 0.0
