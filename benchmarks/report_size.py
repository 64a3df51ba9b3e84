# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The job report's size and writing time for long, wide jobs (issue 31: "the report's size for a
10-minute 8-rank job").

A synthetic collected job directory per case - nodes x ranks per node, a duration, steps per second,
the sampler's records every 2 s and one step line per step per rank, the shapes of
tests/fixtures/report/jobs/ - put through the report's writer (_report.job.report), as the play does.

    PYTHONPATH=.collections .venv/bin/python benchmarks/report_size.py
    PYTHONPATH=.collections .venv/bin/python benchmarks/report_size.py 2x4:600:1 2x4:600:10 8x8:36000:1
"""
from __future__ import annotations

import json
import os
import random
import sys
import tempfile
import time

from ansible_collections.multinode.training.plugins.module_utils._report import job

CASES = ["2x4:600:1", "2x4:600:10", "8x8:600:1", "2x4:36000:1"]


def synthesize(root, nodes, ranks, seconds, rate, interval=2.0):
    rng = random.Random(42)
    t0 = 1_800_000_000.0
    steps = int(seconds * rate)
    for n in range(nodes):
        host = "node%d" % (n + 1)
        os.makedirs(os.path.join(root, host, "exits"))
        os.makedirs(os.path.join(root, host, "samples"))
        with open(os.path.join(root, host, "job.json"), "w") as handle:
            json.dump({"job_id": "bench", "cmd": ["torchrun", "train.py"], "start": t0}, handle)
        with open(os.path.join(root, host, "result.json"), "w") as handle:
            json.dump({"rc": 0, "end": t0 + seconds}, handle)
        for local in range(ranks):
            key = "0_%d" % local
            rank = n * ranks + local
            with open(os.path.join(root, host, "exits", key + ".start"), "w") as handle:
                json.dump({"pid": 100 + local, "time": t0, "rank": rank, "local_rank": local, "restart": 0,
                           "python": "3.11.2", "prefix": "/opt/venv.releases/abc"}, handle)
            with open(os.path.join(root, host, "exits", key + ".exit"), "w") as handle:
                json.dump({"exitcode": 0, "message": None, "time": t0 + seconds, "rank": rank,
                           "versions": {"torch": "2.13.0"}}, handle)
            records = []
            for i in range(int(seconds / interval) + 1):
                t = t0 + i * interval
                records.append({"kind": "proc", "t": t, "cpu": 0.9 * i * interval, "delay": 0.05 * i * interval,
                                "rss": 2 ** 30 + rng.randrange(2 ** 24), "self_cpu": 0.0003 * i})
            for step in range(1, steps + 1):
                records.append({"kind": "line", "stream": "stdout", "t": t0 + step / rate + rng.random() * 0.01,
                                "text": "smoke: rank=%d step=%d loss=%.6f" % (rank, step, 10.0 / step)})
            records.sort(key=lambda r: r["t"])
            with open(os.path.join(root, host, "samples", key + ".jsonl"), "w") as handle:
                handle.write("".join(json.dumps(r) + "\n" for r in records))


def main(argv):
    print("| nodes x ranks | duration | steps/s | samples + step lines collected | report | writing |")
    print("|---|---|---|---|---|---|")
    for case in argv or CASES:
        shape, seconds, rate = case.split(":")
        nodes, ranks = (int(v) for v in shape.split("x"))
        with tempfile.TemporaryDirectory() as root:
            synthesize(root, nodes, ranks, float(seconds), float(rate))
            collected = sum(os.path.getsize(os.path.join(d, f)) for d, _s, files in os.walk(root) for f in files)
            start = time.perf_counter()
            out = job.report({"run_dir": root, "dest": os.path.join(root, "report.html")})
            took = time.perf_counter() - start
        print("| %dx%d | %s s | %s | %.1f MB | %.0f KB | %.1f s |" % (
            nodes, ranks, seconds, rate, collected / 1e6, out["size"] / 1e3, took))


if __name__ == "__main__":
    main(sys.argv[1:])
