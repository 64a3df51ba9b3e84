"""Benchmark job requirements: the added time of a requirements change, for 2 and 4 nodes.

What is measured
  For each node count N, N containers (image multinode-training/debian:bookworm) are started and the
  whole role wheel_distribute runs against them from this machine (community.docker.docker connection,
  forks 32: all nodes in parallel), three times:

    base     no job requirements: the venv as before this feature (cold: torch + DeepSpeed install)
    change   train_requirements [accelerate, tabulate==0.9.0]: resolution on the controller (pip
             dry-run against the pins, download with sha256, lock), copy of the added wheels, a new
             release installed offline with --require-hashes on every node, verified, switched
    rerun    the same requirements again: the lock is reused (no pip run, nothing downloaded),
             nothing copied, no release built; changed=0 expected

  "added time of a requirements change" is the `change` row; `rerun` is what an unchanged
  requirement set costs on every later train.yml. The resolution alone (controller, the module
  wheel_distribute (lock)) is timed separately in the first and the second run, from the Ansible
  profile of that task.

The wheel and manifest are copied from dist/ into a temporary directory (the lock and the downloaded
wheels are written next to the manifest). Prints figures; asserts nothing about time.

  .venv/bin/python benchmarks/requirements.py [--nodes 2 4] [--requirements accelerate tabulate==0.9.0]
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import shutil
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import distribute  # noqa: E402  pylint: disable=wrong-import-position

ROOT = pathlib.Path(__file__).resolve().parents[1]
distribute.PREFIX = "bench-requirements-"


def snapshot_dist(src, dest):
    manifests = sorted(pathlib.Path(src).glob("*.whl.manifest.json"), key=lambda p: p.stat().st_mtime)
    if not manifests:
        sys.exit("no *.whl.manifest.json in %s: build the wheel first" % src)
    dest.mkdir()
    wheel = manifests[-1].parent / json.loads(manifests[-1].read_text())["wheel"]
    for path in (manifests[-1], wheel):
        shutil.copy2(path, dest / path.name)


def run_role(workdir, names, dist, wheelhouse, requirements):
    cmd = distribute.role_play(workdir, names) + [
        "-e", "wheel_distribute_dist_dir=%s" % dist, "-e", "wheel_distribute_wheelhouse=%s" % wheelhouse,
        "-e", json.dumps({"train_requirements": requirements})]
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_tasks", PROFILE_TASKS_SORT_ORDER="none",
               PROFILE_TASKS_TASK_OUTPUT_LIMIT="all",
               PATH=str(ROOT / ".venv" / "bin") + os.pathsep + os.environ.get("PATH", ""))
    elapsed, stdout = distribute.run_playbook(cmd, env, len(names))
    changed = distribute.changed_total(stdout)
    resolve = re.search(r"resolve and lock the job requirements \(controller\) -+ (\d+\.\d+)s", stdout)
    return elapsed, changed, float(resolve.group(1)) if resolve else 0.0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--requirements", nargs="+", default=["accelerate", "tabulate==0.9.0"])
    parser.add_argument("--dist-dir", default=str(ROOT / "dist"))
    parser.add_argument("--wheelhouse", default=str(ROOT / ".cache" / "wheelhouse"))
    args = parser.parse_args()
    print("requirements: %s; full role wheel_distribute per run" % " ".join(args.requirements))
    print("%5s  %-7s  %8s  %10s  %7s" % ("nodes", "run", "wall s", "resolve s", "changed"))
    for count in args.nodes:
        with tempfile.TemporaryDirectory(prefix="bench-requirements-") as tmp:
            workdir = pathlib.Path(tmp)
            dist = workdir / "dist"
            snapshot_dist(args.dist_dir, dist)
            names = distribute.start_nodes(count)
            try:
                for label, reqs in (("base", []), ("change", args.requirements), ("rerun", args.requirements)):
                    elapsed, changed, resolve = run_role(workdir, names, dist, args.wheelhouse, reqs)
                    print("%5d  %-7s  %8.1f  %10.1f  %7d" % (count, label, elapsed, resolve, changed))
                    sys.stdout.flush()
            finally:
                distribute.stop_nodes(names)


if __name__ == "__main__":
    main()
