# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Watch a job's processes from outside it, on the controller (resilience.yml's timings).

    job_poller.py --node NAME... --job ID... --log FILE [--until-clear] [--stop FILE]
                  [--interval S] [--max S]

One long-lived `docker exec -i NAME python3 -c <job_procs.py> mt-verify-probe --job ID --every S`
per node: the probe in the container looks every S seconds (default 0.25) at /proc as root and
as the job's account (root in a container cannot read another uid's environment) and prints one
JSON line per look, until this poller closes its stdin. One docker exec per node, not one per
look: the looks cost the nodes' CPUs (the job's) about a Python /proc scan each, not a container
exec and an interpreter start. Every look goes to FILE as one JSON line (``counted``: how many of
the job's processes it showed). A process counts as the job's when it carries one of the ids and
is the job's own (supervisor, torchrun, rank, watcher, keeper or a process with the job's
environment markers), not the controller's poll, a process that only has one of the job's files
open (the play's collection) or only names an id in its argv (the play's tools); those are logged
but not counted. A node whose stream ends while its
container is not running is ``down`` (killed: nothing of the job runs there); its stream is
started again if the container runs again.

It ends when the stop file (``--stop``) exists, after ``--max`` seconds, or with ``--until-clear``
as soon as every node's latest look (or its being down) comes after the last sight of a counted
process and shows none, once one was seen. Then it prints one JSON line:

    first_seen, last_seen   scan times (the node's clock: the host's) of the first and the last
                            look that showed a counted process; last_what: node, pid, user, kinds, argv
    last_seen_kind          kind (rank, agent, supervisor, watcher, keeper, marked; "work": any
                            process that is none of supervisor, watcher, keeper) -> the last look
                            that showed a counted process of that kind
    first_clear             the time by which every node had been seen clear after last_seen
    looks, gap_max          looks received and the longest gap between two looks of a node (the
                            resolution of last_seen)
    seen                    node -> pids of counted processes seen there
    down                    nodes whose container stopped running
    errors                  what else went wrong (the last few)
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

# What the job's own processes are (job_procs.py's kinds); not: the controller's polls, a process
# that only holds a file of the job ("files": the play's collection) or only names the id in its
# argv ("argv": the play's own tools on the node, e.g. a module run with the id on its command line).
OWN = {"supervisor", "agent", "rank", "watcher", "keeper", "marked"}
PROBE = "mt-verify-probe"


def probe_source():
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "job_procs.py")) as handle:
        return handle.read()


def counted(answer):
    return [p for p in answer.get("procs", []) if set(p["kinds"]) & OWN and p["jobs"]]


def running(node):
    return subprocess.run(["docker", "inspect", "-f", "{{.State.Running}}", node],
                          capture_output=True, text=True, check=False).stdout.strip() == "true"


class Poller:
    def __init__(self, opts):
        self.opts = opts
        self.source = probe_source()
        self.lock = threading.Lock()
        self.log = open(opts["log"], "a")
        self.done = threading.Event()
        self.procs = {}
        # per node: time of its latest look, whether it showed counted processes; down
        self.latest = {}
        self.summary = {"first_seen": None, "last_seen": None, "last_what": None, "first_clear": None, "looks": 0,
                        "gap_max": 0.0, "seen": {}, "down": [], "errors": [], "started": time.time(),
                        "last_seen_kind": {}}

    def error(self, text):
        self.summary["errors"] = (self.summary["errors"] + [text])[-5:]

    def follow(self, node):
        """Run the node's probe stream, again while the container runs; record every look."""
        argv = ["docker", "exec", "-i", node, "python3", "-c", self.source, PROBE, "--name", node, "--every",
                str(self.opts["interval"]), "--max", str(self.opts["max"])]
        for job in self.opts["job"]:
            argv += ["--job", job]
        while not self.done.is_set():
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True)
            with self.lock:
                self.procs[node] = proc
            last = None
            for line in proc.stdout:
                try:
                    answer = json.loads(line)
                except ValueError:
                    with self.lock:
                        self.error("%s: not JSON: %r" % (node, line[-200:]))
                    continue
                now = answer.get("time", time.time())
                if last is not None:
                    with self.lock:
                        self.summary["gap_max"] = round(max(self.summary["gap_max"], now - last), 3)
                last = now
                self.record(node, answer)
            proc.wait()
            if self.done.is_set():
                break
            err = proc.stderr.read().strip()
            with self.lock:
                if not running(node):
                    if node not in self.summary["down"]:
                        self.summary["down"].append(node)
                    self.latest[node] = {"time": time.time(), "counted": 0, "down": True}
                    self.log.write(json.dumps({"node": node, "down": err or "rc %s" % proc.returncode,
                                               "time": time.time(), "counted": 0}) + "\n")
                    self.log.flush()
                else:
                    self.error("%s: probe ended (rc %s): %s" % (node, proc.returncode, err[-300:]))
            # the container is down (or the probe failed): try again in a moment
            self.done.wait(1.0)

    def record(self, node, answer):
        own = counted(answer)
        answer["counted"] = len(own)
        with self.lock:
            self.log.write(json.dumps(answer) + "\n")
            self.log.flush()
            self.summary["looks"] += 1
            for err in answer.get("errors") or []:
                self.error("%s: %s" % (node, err))
            times = {s["user"]: s["time"] for s in answer["scans"]}
            self.latest[node] = {"time": max(times.values()), "counted": len(own)}
            if not own:
                return
            seen_here = self.summary["seen"].setdefault(node, [])
            seen_here.extend(p["pid"] for p in own if p["pid"] not in seen_here)
            # the latest scan (root's, or the account's after it) that saw one of them
            seen = max(times[u] for p in own for u in p["seen_by"])
            for proc in own:
                # "work": the ranks, torchrun and what they started, not the job's own
                # supervisor, watcher or firewall keeper (which may carry its markers)
                work = [] if set(proc["kinds"]) & {"supervisor", "watcher", "keeper"} else ["work"]
                for kind in (set(proc["kinds"]) & OWN) | set(work):
                    at = max(times[u] for u in proc["seen_by"])
                    self.summary["last_seen_kind"][kind] = max(at, self.summary["last_seen_kind"].get(kind, at))
            if self.summary["first_seen"] is None or seen < self.summary["first_seen"]:
                self.summary["first_seen"] = seen
            if self.summary["last_seen"] is None or seen >= self.summary["last_seen"]:
                self.summary["last_seen"] = seen
                self.summary["last_what"] = [{"node": node, "pid": p["pid"], "user": p["user"], "kinds": p["kinds"],
                                              "argv": " ".join(p["argv"])[:200]} for p in own]
                self.summary["first_clear"] = None

    def clear(self):
        """Every node's latest look is after the last sight and shows nothing (or it is down)."""
        last = self.summary["last_seen"]
        if last is None or len(self.latest) < len(self.opts["node"]):
            return None
        looks = [self.latest[n] for n in self.opts["node"]]
        if all(look["counted"] == 0 and (look.get("down") or look["time"] > last) for look in looks):
            return max(look["time"] for look in looks)
        return None

    def run(self):
        threads = [threading.Thread(target=self.follow, args=(n,), daemon=True) for n in self.opts["node"]]
        for thread in threads:
            thread.start()
        deadline = time.time() + self.opts["max"]
        while True:
            time.sleep(0.05)
            with self.lock:
                if self.summary["first_clear"] is None:
                    self.summary["first_clear"] = self.clear()
                if self.opts["stop"] and os.path.exists(self.opts["stop"]):
                    self.summary["ended_by"] = "stop file"
                    break
                if self.opts["until_clear"] and self.summary["first_clear"] is not None:
                    self.summary["ended_by"] = "clear"
                    break
                if time.time() > deadline:
                    self.summary["ended_by"] = "max %s s" % self.opts["max"]
                    break
        self.done.set()
        with self.lock:
            procs = list(self.procs.values())
        for proc in procs:
            try:
                proc.stdin.close()  # the probe ends at the end of its stdin
            except OSError:
                pass
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        for thread in threads:
            thread.join(timeout=5)
        with self.lock:
            self.log.close()
            return dict(self.summary)


def parse(argv):
    opts = {"node": [], "job": [], "log": None, "stop": None, "interval": 0.25, "max": 900.0, "until_clear": False}
    i = 0
    while i < len(argv):
        if "=" in argv[i]:
            argv = argv[:i] + argv[i].split("=", 1) + argv[i + 1:]
        key = argv[i].lstrip("-").replace("-", "_")
        if key == "until_clear":
            opts[key], i = True, i + 1
            continue
        if key not in opts or i + 1 >= len(argv):
            raise SystemExit("job_poller.py: unknown or incomplete option %r" % argv[i])
        value = argv[i + 1]
        if isinstance(opts[key], list):
            opts[key].append(value)
        elif key in ("interval", "max"):
            opts[key] = float(value)
        else:
            opts[key] = value
        i += 2
    if not (opts["node"] and opts["job"] and opts["log"]):
        raise SystemExit("job_poller.py: --node, --job and --log are required")
    return opts


def main(argv):
    print(json.dumps(Poller(parse(argv)).run()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
