"""A container's CPU limited while one of its processes runs (molecule/launch_diagnosis/verify/fabric_gate.yml).

    python3 throttle_while.py CONTAINER --cpus=0.07 --back=2 --match=mt_rank.py --match=fabric_probe.py \
        --skip=torch.distributed.run [--after-socket] [--timeout=600]

Watches the container's processes (``docker top``, read by the engine from the host: nothing runs in the
container) every 0.2 s. Once a process whose command line holds every ``--match`` word and no ``--skip``
word runs (with ``--after-socket``: once such a process holds a socket, read from ``/proc/PID/fd`` on the
host), the container gets ``docker update --cpus CPUS``; when no such process is left, it gets ``--cpus
BACK`` again and this exits, printing one JSON line: when each happened (the controller's clock), the
pids seen, ``throttled`` (false when no such process ran before ``--timeout``) and ``cpu_s``, the CPU
seconds the container used while limited (its cgroup's usage on the host, cgroup v1 or v2): the work the
fault cost, which a busy host does not stretch as it stretches the wall time (the container then gets
less than its quota).

Why: the fabric gate step's slow node (0.07 of a CPU) should be slow where the probe measures it, as a
node with a slow GPU is: its links and its compute, after its rank has imported torch and connected to
the job's store (its first socket). Limited for the whole play, every task of the play on that node (a
Python start and a module at 0.07 CPU, about 10 s each) cost the step about 3 minutes more; limited from
the rank's start, its import of torch cost 3.5 CPU-s (50 s) more, and the container used 11.5 to 12.9
CPU-s while limited (165 to 185 s at 0.07 against the probe's 240 s limit): 6.25 in the rank, 3.4 in
five polls of the play, each a module at 0.07 CPU (measured per process from the host)."""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = "/sys/fs/cgroup"


def matching(container, words, skip):
    """The pids of the container's processes whose command line holds every word and no skip word."""
    out = subprocess.run(["docker", "top", container, "-eo", "pid,args"], capture_output=True, text=True,
                         check=False)
    if out.returncode != 0:
        return None  # the container is gone, or not running
    pids = []
    for line in out.stdout.splitlines()[1:]:
        fields = line.split(None, 1)
        if len(fields) == 2 and all(w in fields[1] for w in words) and not any(s in fields[1] for s in skip):
            pids.append(int(fields[0]))
    return pids


def holds_socket(pid):
    """The process (a host pid) has a socket open; False when it is gone or cannot be read."""
    try:
        fds = os.listdir("/proc/%d/fd" % pid)
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink("/proc/%d/fd/%s" % (pid, fd)).startswith("socket:"):
                return True
        except OSError:
            continue
    return False


def update(container, cpus):
    subprocess.run(["docker", "update", "--cpus", cpus, container], check=True, capture_output=True)
    return time.time()


def cpu_seconds(container):
    """CPU seconds the container's processes have used, read from its cgroup on the host (cgroup v1
    cpuacct.usage, v2 cpu.stat usage_usec); None where it cannot be read."""
    out = subprocess.run(["docker", "inspect", "-f", "{{.State.Pid}}", container], capture_output=True,
                         text=True, check=False)
    try:
        with open("/proc/%d/cgroup" % int(out.stdout.strip()), encoding="ascii") as handle:
            lines = [line.rstrip("\n").split(":", 2) for line in handle]
    except (ValueError, OSError):
        return None
    for _id, controllers, path in lines:
        if "cpuacct" in controllers.split(","):
            for mount in ("cpuacct", "cpu,cpuacct", "cpuacct,cpu"):
                usage = os.path.join(ROOT, mount, path.lstrip("/"), "cpuacct.usage")
                if os.path.exists(usage):
                    with open(usage, encoding="ascii") as handle:
                        return int(handle.read()) / 1e9
        if controllers == "":
            stat = os.path.join(ROOT, path.lstrip("/"), "cpu.stat")
            if os.path.exists(stat):
                with open(stat, encoding="ascii") as handle:
                    fields = dict(line.split() for line in handle if line.strip())
                return int(fields["usage_usec"]) / 1e6
    return None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("container")
    parser.add_argument("--cpus", required=True, help="the limit while a matching process runs")
    parser.add_argument("--back", required=True, help="the CPU count given back afterwards")
    parser.add_argument("--match", action="append", required=True, help="a word every such command line holds")
    parser.add_argument("--skip", action="append", default=[], help="a word no such command line holds")
    parser.add_argument("--after-socket", action="store_true",
                        help="limit once a matching process holds a socket, not as soon as it runs")
    parser.add_argument("--timeout", type=float, default=600.0)
    opts = parser.parse_args(argv)
    report = {"container": opts.container, "cpus": opts.cpus, "throttled": False, "pids": []}
    deadline = time.monotonic() + opts.timeout
    try:
        while time.monotonic() < deadline:
            pids = matching(opts.container, opts.match, opts.skip)
            if pids and opts.after_socket:
                report["started_at"] = report.get("started_at") or time.time()
                pids = [pid for pid in pids if holds_socket(pid)]
            if pids:
                report.update(throttled=True, pids=pids, limited_at=update(opts.container, opts.cpus),
                              cpu_s_at_limit=cpu_seconds(opts.container))
                break
            time.sleep(0.2)
        else:
            report["error"] = "no process matching %s within %.0f s" % (opts.match, opts.timeout)
            print(json.dumps(report))
            return 1
        while time.monotonic() < deadline:
            pids = matching(opts.container, opts.match, opts.skip)
            if not pids:
                break
            report["pids"] = sorted(set(report["pids"]) | set(pids))
            time.sleep(0.2)
        else:
            report["error"] = "still running after %.0f s" % opts.timeout
    finally:
        if report["throttled"]:
            used = cpu_seconds(opts.container)
            report["released_at"] = update(opts.container, opts.back)
            if used is not None and report["cpu_s_at_limit"] is not None:
                report["cpu_s"] = round(used - report["cpu_s_at_limit"], 3)
    print(json.dumps(report))
    return 0 if "error" not in report else 1


if __name__ == "__main__":
    sys.exit(main())
