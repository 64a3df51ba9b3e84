# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One line: how far a fabric check's figures were from the thresholds they were judged by.

    fabric_margins.py runs/<job id>/fabric.json RATIO [MIN]

With MIN, it exits 1 when a node's decision (below) is less than MIN times from its threshold:
noise, not the fault, could then have decided.

For links (Gbit/s) and compute (GFLOP/s), as fractions of the verdict's median: the lowest
figure at or over RATIO and how many times RATIO it is, the highest under RATIO and how many
times under RATIO it is. For latency: the highest link against its threshold (the verdict's
median / RATIO, at least the median + LATENCY_SLACK_MS). For the line rate (the verdict's
``line`` and ``line_ratio``): each link as a fraction of its slower end's line, and the
all_reduce of the slowest node's, against ``line_ratio``. Then each node's decision: a node kept
by how far its closest figure (its best link out, its best link in, its compute) is over its
threshold; a flagged node by how far its furthest figure is under one. Each figure is named (its
link or node): a figure the fault drags along (the links into a CPU-starved node) can sit near a
threshold without deciding anything, and the nodes' lines show what decided. A margin near 1 means
noise decides.
"""
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[4] / ".collections"))
# pylint: disable-next=wrong-import-position
from ansible_collections.multinode.training.plugins.module_utils._fabric.verdict import LATENCY_SLACK_MS  # noqa: E402


def _split(values, median, ratio, labels=None):
    """The lowest passing and the highest slow fraction of ``median``, each named by its label (the
    link or the node) when labels are given."""
    named = list(zip([v / median for v in values], labels or [None] * len(values)))
    passing = [pair for pair in named if pair[0] >= ratio]
    slow = [pair for pair in named if pair[0] < ratio]

    def who(label):
        return " " + label if label else ""

    out = []
    if passing:
        low, label = min(passing)
        out.append("passing >= %.3g%s (%.2fx the threshold %.3g)" % (low, who(label), low / ratio, ratio))
    if slow:
        high, label = max(slow)
        out.append("slow <= %.3g%s (%.2fx under it)" % (high, who(label), ratio / high))
    return ", ".join(out) or "no figure"


def _link_name(link):
    return "%s->%s" % (link["a"], link["b"])


def _line_margins(verdict, links):
    line, line_ratio = verdict.get("line") or {}, verdict.get("line_ratio")
    if not line_ratio:
        return []
    judged = [link for link in links if link["a"] in line and link["b"] in line]
    fractions = [link["gbps"] / min(line[link["a"]], line[link["b"]]) for link in judged]
    busbw = (verdict.get("result") or {}).get("allreduce_busbw_gbps")
    parts = []
    if fractions:
        parts.append("links / line rate: " + _split(fractions, 1.0, line_ratio, [_link_name(link) for link in judged]))
    if busbw is not None and line:
        parts.append("all_reduce / line rate: " + _split([busbw], min(line.values()), line_ratio))
    return parts


def _node_margins(verdict, ratio, links, compute, relative):
    """'node kept: 4.00x over (compute)' / 'node flagged: 15.8x under (compute)', one per node."""
    median, line = verdict.get("median") or {}, verdict.get("line") or {}
    line_ratio = verdict.get("line_ratio") or 0

    def link_margin(link):
        # the link's figure over the strictest threshold it is judged by (None: none applies)
        floors = [ratio * median["gbps"]] if relative and median.get("gbps") else []
        ends = [line[n] for n in (link["a"], link["b"]) if line.get(n)]
        if line_ratio and len(ends) == 2:
            floors.append(line_ratio * min(ends))
        return link["gbps"] / max(floors) if floors else None

    out = []
    for node in (verdict.get("result") or {}).get("nodes", []):
        figures = {}
        for side, end in (("best link out", "a"), ("best link in", "b")):
            mine = [link for link in links if link[end] == node]
            if mine:
                figures[side] = link_margin(max(mine, key=lambda link: link["gbps"]))
        if node in compute and median.get("gflops"):
            figures["compute"] = compute[node]["gflops"] / (ratio * median["gflops"])
        figures = {k: v for k, v in figures.items() if v is not None}
        if not figures:
            continue
        what = min(figures, key=figures.get)  # kept: the closest over; flagged: the furthest under
        if node in (verdict.get("flagged") or {}):
            out.append((node, "flagged", 1 / figures[what], what))
        else:
            out.append((node, "kept", figures[what], what))
    return out


def _decision_text(decision):
    node, how, times, what = decision
    return "%s %s: %.2fx %s (%s)" % (node, how, times, "under" if how == "flagged" else "over", what)


def margins(verdict, ratio):
    result, median = verdict.get("result") or {}, verdict.get("median") or {}
    links, compute = result.get("links", []), result.get("compute", {})
    parts = []
    # the medians judge links from three nodes on (verdict.py); two have the line rate alone
    relative = len(result.get("nodes", [])) > 2
    if relative and links and median.get("gbps"):
        names = [_link_name(link) for link in links]
        parts.append("links / median: " + _split([link["gbps"] for link in links], median["gbps"], ratio, names))
    if compute and median.get("gflops"):
        gflops = [c["gflops"] for c in compute.values()]
        parts.append("compute / median: " + _split(gflops, median["gflops"], ratio, list(compute)))
    if relative and links and median.get("latency_ms"):
        threshold = max(median["latency_ms"] / ratio, median["latency_ms"] + LATENCY_SLACK_MS)
        worst = max(link["latency_ms"] for link in links)
        parts.append("latency: highest %.3g ms, %.2fx under its threshold %.3g ms" % (
            worst, threshold / worst, threshold))
    parts += _line_margins(verdict, links)
    decisions = _node_margins(verdict, ratio, links, compute, relative)
    parts += [_decision_text(d) for d in decisions]
    return "; ".join(parts) or "no figures", decisions


def main(argv):
    with open(argv[1], encoding="utf-8") as handle:
        verdict = json.load(handle)
    text, decisions = margins(verdict, float(argv[2]))
    print(text)
    if len(argv) > 3:
        close = [_decision_text(d) for d in decisions if d[2] < float(argv[3])]
        if close or not decisions:
            sys.stderr.write("decisions under %sx from their thresholds: %s\n" % (
                argv[3], "; ".join(close) or "no node decided"))
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
