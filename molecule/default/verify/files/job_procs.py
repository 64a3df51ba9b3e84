# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every process of a multinode.training job on this node, seen from outside the job (verify
steps of the launch cluster: tasks/no_leftovers.yml runs it on every node, job_poller.py through
`docker exec` while a failure is measured). Standard library only; run as root:

    python3 - mt-verify-probe [--job ID | --job=ID]... [--any] [--name NODE] < job_procs.py
    python3 -c "$(cat job_procs.py)" mt-verify-probe --job ID... --every S [--max S]

The first looks once and prints one JSON object; the second (job_poller.py, through one
long-lived `docker exec -i` per node) prints one a line every S seconds until its stdin ends.

It reads what `ps axeww` reads (/proc/<pid>/cmdline, environ, plus the open files and the
working directory) twice: as root, and as every account that owns a process whose environment
root could not read (root without CAP_SYS_PTRACE in a container cannot read another uid's
environ, fd or cwd), always including the job's account (mtrain) where it exists: a forked child
drops to that uid and scans again. The union is printed as one JSON object.

A process is the job's when it has one of these (``kinds``):

- ``supervisor``: ``<python> <job dir>/supervisor.py <job dir> <job id> ... -- <torchrun argv>``
- ``agent``: torchrun (``-m torch.distributed.run``, or a ``torchrun`` executable)
- ``rank``: the rank wrapper ``<job dir>/mt_rank.py`` in its argv
- ``watcher``: ``<job dir>/mt_watch.py <job dir> <supervisor pid>``
- ``keeper``: the firewall keeper (root): ``<python> -I -c <source> keep <nft> <pid>
  <job dir>/result.json <ttl> "flush set inet mt_<...> guard ..." ...``
- ``marked``: MULTINODE_TRAINING_JOB=, MULTINODE_TRAINING_JOB_DIR= or MULTINODE_TRAINING_WATCH= in
  its environment (every process torchrun and the ranks start inherits the first two)
- ``files``: an open file or the working directory under the job root (/var/log/multinode-training)
- ``argv``: one of the ``--job`` ids in its argv (nothing else of the above)

and ``jobs`` says which of the ``--job`` ids it carries (argv, environment values, paths, the
keeper's table name). Printed: every process with a kind (``--any``: any job) or with one of the
ids, never this probe or its ancestors, nor another probe (``mt-verify-probe`` after ``-`` or
``-c SOURCE``);
zombies are left out (they run nothing). ``tables``: the nftables tables named ``mt_*`` (the
jobs' guards), where nft exists.
"""
from __future__ import annotations

import hashlib
import json
import os
import pwd
import re
import select
import shutil
import socket
import subprocess
import sys
import time

JOB_ROOT = "/var/log/multinode-training"
# The probe's own argv starts with this (`python3 - PROBE ...`, `python3 -c SOURCE PROBE ...`):
# another probe running at the same time (the poller's beside the shared check) names the ids too
# and is never reported.
PROBE = "mt-verify-probe"
MARKERS = ("MULTINODE_TRAINING_JOB=", "MULTINODE_TRAINING_JOB_DIR=", "MULTINODE_TRAINING_WATCH=")
ACCOUNT = "mtrain"


def table_name(job_id):
    """As _train.security.table_name: the nftables table of a job."""
    text = str(job_id)
    return "mt_%s_%s" % (re.sub(r"[^A-Za-z0-9_]", "_", text)[:40], hashlib.sha256(text.encode()).hexdigest()[:8])


def read(path):
    """-> (bytes, None) or (None, the error's name)."""
    try:
        with open(path, "rb") as handle:
            return handle.read(), None
    except OSError as exc:
        return None, type(exc).__name__


def stat_of(pid):
    """-> (state, ppid) from /proc/<pid>/stat, None when gone."""
    data, _err = read("/proc/%s/stat" % pid)
    if not data:
        return None
    rest = data[data.rfind(b")") + 2:].split()
    return rest[0].decode(), int(rest[1])


def ancestors():
    """This process and every ancestor (never reported: the probe's argv names the ids)."""
    out, pid = set(), os.getpid()
    while pid > 0 and pid not in out:
        out.add(pid)
        st = stat_of(pid)
        pid = st[1] if st else 0
    return out


def links(pid):
    """Targets of /proc/<pid>/cwd and fd/* -> (list, error name or None)."""
    targets, err = [], None
    try:
        targets.append(os.readlink("/proc/%s/cwd" % pid))
    except OSError as exc:
        err = type(exc).__name__
    try:
        for fd in os.listdir("/proc/%s/fd" % pid):
            try:
                targets.append(os.readlink("/proc/%s/fd/%s" % (pid, fd)))
            except OSError:
                pass
    except OSError as exc:
        err = err or type(exc).__name__
    return targets, err


def kinds_of(argv, env, paths):
    kinds = []
    names = [os.path.basename(a) for a in argv]
    if len(argv) > 1 and names[1] == "supervisor.py" and "--" in argv:
        kinds.append("supervisor")
    elif "torch.distributed.run" in argv or (names and names[0] == "torchrun"):
        kinds.append("agent")
    if "mt_rank.py" in names:
        kinds.append("rank")
    if "mt_watch.py" in names:
        kinds.append("watcher")
    if "keep" in argv and any(" inet mt_" in a for a in argv):
        kinds.append("keeper")
    if any(e.startswith(MARKERS) for e in env):
        kinds.append("marked")
    if any(p == JOB_ROOT or p.startswith(JOB_ROOT + "/") for p in paths):
        kinds.append("files")
    return kinds


def jobs_of(job_ids, argv, env, paths):
    found = []
    for job in job_ids:
        in_argv = any(job in a for a in argv) or any(table_name(job) in a for a in argv)
        in_env = any(e in ("%s%s" % (m, job) for m in MARKERS) or
                     (e.startswith(MARKERS[1]) and e.rstrip("/").endswith("/" + job)) for e in env)
        in_paths = any(("/%s/" % job) in p or p.endswith("/" + job) for p in paths)
        if in_argv or in_env or in_paths:
            found.append(job)
    return found


def scan(job_ids, any_job, skip):
    """One pass over /proc with this process's rights -> (processes, uids whose environ was unreadable)."""
    found, unreadable = {}, set()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in skip:
            continue
        pid = int(name)
        st = stat_of(pid)
        if st is None or st[0] in ("Z", "X"):
            continue
        cmdline, _err = read("/proc/%d/cmdline" % pid)
        if not cmdline:
            continue  # a kernel thread, or gone
        argv = [a.decode("utf-8", "replace") for a in cmdline.rstrip(b"\0").split(b"\0")]
        if argv[1:3] == ["-", PROBE] or (argv[1:2] == ["-c"] and argv[3:4] == [PROBE]):
            continue
        try:
            uid = os.stat("/proc/%d" % pid).st_uid
        except OSError:
            continue
        environ, env_err = read("/proc/%d/environ" % pid)
        env = [e.decode("utf-8", "replace") for e in (environ or b"").split(b"\0") if e]
        if env_err:
            unreadable.add(uid)
        paths, link_err = links(pid)
        kinds = kinds_of(argv, env, paths)
        jobs = jobs_of(job_ids, argv, env, paths)
        if jobs and not kinds:
            kinds = ["argv"]
        if not (jobs or (any_job and kinds)):
            continue
        found[pid] = {
            "pid": pid, "ppid": st[1], "uid": uid, "argv": argv, "kinds": kinds, "jobs": jobs,
            "env": [e for e in env if e.startswith(MARKERS)],
            "paths": sorted({p for p in paths if p.startswith(JOB_ROOT)})[:8],
            "unreadable": env_err or link_err,
        }
    return found, unreadable


def scan_as(uid, job_ids, any_job):
    """The same scan in a child that runs as ``uid`` (root's view lacks other uids' environ)."""
    r, w = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.close(r)
            try:
                entry = pwd.getpwuid(uid)
                gid = entry.pw_gid
            except KeyError:
                gid = uid
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            found, _unreadable = scan(job_ids, any_job, ancestors())
            data = json.dumps({"time": time.time(), "procs": found}).encode()
        except Exception as exc:  # reported, never raised in the child
            data = json.dumps({"time": time.time(), "error": "%s: %s" % (type(exc).__name__, exc)}).encode()
        with os.fdopen(w, "wb") as out:
            out.write(data)
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as handle:
        data = handle.read()
    os.waitpid(child, 0)
    return json.loads(data.decode() or "{}")


def user(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def tables():
    nft = shutil.which("nft") or ("/usr/sbin/nft" if os.path.exists("/usr/sbin/nft") else None)
    if not nft or os.geteuid() != 0:
        return None
    out = subprocess.run([nft, "list", "tables"], capture_output=True, text=True, check=False)
    return [line.strip() for line in out.stdout.splitlines() if re.search(r"\stable \S+ mt_|^table \S+ mt_", line)]


def one_pass(job_ids, any_job, name, with_tables=True):
    """One look at this node: root's scan, then one as each account root could not read."""
    result = {"node": name, "scans": [], "errors": []}
    started = time.time()
    found, unreadable = scan(job_ids, any_job, ancestors())
    result["scans"].append({"user": user(os.geteuid()), "uid": os.geteuid(), "time": started})
    for proc in found.values():
        proc["seen_by"] = [user(os.geteuid())]
    if os.geteuid() == 0:
        try:
            unreadable.add(pwd.getpwnam(ACCOUNT).pw_uid)
        except KeyError:
            pass
        for uid in sorted(unreadable - {0}):
            other = scan_as(uid, job_ids, any_job)
            if "error" in other:
                result["errors"].append("scan as %s: %s" % (user(uid), other["error"]))
                continue
            result["scans"].append({"user": user(uid), "uid": uid, "time": other["time"]})
            for pid, proc in other["procs"].items():
                pid = int(pid)
                if pid in found:
                    mine = found[pid]
                    kinds = set(mine["kinds"] + proc["kinds"])
                    mine["kinds"] = sorted(kinds - {"argv"} if len(kinds) > 1 else kinds)
                    mine["jobs"] = sorted(set(mine["jobs"] + proc["jobs"]))
                    mine["env"] = sorted(set(mine["env"] + proc["env"]))
                    mine["paths"] = sorted(set(mine["paths"] + proc["paths"]))[:8]
                    mine["seen_by"].append(user(uid))
                else:
                    proc["seen_by"] = [user(uid)]
                    found[pid] = proc
    for proc in found.values():
        proc["user"] = user(proc["uid"])
    result["procs"] = sorted(found.values(), key=lambda p: p["pid"])
    result["tables"] = tables() if with_tables else None
    # One line per finding, for a failure message: node, pid, account, what it is, argv.
    result["lines"] = ["%s: pid %d (%s; %s; job %s; seen as %s): %s" % (
        name, p["pid"], p["user"], ",".join(p["kinds"]), ",".join(p["jobs"]) or "-", ",".join(p["seen_by"]),
        " ".join((a if len(a) <= 120 else a[:60] + "...(%d chars)" % len(a)).replace("\n", "\\n") for a in p["argv"]))
        for p in result["procs"]] + ["%s: nftables %s" % (name, t) for t in result["tables"] or []]
    result["time"] = time.time()
    return result


def stream(job_ids, any_job, name, every, limit):
    """One JSON line per look, every ``every`` s, until stdin ends (the poller went away) or
    ``limit`` s passed (no nftables listing: a subprocess per look would cost the job's CPUs)."""
    deadline = time.time() + limit
    while time.time() < deadline:
        started = time.time()
        sys.stdout.write(json.dumps(one_pass(job_ids, any_job, name, with_tables=False)) + "\n")
        sys.stdout.flush()
        wait = max(0.0, every - (time.time() - started))
        if select.select([sys.stdin], [], [], wait)[0] and not os.read(sys.stdin.fileno(), 4096):
            return 0
    return 0


def main(argv):
    job_ids, any_job, name, every, limit, i = [], False, socket.gethostname(), None, 900.0, 0
    if argv[:1] == [PROBE]:
        argv = argv[1:]
    while i < len(argv):
        if argv[i].startswith("--job="):
            job_ids.append(argv[i][len("--job="):])
            i += 1
        elif argv[i] == "--job" and i + 1 < len(argv):
            job_ids.append(argv[i + 1])
            i += 2
        elif argv[i] == "--name" and i + 1 < len(argv):
            name, i = argv[i + 1], i + 2
        elif argv[i] == "--every" and i + 1 < len(argv):
            every, i = float(argv[i + 1]), i + 2
        elif argv[i] == "--max" and i + 1 < len(argv):
            limit, i = float(argv[i + 1]), i + 2
        elif argv[i] == "--any":
            any_job, i = True, i + 1
        else:
            print("usage: job_procs.py [--job ID]... [--any] [--name NODE] [--every S [--max S]]; got %r"
                  % argv[i], file=sys.stderr)
            return 2
    if every:
        return stream(job_ids, any_job, name, every, limit)
    print(json.dumps(one_pass(job_ids, any_job, name)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
