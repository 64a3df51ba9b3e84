# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node side of a torchrun job: the supervisor, the firewall keeper and the one /proc scan.

Standard library only: the torchrun module (and module slurm_job, for Slurm's nodes) ships
this file's source to the node, where it outlives the module (whose own files Ansible
deletes when it returns). The module's code imports the same functions
(``_torchrun.proc``), so the job's processes are found the same way by both.

Every process of a job carries ``MULTINODE_TRAINING_JOB=<job id>`` and
``MULTINODE_TRAINING_JOB_DIR=<job dir>`` in its environment; torchrun starts each worker in a
session of its own, so only this /proc scan reaches a worker whose agent died.

Command lines (``python supervisor.py ARGS`` or ``python -c SOURCE ARGS``):

``JOB_DIR JOB_ID TIMEOUT GRACE CWD -- ARGV...``
    the supervisor, session leader of a started job (as the job's user): runs ARGV
    (torchrun) in CWD, enforces TIMEOUT seconds (0: none; SIGTERM, SIGKILL after GRACE)
    even when the controller has gone away, kills leftovers carrying the job marker and
    writes ``JOB_DIR/result.json`` (torchrun's status is there; the supervisor exits 0).
``keep NFT SUPERVISOR_PID RESULT_FILE TTL REFRESH DELETE``
    the firewall keeper (root; runs no code of the job, carries no marker): renews the
    job's nftables guard every TTL/3 s while the supervisor lives and deletes the table
    once it is gone or RESULT_FILE exists. Were it killed, the guard expires after TTL.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

JOB_ENV = "MULTINODE_TRAINING_JOB"
JOB_DIR_ENV = "MULTINODE_TRAINING_JOB_DIR"
GONE = (None, "Z", "X")


def read_bytes(path):
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except (IOError, OSError):
        return b""


def read_environ(pid, proc="/proc"):
    """/proc/<pid>/environ; b"" when it cannot be read.

    The kernel lets another uid read it only with CAP_SYS_PTRACE, which root lacks in a
    container (Docker drops it): root then reads it as the process's own uid and gid (the job
    runs as train_user), switching back at once.
    """
    path = os.path.join(proc, str(pid), "environ")
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except PermissionError:
        if os.geteuid() != 0:
            return b""
    except (IOError, OSError):
        return b""
    ids = {}
    for line in read_bytes(os.path.join(proc, str(pid), "status")).splitlines():
        if line.startswith((b"Uid:", b"Gid:")):
            ids[line[:3]] = int(line.split()[1])
    if len(ids) != 2 or ids[b"Uid"] == 0:
        return b""
    egid = os.getegid()
    try:
        os.setegid(ids[b"Gid"])
        try:
            os.seteuid(ids[b"Uid"])
            try:
                with open(path, "rb") as handle:
                    return handle.read()
            finally:
                os.seteuid(0)
        finally:
            os.setegid(egid)
    except (IOError, OSError):
        return b""


def settled_environ(pid, proc="/proc", settle=1.0):
    """/proc/<pid>/environ of a live process, waiting out the moment right after its exec.

    The parent of a new process learns that the exec succeeded (the close-on-exec pipe of
    subprocess.Popen or of the module's spawn) before the kernel has set up the new image's
    environment: /proc/<pid>/environ reads empty for a few ms (tens under load). A live process
    whose environment reads empty is asked again for up to ``settle`` s; b"" when it is gone,
    unreadable, or still empty after that."""
    deadline = time.time() + settle
    while alive(pid, proc):
        environ = read_environ(pid, proc)
        if environ or time.time() >= deadline:
            return environ
        time.sleep(0.02)
    return b""


def process_state(pid, proc="/proc"):
    """The one-letter state of a pid (R, S, Z, ...) or None when it is gone."""
    stat = read_bytes(os.path.join(proc, str(pid), "stat"))
    try:
        return stat.rsplit(b")", 1)[1].split()[0].decode()
    except IndexError:
        return None


def alive(pid, proc="/proc"):
    """The pid exists and is neither a zombie nor dead."""
    return bool(pid) and process_state(pid, proc) not in GONE


def job_markers(job_id, job_dir=None):
    markers = [("%s=%s" % (JOB_ENV, job_id)).encode()]
    if job_dir:
        markers.append(("%s=%s" % (JOB_DIR_ENV, job_dir)).encode())
    return markers


def carries_markers(environ, markers):
    """Whether ``environ`` (the bytes of /proc/<pid>/environ) holds every one of ``markers``."""
    entries = environ.split(b"\0")
    return all(marker in entries for marker in markers)


def find_job_processes(job_id, proc="/proc", exclude=(), job_dir=None):
    """Live (non-zombie) pids whose environment carries MULTINODE_TRAINING_JOB=<job_id>.

    With ``job_dir``, also MULTINODE_TRAINING_JOB_DIR=<job_dir>: only this node's share of
    the job when several "nodes" of one job share a host (tests, benchmarks). The calling
    process is never part of the answer.
    """
    markers = job_markers(job_id, job_dir)
    skip = set(int(pid) for pid in exclude) | {os.getpid()}
    found = []
    try:
        names = os.listdir(proc)
    except OSError:
        return found
    for name in names:
        if not name.isdigit() or int(name) in skip:
            continue
        if carries_markers(read_environ(name, proc), markers) and alive(name, proc):
            found.append(int(name))
    return sorted(found)


def write_result(job_dir, result):
    """result.json, atomically (a reader never sees half of it)."""
    tmp = os.path.join(job_dir, ".result.json.tmp")
    with open(tmp, "w") as handle:
        json.dump(result, handle)
    os.rename(tmp, os.path.join(job_dir, "result.json"))


def kill_leftovers(job_id, job_dir, hard, proc="/proc", rounds=3, pause=1.0):
    """Signal what still carries the job's markers (SIGKILL when ``hard``, else SIGTERM); the pids."""
    killed = set()
    for _round in range(rounds):
        pids = find_job_processes(job_id, proc, job_dir=job_dir)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL if hard else signal.SIGTERM)
                killed.add(pid)
            except OSError:
                pass
        time.sleep(pause)
    return sorted(killed)


def supervise(job_dir, job_id, timeout, grace, cwd, argv, poll=0.5):
    """Run argv, enforce the timeout, kill leftovers, write result.json; torchrun's rc."""
    flags = {"stopped": False}

    def on_signal(_signum, _frame):
        flags["stopped"] = True

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    start = time.time()
    child = subprocess.Popen(argv, cwd=cwd)
    timed_out, kill_at = False, None
    while True:
        try:
            rc = child.wait(timeout=poll)
            break
        except subprocess.TimeoutExpired:
            now = time.time()
            if timeout > 0 and not timed_out and now - start > timeout:
                timed_out, kill_at = True, now + grace
                sys.stdout.write("multinode.training: job %s timed out after %ds, stopping it\n" % (job_id, timeout))
                sys.stdout.flush()
                child.send_signal(signal.SIGTERM)
            elif kill_at and now > kill_at:
                child.kill()
    killed = kill_leftovers(job_id, job_dir, hard=timed_out or flags["stopped"])
    write_result(job_dir, {"rc": rc, "start": start, "end": time.time(), "timed_out": timed_out,
                           "stopped": flags["stopped"], "leftovers_killed": killed})
    wake_watcher(job_dir, job_id)
    return rc


def wake_watcher(job_dir, job_id, proc="/proc", settle=1.0):
    """Tell the node's watcher (job.json's watch_pid, if it still is this job's watcher) that the job
    ended: SIGURG, which the watcher turns into the end of its nap (_node.watch) and which is
    ignored by default. The watcher reports the end at once instead of at its next turn. -> pid or None.
    A job that ends right after it started may get here while the watcher's exec is still settling
    (its environment reads empty): ``settled_environ`` waits that out, up to ``settle`` s."""
    try:
        with open(os.path.join(job_dir, "job.json")) as handle:
            pid = int(json.load(handle).get("watch_pid") or 0)
        if not carries_markers(settled_environ(pid, proc, settle), [("MULTINODE_TRAINING_WATCH=%s" % job_id).encode()]):
            return None
        os.kill(pid, signal.SIGURG)
        return pid
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def keep(nft, pid, result_file, ttl, refresh, delete, poll=0.5):
    """Renew the guard while the supervisor lives, then delete the table; 0."""
    last = time.time()
    while alive(pid) and not os.path.exists(result_file):
        if time.time() - last >= max(1.0, ttl / 3.0):
            if subprocess.run([nft, "-f", "-"], input=refresh, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, check=False).returncode != 0:
                break
            last = time.time()
        time.sleep(poll)
    subprocess.run([nft, "-f", "-"], input=delete, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return 0


def main(args):
    if args and args[0] == "keep":
        if len(args) != 7:
            sys.stderr.write("usage: keep NFT SUPERVISOR_PID RESULT_FILE TTL REFRESH DELETE\n")
            return 2
        return keep(args[1], int(args[2]), args[3], float(args[4]), args[5].encode(), args[6].encode())
    if len(args) < 7 or args[5] != "--":
        sys.stderr.write("usage: JOB_DIR JOB_ID TIMEOUT GRACE CWD -- ARGV...\n")
        return 2
    supervise(args[0], args[1], float(args[2]), float(args[3]), args[4], args[6:])
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
