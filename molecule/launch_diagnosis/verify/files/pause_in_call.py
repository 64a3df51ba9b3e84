# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Freeze a container (docker pause) while a module call of the controller runs in it (data_sync.yml).

    pause_in_call.py CONTAINER --while MARK [--age 1] [--timeout 240]

Watches the container's processes every 0.2 s (``docker top`` for their host pids and ages, each one's
whole command line from the host's /proc: ``docker top`` cuts long ones, such as the transfer worker's
``python -c <its source> MARK ...``); once a process whose command line contains MARK runs (the node's
transfer worker, the Slurm guard) and a module call of the controller (``/bin/sh -c <python> [<the
module's file>] && sleep 0``: Ansible over the docker connection, pipelined or not) has run for at least
--age seconds, pauses the container.
A call in flight then blocks as it would on a frozen host; a new ``docker exec`` would be refused
at once instead (a paused container), which is not what a poll's bound is for: hence in a call.
Prints one JSON line: the controller's clock just before and just after ``docker pause``, and the
call's pid and age. Exits 1 when no such call came within --timeout seconds (nothing paused).

A ``docker pause`` that fails is tried again at the next look, while such a call still runs: the freezer
can fail to stop every task of the container in its time on a loaded host ("OCI runtime pause failed:
unable to freeze", CI 2026-12-02), and runc then thaws the container again. The error is printed if no
try succeeded."""
import argparse
import json
import re
import subprocess
import sys
import time

CALL = re.compile(r"^/bin/sh -c \S*python[0-9.]*( \S+AnsiballZ_\S+\.py)? && sleep 0$")


def processes(container):
    """[(host pid, seconds running, command line)] of the container's processes."""
    out = subprocess.run(["docker", "top", container, "-eo", "pid,etimes"], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, universal_newlines=True, check=False).stdout
    found = []
    for line in out.splitlines()[1:]:
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            try:
                with open("/proc/%s/cmdline" % parts[0], "rb") as handle:
                    argv = handle.read().rstrip(b"\0").split(b"\0")
            except OSError:
                continue  # ended meanwhile
            found.append((int(parts[0]), int(parts[1]), " ".join(a.decode("utf-8", "replace") for a in argv)))
    return found


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("container")
    parser.add_argument("--while", dest="mark", required=True)
    parser.add_argument("--age", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=240)
    args = parser.parse_args(argv)
    deadline = time.time() + args.timeout
    failed = []
    while time.time() < deadline:
        procs = processes(args.container)
        calls = [(pid, age) for pid, age, text in procs if CALL.match(text) and age >= args.age]
        if calls and any(args.mark in text for _pid, _age, text in procs):
            before = time.time()
            paused = subprocess.run(["docker", "pause", args.container], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, universal_newlines=True, check=False)
            if paused.returncode == 0:
                print(json.dumps({"before": before, "after": time.time(), "pid": calls[0][0], "age": calls[0][1],
                                  "failed_tries": failed}))
                return 0
            failed.append(paused.stderr.strip())
        time.sleep(0.2)
    print(json.dumps({"error": "no module call of %d s or more beside %r in %s paused within %d s"
                      % (args.age, args.mark, args.container, args.timeout), "failed_tries": failed}))
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
