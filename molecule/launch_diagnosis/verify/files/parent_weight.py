# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The CPU weight of a container's parent cgroup on the docker host (fabric_gate.yml).

    parent_weight.py CONTAINER_PID --times N    # N x the kernel's default weight
    parent_weight.py CONTAINER_PID --set VALUE  # put back what --times printed

Prints one JSON line: the weight file, the value before and the value now.

Why: docker's ``--cpu-shares`` weighs a container against its siblings only, the containers
under ``/docker`` (cgroupfs driver) or ``system.slice`` (systemd). On cgroup v1 each process of the
host's root group weighs as much as all containers together. Beside three busy processes
on the 2-core host (the other test stream's compiles are such), the probe's compute pass on
the three nodes with no fault read 5.5 to 23 GFLOP/s, one node 0.56 of the median; with the
containers' parent weighted 8x, 18 to 27, every node within 0.88 of the median.
"""
import json
import os
import sys

ROOT = "/sys/fs/cgroup"


def weight_file(pid):
    """(path, default) of the weight file of the cgroup above the process's cpu cgroup."""
    with open("/proc/%d/cgroup" % pid, encoding="ascii") as handle:
        lines = [line.rstrip("\n").split(":", 2) for line in handle]
    for _id, controllers, path in lines:
        if "cpu" in controllers.split(","):
            parent = os.path.dirname(path.rstrip("/"))
            if parent in ("", "/"):
                break
            for mount in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
                candidate = os.path.join(ROOT, mount, parent.lstrip("/"), "cpu.shares")
                if os.path.exists(candidate):
                    return candidate, 1024
    for _id, controllers, path in lines:
        if controllers == "":
            parent = os.path.dirname(path.rstrip("/"))
            candidate = os.path.join(ROOT, parent.lstrip("/"), "cpu.weight")
            if parent not in ("", "/") and os.path.exists(candidate):
                return candidate, 100
    sys.exit("pid %d: no cpu.shares (cgroup v1) or cpu.weight (v2) above its cgroup under %s" % (pid, ROOT))


def main(argv):
    if len(argv) != 3 or argv[1] not in ("--times", "--set"):
        sys.exit(__doc__)
    path, default = weight_file(int(argv[0]))
    with open(path, encoding="ascii") as handle:
        before = int(handle.read().split()[0])
    value = default * int(argv[2]) if argv[1] == "--times" else int(argv[2])
    try:
        with open(path, "w", encoding="ascii") as handle:
            handle.write("%d\n" % value)
    except OSError as err:
        sys.exit("%s: cannot write %d (%s); the fabric step needs root on the docker host" % (path, value, err))
    with open(path, encoding="ascii") as handle:
        now = int(handle.read().split()[0])
    print(json.dumps({"file": path, "before": before, "now": now}))


if __name__ == "__main__":
    main(sys.argv[1:])
