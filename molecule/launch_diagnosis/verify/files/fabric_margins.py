# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One line: how far a fabric check's figures were from the thresholds they were judged by.

    fabric_margins.py runs/<job id>/fabric.json RATIO

For links (Gbit/s) and compute (GFLOP/s), as fractions of the verdict's median: the lowest
figure at or over RATIO and how many times RATIO it is, the highest under RATIO and how many
times under RATIO it is. For latency: the highest link against its threshold (the verdict's
median / RATIO, at least the median + LATENCY_SLACK_MS). A margin near 1 means noise decides.
"""
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[4] / ".collections"))
# pylint: disable-next=wrong-import-position
from ansible_collections.multinode.training.plugins.module_utils._fabric.verdict import LATENCY_SLACK_MS  # noqa: E402


def _split(values, median, ratio):
    fractions = [v / median for v in values]
    passing = [f for f in fractions if f >= ratio]
    slow = [f for f in fractions if f < ratio]
    out = []
    if passing:
        out.append("passing >= %.3g of the median (%.2fx the threshold %.3g)" % (
            min(passing), min(passing) / ratio, ratio))
    if slow:
        out.append("slow <= %.3g (%.2fx under it)" % (max(slow), ratio / max(slow)))
    return ", ".join(out) or "no figure"


def margins(verdict, ratio):
    result, median = verdict.get("result") or {}, verdict.get("median") or {}
    links, compute = result.get("links", []), result.get("compute", {})
    parts = []
    if links and median.get("gbps"):
        parts.append("links: " + _split([link["gbps"] for link in links], median["gbps"], ratio))
    if compute and median.get("gflops"):
        parts.append("compute: " + _split([c["gflops"] for c in compute.values()], median["gflops"], ratio))
    if links and median.get("latency_ms"):
        threshold = max(median["latency_ms"] / ratio, median["latency_ms"] + LATENCY_SLACK_MS)
        worst = max(link["latency_ms"] for link in links)
        parts.append("latency: highest %.3g ms, %.2fx under its threshold %.3g ms" % (
            worst, threshold / worst, threshold))
    return "; ".join(parts) or "no figures"


def main(argv):
    with open(argv[1], encoding="utf-8") as handle:
        verdict = json.load(handle)
    print(margins(verdict, float(argv[2])))


if __name__ == "__main__":
    main(sys.argv)
