# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Processes of a torchrun job on this node: find them, stop them, supervise them.

Every process of a job carries ``MULTINODE_TRAINING_JOB=<job id>`` in its
environment (the module sets it; torchrun and its workers inherit it). torchrun
starts each worker in a *new session* (torch.distributed.elastic's
SubprocessHandler uses ``start_new_session=True``), so killing torchrun's process
group does not reach workers whose agent died: the /proc scan here does.
"""
from __future__ import annotations

import os
import signal
import time

from ansible_collections.multinode.training.plugins.module_utils._torchrun import JOB_DIR_ENV, JOB_ENV


def _read(path):
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except (IOError, OSError):
        return b""


def _read_environ(proc, pid):
    """/proc/<pid>/environ. The kernel lets another uid read it only with CAP_SYS_PTRACE, which root
    lacks in a container (Docker drops it): root then reads it as the process's own uid and gid
    (the job runs as train_user), switching back at once. b"" when it cannot be read."""
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
    for line in _read(os.path.join(proc, str(pid), "status")).splitlines():
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


def process_state(pid, proc="/proc"):
    """The one-letter state of a pid (R, S, Z, ...) or None when it is gone."""
    stat = _read(os.path.join(proc, str(pid), "stat"))
    if not stat:
        return None
    try:
        return stat.rsplit(b")", 1)[1].split()[0].decode()
    except IndexError:
        return None


def find_job_processes(job_id, proc="/proc", exclude=(), job_dir=None):
    """Live (non-zombie) pids whose environment carries MULTINODE_TRAINING_JOB=<job_id>.

    With ``job_dir``, also MULTINODE_TRAINING_JOB_DIR=<job_dir>: only this node's share of
    the job when several "nodes" of one job share a host (tests, benchmarks).
    """
    markers = [("%s=%s" % (JOB_ENV, job_id)).encode()]
    if job_dir:
        markers.append(("%s=%s" % (JOB_DIR_ENV, job_dir)).encode())
    found = []
    skip = set(exclude) | {os.getpid()}
    for name in os.listdir(proc):
        if not name.isdigit() or int(name) in skip:
            continue
        environ = _read_environ(proc, name).split(b"\0")
        if all(marker in environ for marker in markers):
            if process_state(name, proc) not in (None, "Z", "X"):
                found.append(int(name))
    return sorted(found)


def describe(pids, proc="/proc"):
    """pid -> command line, for messages."""
    result = []
    for pid in pids:
        cmdline = _read(os.path.join(proc, str(pid), "cmdline")).replace(b"\0", b" ").strip()
        result.append({"pid": pid, "cmdline": cmdline.decode("utf-8", "replace")[:300]})
    return result


def _signal(pid, sig, group=False):
    try:
        (os.killpg if group else os.kill)(pid, sig)
        return True
    except (ProcessLookupError, PermissionError, OSError):
        return False


def stop_job(job_id, pgid=None, grace=15.0, proc="/proc", exclude=(), job_dir=None):
    """SIGTERM the job's process group (torchrun stops its workers), wait ``grace``, SIGKILL the rest.

    Returns ``(signalled pids, survivors)``; survivors is empty when nothing of the job is left.
    """
    signalled = set(find_job_processes(job_id, proc, exclude, job_dir))
    if pgid:
        _signal(pgid, signal.SIGTERM, group=True)
    for pid in signalled:
        _signal(pid, signal.SIGTERM)
    deadline = time.time() + grace
    while time.time() < deadline and find_job_processes(job_id, proc, exclude, job_dir):
        time.sleep(0.2)
    for _attempt in range(5):
        left = find_job_processes(job_id, proc, exclude, job_dir)
        if not left:
            break
        signalled.update(left)
        if pgid:
            _signal(pgid, signal.SIGKILL, group=True)
        for pid in left:
            _signal(pid, signal.SIGKILL)
        time.sleep(0.3)
    return sorted(signalled), find_job_processes(job_id, proc, exclude, job_dir)


# The supervisor is the session leader of a started job: it runs torchrun, enforces the
# job's timeout even when the controller has gone away, kills leftovers carrying the job
# marker and writes result.json. It runs as `python -c SUPERVISOR_SOURCE job_dir job_id
# timeout grace cwd -- argv...` because the module's own files are deleted when it returns.
SUPERVISOR_SOURCE = r'''
import json, os, signal, subprocess, sys, time
job_dir, job_id, timeout, grace = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
cwd, argv = sys.argv[5], sys.argv[7:]
markers = [("MULTINODE_TRAINING_JOB=%s" % job_id).encode(), ("MULTINODE_TRAINING_JOB_DIR=%s" % job_dir).encode()]
flags = {"stopped": False}
def on_signal(signum, frame):
    flags["stopped"] = True
for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(sig, on_signal)
def leftovers():
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open("/proc/%s/environ" % name, "rb") as handle:
                environ = handle.read().split(b"\0")
                if not all(marker in environ for marker in markers):
                    continue
            with open("/proc/%s/stat" % name, "rb") as handle:
                if handle.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X"):
                    continue
        except (IOError, OSError, IndexError):
            continue
        pids.append(int(name))
    return pids
start = time.time()
proc = subprocess.Popen(argv, cwd=cwd)
timed_out, kill_at = False, None
while True:
    try:
        rc = proc.wait(timeout=0.5)
        break
    except subprocess.TimeoutExpired:
        now = time.time()
        if timeout > 0 and not timed_out and now - start > timeout:
            timed_out, kill_at = True, now + grace
            sys.stdout.write("multinode.training: job %s timed out after %ds, stopping it\n" % (job_id, timeout))
            sys.stdout.flush()
            proc.send_signal(signal.SIGTERM)
        elif kill_at and now > kill_at:
            proc.kill()
killed = []
for _ in range(3):
    pids = leftovers()
    if not pids:
        break
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL if timed_out or flags["stopped"] else signal.SIGTERM)
            killed.append(pid)
        except OSError:
            pass
    time.sleep(1.0)
result = {"rc": rc, "start": start, "end": time.time(), "timed_out": timed_out,
          "stopped": flags["stopped"], "leftovers_killed": sorted(set(killed))}
tmp = os.path.join(job_dir, ".result.json.tmp")
with open(tmp, "w") as handle:
    json.dump(result, handle)
os.rename(tmp, os.path.join(job_dir, "result.json"))
'''


# The firewall keeper guards a job's rendezvous port while its supervisor lives: it runs
# as root (nft needs it; it runs no code of the job and carries no job marker), renews
# the guard's timeout every ttl/3 seconds and deletes the job's table once the
# supervisor is gone or result.json exists. Were it killed, the guard expires after ttl
# seconds and the port is as open as before the job. Runs as
# `python -c KEEPER_SOURCE nft supervisor_pid result_file ttl refresh_script delete_script`.
KEEPER_SOURCE = r'''
import os, subprocess, sys, time
nft, pid, result_file, ttl = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
refresh, delete = sys.argv[5].encode(), sys.argv[6].encode()
def alive():
    if os.path.exists(result_file):
        return False
    try:
        with open("/proc/%d/stat" % pid, "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except (IOError, OSError, IndexError):
        return False
last = time.time()
while alive():
    if time.time() - last >= max(1.0, ttl / 3.0):
        if subprocess.run([nft, "-f", "-"], input=refresh, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode != 0:
            break
        last = time.time()
    time.sleep(0.5)
subprocess.run([nft, "-f", "-"], input=delete, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
'''
