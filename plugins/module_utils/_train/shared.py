# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Is train_checkpoint_dir one directory that every node sees (train_checkpoint_shared)? Proven, not assumed.

Every node's access call (_train.access, step 4c) runs ``prove`` at the same time, as the job's account,
once the directory is there. The first node (``first``) writes ``.multinode-training-shared.<token>``
into it (the token: made on the controller for this run, so a file of another run never counts); every
other node waits up to ``wait`` s for that file with that content, then answers with a file of its own
(``<that name>.<node>``), which the first node must see in turn. The first node waits for every answer,
then removes its file and the answers it saw; an answer still there after twice the wait (the first node
does not see it) is removed by the node that wrote it. Nothing of the check stays in the directory.

Names are read with ``os.listdir`` and contents with ``open``: on NFS both revalidate the directory
(close-to-open), where a lookup of a name may answer from a cached negative entry for up to a minute.
"""
from __future__ import annotations

import os
import time

PREFIX = ".multinode-training-shared."
# Seconds a node waits for the other side's file: the nodes' access calls start together (one task) and reach
# this step within seconds of each other (the first node starts the listener first, a node may create
# the account); a shared filesystem shows a new file within a second.
WAIT = 30.0
VALID = ("a directory on storage every node mounts (NFS, Lustre, GPFS, a cluster filesystem), "
         "or train_checkpoint_shared=false (each node keeps its own checkpoints)")


def _names(path):
    try:
        return set(os.listdir(path))
    except OSError:
        return set()


def _content(path):
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None


def _write(path, text):
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "w") as handle:
        handle.write(text)
    os.rename(tmp, path)


def _remove(path):
    try:
        os.remove(path)
    except OSError:
        pass


def _until(done, wait, poll, clock, sleep):
    """Poll ``done()`` every ``poll`` s for at most ``wait`` s -> its last value."""
    deadline = clock() + wait
    while True:
        value = done()
        if value or clock() >= deadline:
            return value
        sleep(poll)


def prove(path, token, node, nodes, first, wait=WAIT, poll=0.2, clock=time.time, sleep=time.sleep):
    """This node's half of the proof that ``path`` is shared by ``nodes`` -> a problem line or None.

    ``first``: the node that writes the file the others answer (the job's first node); ``node``: this
    one. One node alone has nothing to prove."""
    others = [n for n in nodes if n != node]
    if node not in nodes or len(nodes) < 2:
        return None
    name = PREFIX + token
    marker = os.path.join(path, name)
    shown = '"%s"' % path
    try:
        if node == first:
            _write(marker, token)
            _until(lambda: all(name + "." + n in _names(path) for n in others), wait, poll, clock, sleep)
            answered = [n for n in others if name + "." + n in _names(path)]
            for other in answered:
                _remove(marker + "." + other)
            _remove(marker)
            missing = [n for n in others if n not in answered]
            if not missing:
                return None
            return ("train_checkpoint_dir=%s: not shared with %s: no answer of theirs appeared in it on this node "
                    "within %gs (each answers once it sees this node's file there, and its own checks passed); "
                    "valid: %s" % (shown, ", ".join(missing), wait, VALID))
        if not _until(lambda: name in _names(path) and _content(marker) == token, wait, poll, clock, sleep):
            return ("train_checkpoint_dir=%s: not shared with %s: the file %s writes there (once its own checks "
                    "passed) did not appear on this node within %gs; valid: %s" % (shown, first, first, wait, VALID))
        answer = marker + "." + node
        _write(answer, token)
        # The first node removes the answer once it saw every answer, or at the end of its own wait (it
        # began before this node saw its file): where it does not see it, it stays, and is removed here
        # after twice that wait.
        if not _until(lambda: name + "." + node not in _names(path), 2 * wait, poll, clock, sleep):
            _remove(answer)
        return None
    except OSError as exc:
        return "train_checkpoint_dir=%s: cannot write the check's file on this node: %s; valid: %s" % (shown, exc, VALID)
