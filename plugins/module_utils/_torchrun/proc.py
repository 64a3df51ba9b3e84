# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Processes of a torchrun job on this node: start them (``spawn``), find them, stop them, ship the supervisor.

Every process of a job carries ``MULTINODE_TRAINING_JOB=<job id>`` in its
environment (the module sets it; torchrun and its workers inherit it). torchrun
starts each worker in a *new session* (torch.distributed.elastic's
SubprocessHandler uses ``start_new_session=True``), so killing torchrun's process
group does not reach workers whose agent died: the /proc scan does. It lives in
_node/supervisor.py (standard library only), which the node's supervisor runs too.
"""
from __future__ import annotations

import inspect
import os
import signal
import time

from ansible_collections.multinode.training.plugins.module_utils._node import supervisor
from ansible_collections.multinode.training.plugins.module_utils._node.torchrun import lift_memlock
from ansible_collections.multinode.training.plugins.module_utils._node.supervisor import (
    GONE,
    alive,
    carries_markers,
    find_job_processes,
    job_markers,
    process_state,
    read_bytes,
    settled_environ,
)

__all__ = ["GONE", "alive", "describe", "find_job_processes", "job_alive", "leads_the_job", "process_state", "spawn",
           "stop_job", "supervisor_source"]
# Right after the spawn /proc may still show the pre-exec environment, without the job
# marker: within these seconds a live supervisor pid is taken as the supervisor.
SPAWN_SETTLE = 10.0


def supervisor_source():
    """Source of _node/supervisor.py, to ship to the node (works from AnsiballZ's zip too)."""
    return inspect.getsource(supervisor)


def describe(pids, proc="/proc"):
    """pid -> command line, for messages."""
    result = []
    for pid in pids:
        cmdline = read_bytes(os.path.join(proc, str(pid), "cmdline")).replace(b"\0", b" ").strip()
        result.append({"pid": pid, "cmdline": cmdline.decode("utf-8", "replace")[:300]})
    return result


def _signal(pid, sig, group=False):
    try:
        (os.killpg if group else os.kill)(pid, sig)
        return True
    except (ProcessLookupError, PermissionError, OSError):
        return False


def leads_the_job(pgid, found, job_id, proc="/proc", job_dir=None, settle=1.0):
    """Whether the process ``pgid`` (a group leader that job.json names) is one of the job's own:
    in ``found`` (the scan), or carrying the job's markers. Right after an exec the kernel shows a
    new process's environment empty for a moment (the scan missed it then): a live leader with an
    empty environment is asked again for up to ``settle`` s."""
    if pgid in found:
        return True
    return carries_markers(settled_environ(pgid, proc, settle), job_markers(job_id, job_dir))


def stop_job(job_id, pgid=None, grace=15.0, proc="/proc", exclude=(), job_dir=None):
    """SIGTERM the job's process group (torchrun stops its workers), wait ``grace``, SIGKILL the rest.

    Returns ``(signalled pids, survivors)``; survivors is empty when nothing of the job is left.

    ``pgid`` comes from job.json, which the job's account could rewrite (it owns the job directory):
    the group is signalled only while its leader is one of the job's own processes (its marker in the
    environment, which the account cannot put on anyone else's process), never a group that root's
    stop was pointed at.
    """
    signalled = set(find_job_processes(job_id, proc, exclude, job_dir))
    try:
        pgid = int(pgid) if pgid else None
    except (TypeError, ValueError):
        pgid = None
    if pgid and not leads_the_job(pgid, signalled, job_id, proc, job_dir):
        pgid = None
    # A leader the scan missed (right after its exec) but leads_the_job confirmed is still stopped.
    if not signalled and not pgid:
        return [], []
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


def job_alive(pid, job_id, job_dir, started=None, proc="/proc", now=None):
    """The supervisor still runs (and the pid was not reused by something else)."""
    if not alive(pid, proc):
        return False
    if started and (now or time.time()) - started < SPAWN_SETTLE:
        return True
    return pid in find_job_processes(job_id, proc=proc, job_dir=job_dir)


def spawn(argv, env, out_fd, account, umask=0o027):
    """Start argv detached: new session, stdin /dev/null, stdout+stderr to out_fd, as ``account``
    (uid, gid, supplementary groups) when given, umask 027, locked memory unlimited as far as this
    process may (``lift_memlock``); returns its pid. Nobody waits for it."""
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: only async-signal-safe work until exec
        try:
            os.close(err_r)
            os.setsid()
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(out_fd, 1)
            os.dup2(out_fd, 2)
            os.set_inheritable(err_w, False)
            os.closerange(3, err_w)
            os.closerange(err_w + 1, 65536)
            lift_memlock()
            if account:
                os.setgroups(account["groups"])
                os.setgid(account["gid"])
                os.setuid(account["uid"])
            os.umask(umask)
            os.execve(argv[0], argv, env)
        except OSError as exc:
            os.write(err_w, str(exc).encode("utf-8", "replace"))
        finally:
            os._exit(127)
    os.close(err_w)
    # The pipe closes on exec (close-on-exec); anything written means the child never got there.
    message = os.read(err_r, 4096)
    os.close(err_r)
    if message:
        os.waitpid(pid, 0)
        raise OSError(message.decode("utf-8", "replace"))
    return pid
