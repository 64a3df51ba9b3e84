"""Benchmark role wheel_distribute: wall time and bytes the controller sends, for 2, 4 and 8 nodes.

What is measured
  For each node count N, N containers (image multinode-training/debian:bookworm) are started and
  the role runs against them from this machine (the controller), through Ansible's
  community.docker.docker connection, with the forks of ansible.cfg (32: all nodes in parallel).
  By default the distribution part of the role runs: preflight on the controller, the guard on
  every node, copy of the wheel, manifest and wheelhouse with sha256 checks (tags
  wheel_distribute_{preflight,guard,copy}); `--full` adds install, verification and the report
  (pip-installing torch in N containers on this host then dominates and measures the CPU, not the
  distribution). Each N is run twice: the cold run and the idempotent re-run.

How bytes are counted
  The docker connection moves every file and every module through the docker CLI, which talks to
  dockerd over a unix socket. The script puts a counting proxy in front of that socket
  (DOCKER_HOST=unix://<tmp>/docker.sock) and counts every byte the controller writes into it:
  files, module payloads, exec requests, protocol overhead, everything the controller sends.
  The reference is the payload: N x (wheel + manifest + the wheelhouse's *.whl); a ratio near 1.0
  means every file went to every node exactly once.

No-change re-run (--nochange): the figure for nodes that already hold the verified venv. For each N,
  the full role runs once (install), then twice more: the second of those is timed (its first run
  lets a role version record what it checks). With --baseline REV the same is measured for the role
  as it is at git revision REV (a temporary worktree), on the same containers, right before: both
  columns under the same conditions. Each timed run must report changed=0.

Prints figures; asserts nothing about time.

  .venv/bin/python benchmarks/distribute.py [--nodes 2 4 8] [--full] [--keep]
  .venv/bin/python benchmarks/distribute.py --nochange --nodes 2 8 [--baseline d164429]
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
IMAGE = "multinode-training/debian:bookworm"
PREFIX = "bench-wheel_distribute-"
DOCKER_SOCK = "/var/run/docker.sock"


class CountingProxy:
    """Unix-socket proxy in front of dockerd that counts bytes in each direction."""

    def __init__(self, path, upstream=DOCKER_SOCK):
        self.path, self.upstream = path, upstream
        self.sent = 0       # controller -> dockerd (-> nodes)
        self.received = 0   # dockerd -> controller
        self.lock = threading.Lock()
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(path)
        self.server.listen(256)
        threading.Thread(target=self._accept, daemon=True).start()

    def reset(self):
        with self.lock:
            self.sent = self.received = 0

    def _accept(self):
        while True:
            try:
                client, _addr = self.server.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(self.upstream)
            threading.Thread(target=self._pump, args=(client, upstream, "sent"), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, "received"), daemon=True).start()

    def _pump(self, src, dst, counter):
        try:
            while True:
                data = src.recv(1 << 20)
                if not data:
                    break
                with self.lock:
                    setattr(self, counter, getattr(self, counter) + len(data))
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
                try:
                    sock.shutdown(how)
                except OSError:
                    pass

    def close(self):
        self.server.close()


def docker(*args, check=True):
    return subprocess.run(["docker", *args], check=check, capture_output=True, text=True)


def start_nodes(count, image=IMAGE):
    names = ["%s%d" % (PREFIX, i) for i in range(1, count + 1)]
    stop_nodes(names)
    for name in names:
        docker("run", "-d", "--name", name, "--hostname", name, image, "sleep", "infinity")
    return names


def stop_nodes(names):
    existing = docker("ps", "-aq", "--filter", "name=" + PREFIX).stdout.split()
    if existing:
        docker("rm", "-f", *existing, check=False)


def payload_bytes(dist_dir, wheelhouse):
    manifests = sorted(pathlib.Path(dist_dir).glob("*.whl.manifest.json"), key=lambda p: p.stat().st_mtime)
    if not manifests:
        sys.exit("no *.whl.manifest.json in %s: build the wheel first" % dist_dir)
    manifest = manifests[-1]
    wheel = manifest.parent / json.loads(manifest.read_text())["wheel"]
    files = [manifest, wheel] + sorted(pathlib.Path(wheelhouse).glob("*.whl"))
    return sum(f.stat().st_size for f in files), len(files)


def role_play(workdir, names, root=ROOT):
    """Inventory of the containers (docker connection) and a play applying wheel_distribute: the command."""
    inventory = workdir / "inventory.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {n: {"ansible_connection": "community.docker.docker"}
                                                       for n in names}}}))
    playbook = workdir / "distribute.yml"
    playbook.write_text(json.dumps([{
        "name": "Benchmark wheel_distribute", "hosts": "all", "gather_facts": False,
        "roles": [{"role": "multinode.training.wheel_distribute"}]}]))
    return [str(ROOT / ".venv" / "bin" / "ansible-playbook"), "-i", str(inventory), str(playbook)]


def worktree(rev, where):
    """A checkout of the collection at rev (its own .collections link resolves to it)."""
    subprocess.run(["git", "worktree", "add", "--detach", "-f", str(where), rev], cwd=str(ROOT), check=True,
                   capture_output=True)
    return where


def run_tree(root, workdir, names, proxy, args, full=True):
    """The role from the collection at root (ROOT or a worktree): (seconds, changed)."""
    cmd = role_play(workdir, names) + [
        "-e", "wheel_distribute_dist_dir=" + args.dist_dir,
        "-e", "wheel_distribute_wheelhouse=" + args.wheelhouse]
    env = dict(os.environ, DOCKER_HOST="unix://" + proxy.path, ANSIBLE_CONFIG=str(root / "ansible.cfg"),
               ANSIBLE_NOCOLOR="1", PATH=str(ROOT / ".venv" / "bin") + os.pathsep + os.environ.get("PATH", ""))
    start = time.monotonic()
    result = subprocess.run(cmd, cwd=str(root), env=env, capture_output=True, text=True, check=False)
    elapsed = time.monotonic() - start
    if result.returncode != 0:
        sys.stderr.write(result.stdout[-4000:] + result.stderr[-2000:])
        raise SystemExit("ansible-playbook failed (rc=%d) for %d nodes (%s)" % (result.returncode, len(names), root))
    recap = [line for line in result.stdout.splitlines() if line.startswith(PREFIX)]
    tasks = max((int(part.split("=")[1]) for line in recap for part in line.split() if part.startswith("ok=")), default=0)
    skipped = max((int(part.split("=")[1]) for line in recap for part in line.split() if part.startswith("skipped=")),
                  default=0)
    return elapsed, changed_total(result.stdout), tasks, skipped


def nochange(args, proxy, workdir):
    """Re-run with nothing to do, per node count: baseline revision (optional) then this tree.

    One node gets the full role (install: torch and the wheel into a release venv) and is committed to an
    image; every node count starts from that image, so all of them hold the verified venv already.
    """
    trees = []
    if args.baseline:
        trees.append(("baseline " + args.baseline, worktree(args.baseline, workdir / "baseline")))
    trees.append(("this tree", ROOT))
    image = PREFIX + "installed:bench"
    names = []
    try:
        names = start_nodes(1)
        install, _changed, _t, _s = run_tree(trees[0][1], workdir, names, proxy, args)
        print("full role on one node (install, %s): %.1f s" % (trees[0][0], install))
        docker("commit", names[0], image)
        print("%5s  %-22s  %8s  %13s  %7s" % ("nodes", "role", "rerun s", "ok+skipped", "changed"))
        for count in args.nodes:
            names = start_nodes(count, image)
            for label, root in trees:
                run_tree(root, workdir, names, proxy, args)  # settles what a role version records
                elapsed, changed, ok, skipped = run_tree(root, workdir, names, proxy, args)
                print("%5d  %-22s  %8.1f  %6d+%-6d  %7d" % (count, label, elapsed, ok, skipped, changed))
                sys.stdout.flush()
            if not args.keep or count != args.nodes[-1]:
                stop_nodes(names)
    finally:
        if args.baseline:
            subprocess.run(["git", "worktree", "remove", "--force", str(workdir / "baseline")], cwd=str(ROOT),
                           check=False, capture_output=True)
        if not args.keep:
            stop_nodes(names)
            docker("rmi", "-f", image, check=False)
    print("tasks: ok+skipped per node (recap); machine: %d CPUs, load average %s"
          % (os.cpu_count(), " ".join(open("/proc/loadavg").read().split()[:3])))


def changed_total(stdout):
    """Sum of changed= over the recap lines of the benchmark's containers."""
    recap = [line for line in stdout.splitlines() if line.startswith(PREFIX)]
    return sum(int(part.split("=")[1]) for line in recap for part in line.split() if part.startswith("changed="))


def run_role(workdir, names, proxy, args):
    cmd = role_play(workdir, names) + [
        "-e", "wheel_distribute_dist_dir=" + args.dist_dir,
        "-e", "wheel_distribute_wheelhouse=" + args.wheelhouse]
    if not args.full:
        cmd += ["--tags", "wheel_distribute_preflight,wheel_distribute_guard,wheel_distribute_copy"]
    env = dict(os.environ, DOCKER_HOST="unix://" + proxy.path, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
               ANSIBLE_NOCOLOR="1", PATH=str(ROOT / ".venv" / "bin") + os.pathsep + os.environ.get("PATH", ""))
    proxy.reset()
    elapsed, stdout = run_playbook(cmd, env, len(names))
    return elapsed, proxy.sent, proxy.received, changed_total(stdout)


def run_playbook(cmd, env, nodes):
    """Run one ansible-playbook command from the repository root: (seconds, stdout); exit on failure."""
    start = time.monotonic()
    result = subprocess.run(cmd, cwd=str(ROOT), env=env, capture_output=True, text=True, check=False)
    elapsed = time.monotonic() - start
    if result.returncode != 0:
        sys.stderr.write(result.stdout[-4000:] + result.stderr[-2000:])
        raise SystemExit("ansible-playbook failed (rc=%d) for %d nodes" % (result.returncode, nodes))
    return elapsed, result.stdout


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--full", action="store_true", help="also install, verify and report")
    parser.add_argument("--keep", action="store_true", help="leave the last containers running")
    parser.add_argument("--nochange", action="store_true", help="time the full role's re-run with nothing to do")
    parser.add_argument("--baseline", help="with --nochange: also the role at this git revision, same containers")
    parser.add_argument("--dist-dir", default=str(ROOT / "dist"))
    parser.add_argument("--wheelhouse", default=str(ROOT / ".cache" / "wheelhouse"))
    args = parser.parse_args()

    if args.nochange:
        with tempfile.TemporaryDirectory(prefix="bench-distribute-") as tmp:
            proxy = CountingProxy(str(pathlib.Path(tmp) / "docker.sock"))
            try:
                nochange(args, proxy, pathlib.Path(tmp))
            finally:
                proxy.close()
        return
    payload, nfiles = payload_bytes(args.dist_dir, args.wheelhouse)
    print("payload per node: %d files, %.1f MB (wheel + manifest + wheelhouse *.whl)" % (nfiles, payload / 1e6))
    print("scope: %s; bytes: counted at a proxy on the docker socket (controller -> dockerd)" % (
        "full role" if args.full else "preflight + guard + copy"))
    header = ("nodes", "run", "wall s", "sent MB", "payload MB", "ratio", "changed")
    print("%5s  %-6s  %8s  %12s  %12s  %7s  %7s" % header)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-distribute-") as tmp:
        workdir = pathlib.Path(tmp)
        proxy = CountingProxy(str(workdir / "docker.sock"))
        names = []
        try:
            for count in args.nodes:
                names = start_nodes(count)
                ideal = payload * count
                for label in ("cold", "rerun"):
                    elapsed, sent, received, changed = run_role(workdir, names, proxy, args)
                    rows.append((count, label, elapsed, sent))
                    print("%5d  %-6s  %8.1f  %12.1f  %12.1f  %7.3f  %7d" % (
                        count, label, elapsed, sent / 1e6, ideal / 1e6 if label == "cold" else 0.0,
                        sent / ideal if label == "cold" else 0.0, changed))
                    sys.stdout.flush()
                if not args.keep or count != args.nodes[-1]:
                    stop_nodes(names)
        finally:
            proxy.close()
            if not args.keep:
                stop_nodes(names)
    cold = [(n, t) for n, label, t, _changed in rows if label == "cold"]
    if len(cold) > 1:
        base_n, base_t = cold[0]
        print("time growth (cold): " + ", ".join(
            "%d nodes %.2fx of %d nodes" % (n, t / base_t, base_n) for n, t in cold[1:]))


if __name__ == "__main__":
    main()
