"""Make `ansible_collections.multinode.training` importable from a clone; fixtures the unit tests share.

`.collections/ansible_collections/multinode/training` is a symlink to the
repository root, so putting `.collections` on sys.path lets the unit tests
import module_utils exactly as modules do on a target.
"""
import contextlib
import os
import pathlib
import shutil
import sys
import tempfile
import threading
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / ".collections"))
FIXTURES = ROOT / "tests" / "fixtures"


@pytest.fixture
def shared_dir():
    """A directory anyone may enter (pytest's tmp_path is below root's 0700 /tmp/pytest-of-root): where
    the tests put what another account (the job's, nobody) must reach or be refused."""
    path = tempfile.mkdtemp(prefix="mt-shared-")
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path)


@contextlib.contextmanager
def busy_sampler_thread(seconds=0.3):
    """A thread of this process named as the rank's sampler thread (_node.sampler.THREAD_NAME) that spins
    ``seconds`` of CPU, then idles until the block ends: what the node's watcher reads from /proc. The block
    starts once the CPU is spent (on a loaded host that takes longer than ``seconds``)."""
    from ansible_collections.multinode.training.plugins.module_utils._node import sampler

    spun, done = threading.Event(), threading.Event()

    def busy():
        sampler.name_thread(sampler.THREAD_NAME)
        end = time.thread_time() + seconds
        while time.thread_time() < end:
            pass
        spun.set()
        done.wait(60)

    thread = threading.Thread(target=busy)
    thread.start()
    try:
        assert spun.wait(60), "the busy thread did not get %s s of CPU within 60 s" % seconds
        yield thread
    finally:
        done.set()
        thread.join()


class StuckNode(object):
    """A node whose module call never returns within a test (a frozen node: the call blocks in the connection)."""

    def _execute_module(self, module_name=None, module_args=None, task_vars=None):
        time.sleep(30)
        return {"done": True}
