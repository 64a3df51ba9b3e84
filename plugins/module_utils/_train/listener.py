# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Short-lived listener on the rendezvous address, for preflight's reachability check.

Standard library only: module train_node (access) starts this file's source on the first node
(``python -c SOURCE multinode-training-listener ADDR PORT EXPECTED LIMIT``), detached. It binds
ADDR:PORT, says ``bound`` (or why not) on stdout, which it then closes, accepts one connection
per node (module train_node (probe)'s connect on every node) and exits once EXPECTED connections came or
after LIMIT seconds. Exit 0: all connected; 3: bind failed (port in use); 4: not all connected.
Nothing waits for its verdict: each node's probe reports its own connect, and a listener left
from an earlier run on the same port is stopped before a new one binds (``stale_listeners``).
"""
from __future__ import annotations

import os
import signal
import socket
import sys
import time

MARK = "multinode-training-listener"


def listen(addr, port, expected, limit, say=None):
    """Bind, report, accept; -> (exit code, peers)."""
    say = say or (lambda text: None)
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((addr, int(port)))
        sock.listen(128)
    except OSError as exc:
        say("bind %s port %s failed: %s" % (addr, port, exc))
        sock.close()
        return 3, []
    say("bound")
    sock.settimeout(0.5)
    seen, deadline = [], time.time() + float(limit)
    while len(seen) < int(expected) and time.time() < deadline:
        try:
            conn, peer = sock.accept()
        except socket.timeout:
            continue
        seen.append(peer[0])
        conn.close()
    sock.close()
    return (0 if len(seen) >= int(expected) else 4), seen


def stale_listeners(port, proc="/proc", me=None):
    """Pids of listeners of this kind on ``port`` (left by an earlier run)."""
    found = []
    me = os.getpid() if me is None else me
    try:
        names = os.listdir(proc)
    except OSError:
        return found
    for name in names:
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(os.path.join(proc, name, "cmdline"), "rb") as handle:
                argv = handle.read().split(b"\0")
        except (IOError, OSError):
            continue
        if MARK.encode() in argv:
            index = argv.index(MARK.encode())
            if len(argv) > index + 2 and argv[index + 2] == str(port).encode():
                found.append(int(name))
    return sorted(found)


def stop_stale(port, proc="/proc", wait=3.0):
    """SIGKILL the listeners of this kind on ``port`` and wait until they are gone -> their pids.

    Called before a new listener binds and before torchrun starts on the first node: a listener
    still waiting for a node that never connected would hold the rendezvous port, and the c10d
    store could not bind it ("The connection to the C10d store has failed")."""
    pids = stale_listeners(port, proc)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    # Wait until each is a zombie or gone, not until its command line is empty: the kernel frees a
    # dying process's memory (cmdline reads empty) before it closes its files (the socket).
    deadline = time.time() + wait
    while time.time() < deadline and any(running(pid, proc) for pid in pids):
        time.sleep(0.05)
    return pids


def running(pid, proc="/proc"):
    """Whether ``pid`` still exists and has not yet exited (state neither Z nor X)."""
    try:
        with open(os.path.join(proc, str(pid), "stat"), "rb") as handle:
            stat = handle.read()
    except (IOError, OSError):
        return False
    # "PID (COMM) STATE ...": COMM may hold spaces and parentheses, so the state follows the last ')'.
    fields = stat[stat.rfind(b")") + 1:].split()
    return bool(fields) and fields[0] not in (b"Z", b"X", b"x")


def _say_and_close(text):
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
    # Nobody reads more: the module that started this process has returned.
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)


def main(argv):
    index = argv.index(MARK) if MARK in argv else 0
    addr, port, expected, limit = argv[index + 1], argv[index + 2], argv[index + 3], argv[index + 4]
    return listen(addr, port, expected, limit, _say_and_close)[0]


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
