# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the flight recorder and the rank's sampler cost, read from outside the ranks.

Runs one 2-rank gloo job under ``torchrun`` (in the venv given by --python, torch 2.13) three ways and reads
the CPU seconds of the whole process tree from this process (``getrusage(RUSAGE_CHILDREN)`` after torchrun,
which reaps its ranks, has been reaped): not the sampler's own thread clock.

- ``bare``: the job alone, ``TORCH_FR_BUFFER_SIZE=0`` (no recorder);
- ``recorder``: the flight recorder on (``TORCH_FR_BUFFER_SIZE=2000``), no wrapper;
- ``sampled``: as the collection runs a rank: the recorder on, the rank wrapper and its sampler (``mt_rank.py``,
  ``mt_sample.py`` from this checkout) writing samples and blocks every 2 s.

The job: ``--collectives`` all-reduces of one float each, ``--gap`` seconds apart (a sleep), so the recorder sees
a known rate. Printed per run: wall seconds, CPU seconds, and the differences against ``bare``: the recorder's
cost per 1000 collectives, the sampler's per node (2 ranks) per minute. Repeats with --repeat, medians.

    python3 benchmarks/recorder_cost.py --python /path/to/venv/bin/python --collectives 20000 --gap 0.002
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOB = '''
import os, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
n, gap = int(os.environ["BENCH_N"]), float(os.environ["BENCH_GAP"])
x = torch.ones(1)
for i in range(n):
    dist.all_reduce(x)
    if gap:
        time.sleep(gap)
dist.barrier()
dist.destroy_process_group()
'''


def children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(python, mode, collectives, gap, work):
    job_dir = os.path.join(work, mode)
    shutil.rmtree(job_dir, ignore_errors=True)
    os.makedirs(job_dir)
    env = dict(os.environ, BENCH_N=str(collectives), BENCH_GAP=str(gap), OMP_NUM_THREADS="1",
               TORCH_FR_BUFFER_SIZE="0" if mode == "bare" else "2000", MULTINODE_TRAINING_JOB_DIR=job_dir)
    script = os.path.join(work, "job.py")
    entry = [script]
    if mode == "sampled":
        entry = [os.path.join(work, "mt_rank.py"), script]
    argv = [python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"] + entry
    before, start = children_cpu(), time.monotonic()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.monotonic() - start, children_cpu() - before


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", required=True, help="a python with torch 2.13")
    parser.add_argument("--collectives", type=int, default=20000)
    parser.add_argument("--gap", type=float, default=0.002)
    parser.add_argument("--repeat", type=int, default=3)
    opts = parser.parse_args()
    work = tempfile.mkdtemp(prefix="recorder-cost-")
    try:
        with open(os.path.join(work, "job.py"), "w") as handle:
            handle.write(JOB)
        shutil.copy(os.path.join(ROOT, "plugins", "module_utils", "_node", "rankwrap.py"), os.path.join(work, "mt_rank.py"))
        shutil.copy(os.path.join(ROOT, "plugins", "module_utils", "_node", "sampler.py"), os.path.join(work, "mt_sample.py"))
        runs = {mode: [] for mode in ("bare", "recorder", "sampled")}
        for _run in range(opts.repeat):
            for mode in runs:  # interleaved, so that a change in the host's load touches every mode
                runs[mode].append(run(opts.python, mode, opts.collectives, opts.gap, work))
        blocks = 0
        for name in os.listdir(os.path.join(work, "sampled", "samples")):
            with open(os.path.join(work, "sampled", "samples", name)) as handle:
                blocks += sum(line.count('"frb"') for line in handle)
        med = {mode: (statistics.median(w for w, _c in r), statistics.median(c for _w, c in r)) for mode, r in runs.items()}
        print("%d collectives, %.3f s apart, 2 ranks, %d runs each (medians); %d sample lines with blocks"
              % (opts.collectives, opts.gap, opts.repeat, blocks))
        for mode, (wall, cpu) in med.items():
            print("  %-8s wall %7.2f s  CPU %7.2f s  (runs: %s)" % (mode, wall, cpu, ", ".join(
                "%.2f" % c for _w, c in runs[mode])))
        recorder = med["recorder"][1] - med["bare"][1]
        sampled = med["sampled"][1] - med["recorder"][1]
        print("recorder: %+.3f CPU s per 1000 collectives (2 ranks)" % (recorder / opts.collectives * 1000))
        print("sampler:  %+.3f CPU s per node (2 ranks) per minute of job" % (sampled / med["sampled"][0] * 60))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
