# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A bound on one call from the controller to a node (the actions' polls: torchrun, data_sync, slurm_job).

Over ssh, the keepalives of the shipped ansible.cfg end a call to a node that stopped answering (frozen,
powered off, cut off) within 60 s; other connections (docker) have none, and a module stuck on a node that
answers ssh (a hung file system) is not seen by them either. ``bounded`` ends such a call after its limit,
so that the wait on that node fails naming it, and the play goes on to stop the job everywhere."""
from __future__ import annotations

import signal
import threading
import time

# How long a poll may take beyond its window before the node counts as not answering: the last poll of a job
# also packs the node's job directory (a big one is fetched afterwards).
POLL_SLACK = 300


class PollTimeout(Exception):
    """A call that bounded() cut short."""


def bounded(call, seconds):
    """call() -> its value, or PollTimeout after ``seconds`` (SIGALRM in this worker process, the action's
    main thread; from another thread, the call runs unbounded). A timer already running (the task's own
    ``timeout``) is kept: when it is due first, it fires as it would have; else it is armed again afterwards
    with what is left of it."""
    def expire(_signum, _frame):
        raise PollTimeout()

    if threading.current_thread() is not threading.main_thread():
        return call()  # a signal handler can be set from the main thread only: unbounded there
    previous = signal.signal(signal.SIGALRM, expire)
    pending = signal.alarm(int(seconds))
    started = time.monotonic()
    if pending and pending <= seconds:
        signal.signal(signal.SIGALRM, previous)
        signal.alarm(pending)
    try:
        return call()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        if pending:
            signal.alarm(max(1, int(round(pending - (time.monotonic() - started)))))
