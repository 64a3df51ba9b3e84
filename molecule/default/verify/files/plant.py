# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Plant a process shaped like one of a job's on this node, for verify/leftover_checks.yml
(the shared leftover check and the poller must catch it). Run as root:

    python3 - KIND JOB_ID < plant.py     -> {"pid": ..., "kind": ..., "user": ..., "argv": [...]}
    python3 - remove JOB_ID PID...       -> kills those pids (if still one of the planted), removes
                                            the job directory and the nftables table

KIND (each sleeps 600 s, detached in its own session, stdin/stdout /dev/null, as the job's
processes are spawned):
- ``env``: `sleep 600` as mtrain with MULTINODE_TRAINING_JOB/_JOB_DIR=<job> in its environment and
  nothing of the job in its argv: only a scan as mtrain sees it (root cannot read its environ);
- ``watcher``: `python3 <job dir>/mt_watch.py <job dir> 1` as mtrain with
  MULTINODE_TRAINING_WATCH=<job>, the watcher's shape;
- ``rank``: `python3 -u /tmp/mt-planted/<job>/mt_rank.py /opt/multinode-training/code/smoke_train.py
  --steps 3` as nobody (no account of the job on the outsider, no job root there), the rank's
  shape, no marker;
- ``keeper``: `python3 -I -c <code> keep /usr/sbin/nft 1 <job dir>/result.json 30 <refresh>
  <delete>` as root, the firewall keeper's shape, and the job's nftables table ``mt_<job>_<hash>``.
"""
from __future__ import annotations

import hashlib
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys

ROOT = "/var/log/multinode-training"
# the rank's planted directory (the outsider has no job root; nothing is created there)
OUTSIDE = "/tmp/mt-planted"
SLEEP = "import time\ntime.sleep(600)\n"


def table_name(job_id):
    return "mt_%s_%s" % (re.sub(r"[^A-Za-z0-9_]", "_", job_id)[:40], hashlib.sha256(job_id.encode()).hexdigest()[:8])


def spawn(argv, env, account):
    entry = pwd.getpwnam(account)
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.closerange(3, 65536)
            os.setgroups([])
            os.setgid(entry.pw_gid)
            os.setuid(entry.pw_uid)
            os.execve(argv[0], argv, env)
        finally:
            os._exit(127)
    return pid


def job_dir(job_id, account, root=ROOT):
    path = os.path.join(root, job_id)
    os.makedirs(path, mode=0o755, exist_ok=True)
    entry = pwd.getpwnam(account)
    os.chown(path, entry.pw_uid, entry.pw_gid)
    for name in ("mt_watch.py", "mt_rank.py"):
        with open(os.path.join(path, name), "w") as handle:
            handle.write(SLEEP)
        os.chmod(os.path.join(path, name), 0o644)
    return path


def plant(kind, job_id):
    path = os.path.join(ROOT, job_id)
    base = {"PATH": "/usr/local/bin:/usr/bin:/bin"}
    if kind == "env":
        account, argv = "mtrain", ["/bin/sleep", "600"]
        env = dict(base, MULTINODE_TRAINING_JOB=job_id, MULTINODE_TRAINING_JOB_DIR=path)
    elif kind == "watcher":
        account, path = "mtrain", job_dir(job_id, "mtrain")
        argv = ["/usr/bin/python3", os.path.join(path, "mt_watch.py"), path, "1"]
        env = dict(base, MULTINODE_TRAINING_WATCH=job_id)
    elif kind == "rank":
        account, path = "nobody", job_dir(job_id, "root", OUTSIDE)
        argv = ["/usr/bin/python3", "-u", os.path.join(path, "mt_rank.py"),
                "/opt/multinode-training/code/smoke_train.py", "--steps", "3"]
        env = base
    elif kind == "keeper":
        account, table = "root", table_name(job_id)
        subprocess.run(["nft", "add", "table", "inet", table], check=True)
        argv = ["/usr/bin/python3", "-I", "-c", SLEEP, "keep", "/usr/sbin/nft", "1", os.path.join(path, "result.json"),
                "30", "flush set inet %s guard\nadd element inet %s guard { }\n" % (table, table),
                "add table inet %s\ndelete table inet %s\n" % (table, table)]
        env = base
    else:
        raise SystemExit("plant.py: unknown kind %r (env, watcher, rank, keeper)" % kind)
    pid = spawn(argv, env, account)
    return {"pid": pid, "kind": kind, "user": account, "argv": argv}


def remove(job_id, pids):
    killed = []
    for pid in pids:
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as handle:
                cmdline = handle.read()
        except OSError:
            continue
        # only what this script planted: the sleep, or a python running the planted code
        if cmdline.startswith(b"/bin/sleep\x00600") or job_id.encode() in cmdline or SLEEP.encode() in cmdline:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    shutil.rmtree(os.path.join(ROOT, job_id), ignore_errors=True)
    shutil.rmtree(OUTSIDE, ignore_errors=True)
    if shutil.which("nft"):
        table = table_name(job_id)
        subprocess.run(["nft", "-f", "-"], input="add table inet %s\ndelete table inet %s\n" % (table, table),
                       text=True, check=True)
    return {"killed": killed}


def main(argv):
    if len(argv) >= 2 and argv[0] == "remove":
        print(json.dumps(remove(argv[1], [int(p) for p in argv[2:]])))
    elif len(argv) == 2:
        print(json.dumps(plant(argv[0], argv[1])))
    else:
        raise SystemExit("usage: plant.py KIND JOB_ID | plant.py remove JOB_ID PID...")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
