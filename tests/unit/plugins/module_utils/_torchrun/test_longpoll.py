"""Unit tests for the followed wait: the node-side long poll
(_torchrun.wait.follow_until), its window (_node.watchlib.follow_window, _torchrun.follow.next_window), the
job directory packed into the finished result and unpacked on the controller
(_torchrun.collect.pack_job_dir / unpack_job_archive). On recorded job directories and real
supervisor processes.
"""
from __future__ import annotations

import base64
import io
import json
import os
import socket
import shutil
import stat
import sys
import tarfile
import threading
import time

import pytest

from ansible_collections.multinode.training.plugins.module_utils._torchrun import collect as col
from ansible_collections.multinode.training.plugins.module_utils._torchrun import follow as fol
from ansible_collections.multinode.training.plugins.module_utils._torchrun import wait as wait_mod
from ansible_collections.multinode.training.plugins.module_utils._node import supervisor as sup
from ansible_collections.multinode.training.plugins.module_utils._node import watchlib
from tests.unit.plugins.module_utils._torchrun.test_job import _start_supervisor, _visible, job_copy


# ------------------------------------------------------------------ windows

@pytest.mark.parametrize("requested, lease, expected", [
    (15, 60, 15.0),      # the progress interval, well within the lease
    (15, 20, 20 / 3.0),  # at most a third of the lease: renewed at least three times per lease
    (5, 0, 5.0),         # no lease (detached job): as asked
    (0, 60, 0.5),        # never a busy loop
])
def test_follow_window(requested, lease, expected):
    assert watchlib.follow_window(requested, lease) == pytest.approx(expected)


def test_next_window_first_call_is_short_then_up_to_the_next_line():
    assert fol.next_window(100.0, 100.0, 10, first=True) == 1.0
    assert fol.next_window(100.0, 115.0, 10) == 10.0    # capped: the controller's death is seen within it
    assert fol.next_window(100.0, 104.0, 10) == 4.0     # ends at the next progress line
    assert fol.next_window(100.0, 99.0, 10) == 1.0      # overdue line: at least 1 s


def test_job_done_needs_the_result_and_a_final_watcher(tmp_path):
    ended = {"end": 100.0}
    assert not watchlib.job_done({}, None, {"final": True}, 101.0)
    assert watchlib.job_done({}, ended, {"final": True}, 101.0)
    # the watcher (no watch_pid: not alive) is gone
    assert watchlib.job_done({}, ended, {}, 101.0)
    # a watcher still running (its marker in /proc/<pid>/environ), not final: done only 30 s after the end
    proc = tmp_path / "proc" / "4242"
    proc.mkdir(parents=True)
    (proc / "environ").write_bytes(b"PATH=/bin\0MULTINODE_TRAINING_WATCH=x\0")
    watching = {"watch_pid": 4242, "job_id": "x"}
    assert not watchlib.job_done(watching, ended, {}, 101.0, proc=str(tmp_path / "proc"))
    assert watchlib.job_done(watching, ended, {}, 131.0, proc=str(tmp_path / "proc"))


# ------------------------------------------------------------------ the long poll

def test_follow_until_returns_at_once_for_an_ended_job(tmp_path):
    job_dir = job_copy(tmp_path, "ok_1node")
    job = col.read_json(os.path.join(job_dir, "job.json"))
    began = time.time()
    assert wait_mod.follow_until(job["job_id"], job_dir, job, 30, 3600, 15, 30) == (True, False, False)
    assert time.time() - began < 1


def test_follow_until_times_out_while_the_job_runs_then_sees_its_end_within_a_poll(tmp_path):
    job_dir = str(tmp_path / "run")
    os.makedirs(job_dir)
    job_id = "poll-%d" % os.getpid()
    popen = _start_supervisor(job_dir, job_id, [sys.executable, "-c", "import time; time.sleep(4)"])
    try:
        job = {"job_id": job_id, "pid": popen.pid, "pgid": popen.pid, "start": time.time()}
        began = time.time()
        # still running: the window (1 s) ends the call
        assert wait_mod.follow_until(job_id, job_dir, job, 1.0, 0, 1, 30) == (False, False, False)
        assert 0.9 < time.time() - began < 3
        # the job ends (about 4 s in): the next long poll returns as soon as result.json is there
        assert wait_mod.follow_until(job_id, job_dir, job, 30, 0, 1, 30) == (True, False, False)
        ended = col.read_json(os.path.join(job_dir, "result.json"))
        assert ended["rc"] == 0
        assert time.time() - ended["end"] < 1.0
    finally:
        if popen.poll() is None:
            os.killpg(popen.pid, 9)
        popen.wait(timeout=20)


def _in_exit_barrier(tmp_path, prefix):
    """A running job whose node's ranks succeeded (torchrun.log says so), the log quiet for 5 s ->
    (job_dir, job_id, popen, job)."""
    job_dir = job_copy(tmp_path, "ok_1node")
    os.remove(os.path.join(job_dir, "result.json"))
    job_id = "%s-%d" % (prefix, os.getpid())
    popen = _start_supervisor(job_dir, job_id, [sys.executable, "-c", "import time; time.sleep(60)"])
    job = {"job_id": job_id, "pid": popen.pid, "pgid": popen.pid, "start": time.time()}
    log = os.path.join(job_dir, "torchrun.log")
    os.utime(log, (time.time() - 5, time.time() - 5))
    return job_dir, job_id, popen, job


def test_follow_until_abandons_the_exit_barrier(tmp_path):
    """The node's ranks succeeded and the log has been quiet for longer than barrier_grace: the job is
    stopped and the node reports an abandoned barrier."""
    job_dir, job_id, popen, job = _in_exit_barrier(tmp_path, "fbarrier")
    try:
        assert wait_mod.follow_until(job_id, job_dir, job, 10, 0, 1, 2, poll=0.1, check_every=0.2) == \
            (True, False, True)
        popen.wait(timeout=20)
    finally:
        if popen.poll() is None:
            os.killpg(popen.pid, 9)
    assert sup.find_job_processes(job_id) == []


def test_follow_until_waits_in_the_exit_barrier_when_the_grace_is_zero(tmp_path):
    """The node's ranks succeeded and the log has been quiet for 5 s, with barrier_grace 0 (watchers link
    the nodes): the poll runs to its window's end and the job still runs - the other node may still work."""
    job_dir, job_id, popen, job = _in_exit_barrier(tmp_path, "fwait")
    try:
        began = time.time()
        assert wait_mod.follow_until(job_id, job_dir, job, 2, 0, 1, 0, poll=0.1, check_every=0.2) == \
            (False, False, False)
        assert time.time() - began >= 2
        assert popen.poll() is None and sup.find_job_processes(job_id)
    finally:
        if popen.poll() is None:
            os.killpg(popen.pid, 9)
        popen.wait(timeout=20)


@pytest.mark.parametrize("requested, nodes, expected", [
    (None, ["node1", "node2"], 0),   # the hub links the nodes: wait for torchrun
    (None, ["node1"], 30),           # a lone watcher cannot learn that another node failed
    (None, None, 30),                # no watch.json
    (45, ["node1", "node2"], 45),    # asked for
    (0, ["node1"], 0),
])
def test_barrier_grace(tmp_path, requested, nodes, expected):
    if nodes is not None:
        (tmp_path / "watch.json").write_text(json.dumps({"node": nodes[0], "nodes": nodes}))
    assert wait_mod.barrier_grace(requested, str(tmp_path)) == expected


def test_follow_until_gives_up_after_the_deadline(tmp_path):
    job_dir = str(tmp_path / "late")
    os.makedirs(job_dir)
    job_id = "flate-%d" % os.getpid()
    popen = _start_supervisor(job_dir, job_id, [sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        _visible(popen, job_id, job_dir)
        job = {"job_id": job_id, "pid": popen.pid, "pgid": popen.pid, "start": time.time() - 40}
        assert wait_mod.follow_until(job_id, job_dir, job, 10, 1, 1, 30, poll=0.1) == (True, True, False)
        popen.wait(timeout=20)
    finally:
        if popen.poll() is None:
            os.killpg(popen.pid, 9)
    assert sup.find_job_processes(job_id) == []


def test_follow_until_a_global_stop_ends_the_poll_within_a_second(tmp_path):
    """The watchers stop the job (another node failed): the supervisor records the end, the watcher
    state turns final; the long poll returns within its poll interval, not at the window's end."""
    job_dir = str(tmp_path / "stop")
    os.makedirs(job_dir)
    job = {"job_id": "stop-1", "pid": None, "start": time.time()}

    def stop_later():
        time.sleep(0.8)
        with open(os.path.join(job_dir, "result.json"), "w") as handle:
            json.dump({"rc": -15, "start": job["start"], "end": time.time(), "stopped": True}, handle)
        with open(os.path.join(job_dir, "watch_state.json"), "w") as handle:
            json.dump({"final": True, "stop_line": "rank 3 on node2 failed"}, handle)

    thread = threading.Thread(target=stop_later)
    # a supervisor pid that is alive keeps the liveness check quiet: this process's own
    job["pid"] = os.getpid()
    thread.start()
    began = time.time()
    try:
        assert wait_mod.follow_until("stop-1", job_dir, job, 20, 0, 1, 30,
                                     check_every=100)[0] is True
    finally:
        thread.join()
    assert time.time() - began < 2


# ------------------------------------------------------------------ the logs home

def test_pack_inline_then_unpack_strips_the_top_directory(tmp_path):
    job_dir = job_copy(tmp_path, "fail_rank1")
    packed = col.pack_job_dir(job_dir, str(tmp_path / "x.tgz"))
    assert packed["path"] is None and not os.path.exists(str(tmp_path / "x.tgz"))
    dest = str(tmp_path / "runs" / "job" / "node1")
    count = col.unpack_job_archive(base64.b64decode(packed["inline"]), dest)
    mine = sorted(os.path.relpath(os.path.join(r, f), job_dir) for r, _d, fs in os.walk(job_dir) for f in fs)
    theirs = sorted(os.path.relpath(os.path.join(r, f), dest) for r, _d, fs in os.walk(dest) for f in fs)
    assert mine == theirs and count == len(mine)
    assert os.stat(dest).st_mode & 0o777 == 0o700
    with open(os.path.join(dest, "result.json")) as a, open(os.path.join(job_dir, "result.json")) as b:
        assert a.read() == b.read()


def test_a_file_over_the_cap_comes_home_cut_to_its_end_with_a_note(tmp_path):
    """A rank log over the cap: the controller gets a line saying how much was left out and where the
    whole file is, then the log's last bytes (the failure is at the end); the files under it whole."""
    job_dir = job_copy(tmp_path, "fail_rank1")
    big = os.path.join(job_dir, "ranks", "big.log")
    os.makedirs(os.path.dirname(big), exist_ok=True)
    body = b"".join(b"line %06d\n" % i for i in range(1000))  # 12,000 bytes
    with open(big, "wb") as handle:
        handle.write(body)
    packed = col.pack_job_dir(job_dir, str(tmp_path / "x.tgz"), file_cap=1200)
    dest = str(tmp_path / "runs" / "job" / "node1")
    col.unpack_job_archive(base64.b64decode(packed["inline"]), dest)
    with open(os.path.join(dest, "ranks", "big.log"), "rb") as handle:
        got = handle.read()
    note, _newline, rest = got.partition(b"\n")
    assert note.decode() == (
        "multinode.training: the first 10800 of this file's 12000 bytes were not collected (over 0.00114 MiB); "
        "the whole file is on %s at %s" % (socket.gethostname(), big))
    assert rest == body[-1200:] and rest.endswith(b"line 000999\n")
    with open(os.path.join(dest, "result.json"), "rb") as a, open(os.path.join(job_dir, "result.json"), "rb") as b:
        assert a.read() == b.read()


def test_pack_big_archive_goes_to_a_private_directory_of_its_own(tmp_path):
    job_dir = job_copy(tmp_path, "ok_1node")
    spool = tmp_path / "spool"
    spool.mkdir()
    path = str(tmp_path / "logs" / "big.tgz")  # the log directory: not written
    packed = col.pack_job_dir(job_dir, path, inline_max=10, spool=str(spool))
    assert packed["inline"] is None and not os.path.exists(path)
    assert os.path.dirname(packed["path"]) == packed["remove"]
    assert os.path.dirname(packed["remove"]) == str(spool) and os.path.basename(packed["path"]) == "big.tgz"
    assert os.stat(packed["remove"]).st_mode & 0o777 == 0o700
    assert os.stat(packed["path"]).st_mode & 0o777 == 0o600
    with open(packed["path"], "rb") as handle:
        assert col.unpack_job_archive(handle.read(), str(tmp_path / "out")) > 3
    again = col.pack_job_dir(job_dir, path, inline_max=10, spool=str(spool))
    assert again["remove"] != packed["remove"]  # a new directory each time, nothing reused


def test_a_big_archive_is_not_left_in_the_log_directory_the_account_owns(tmp_path):
    """The archive's name lies in the job account's log directory, which the account may change
    between the pack and the controller's fetch by name: what it planted there (a link to a file
    of root's) is neither written through nor where the archive goes."""
    job_dir = job_copy(tmp_path, "ok_1node")
    victim = tmp_path / "shadow"
    victim.write_text("root:secret\n")
    path = str(tmp_path / "big.tgz")
    os.symlink(str(victim), path)
    packed = col.pack_job_dir(job_dir, path, inline_max=10, spool=str(tmp_path))
    assert os.path.islink(path) and victim.read_text() == "root:secret\n"
    assert packed["path"] != path and os.path.realpath(packed["path"]) == packed["path"]


def test_a_big_archive_spools_to_var_tmp_by_default(tmp_path):
    job_dir = job_copy(tmp_path, "ok_1node")
    packed = col.pack_job_dir(job_dir, str(tmp_path / "big.tgz"), inline_max=10)
    try:
        assert os.path.dirname(packed["remove"]) == "/var/tmp"
        assert os.path.basename(packed["remove"]).startswith("multinode-training-logs-")
    finally:
        shutil.rmtree(packed["remove"])


def _archived(packed):
    """name -> content (None for a directory) of an inline archive."""
    out = {}
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(packed["inline"])), mode="r:gz") as archive:
        for member in archive.getmembers():
            handle = archive.extractfile(member) if member.isfile() else None
            out[member.name] = handle.read() if handle else None
    return out


def _plant(tmp_path):
    victim = tmp_path / "root-only"
    victim.mkdir()
    (victim / "stdout.log").write_text("root:secret\n" * 10000)
    (victim / "shadow").write_text("root:secret\n")
    return victim


def test_pack_reads_no_file_and_enters_no_directory_through_a_link(tmp_path):
    """The job's account writes its job directory: a link it puts there (to a file or a directory
    of root's) is not archived, nor is what it points to."""
    job_dir = job_copy(tmp_path, "fail_rank1")
    victim = _plant(tmp_path)
    os.symlink(str(victim / "shadow"), os.path.join(job_dir, "planted.json"))
    os.symlink(str(victim), os.path.join(job_dir, "elsewhere"))
    top = os.path.basename(job_dir)
    got = _archived(col.pack_job_dir(job_dir, str(tmp_path / "x.tgz")))
    assert all(b"root:secret" not in (data or b"") for data in got.values())
    assert top + "/planted.json" not in got and not any("elsewhere" in name for name in got)
    assert got[top] is None and got[top + "/result.json"] == open(os.path.join(job_dir, "result.json"), "rb").read()


def test_pack_never_follows_a_file_swapped_for_a_link_after_it_was_looked_at(tmp_path, monkeypatch):
    """Each regular log file, once looked at (an lstat of its path, as tarfile's ``add`` makes, or
    the listing of its directory), becomes a link to a file of root's before it is read: the packer
    reads nothing through it (tarfile's ``add`` archived the link's target under the file's name)."""
    job_dir = job_copy(tmp_path, "fail_rank1")
    victim = _plant(tmp_path)
    swapped = []

    real_lstat, real_scandir = os.lstat, os.scandir

    def swap(path):
        if path.endswith(".log") and stat.S_ISREG(real_lstat(path).st_mode):
            os.unlink(path)
            os.symlink(str(victim / "stdout.log"), path)
            swapped.append(path)

    def lstat(path, *args, **kwargs):
        result = real_lstat(path, *args, **kwargs)
        if isinstance(path, str) and path.startswith(job_dir):
            swap(path)
        return result

    def scandir(target="."):
        with real_scandir(target) as listing:
            entries = list(listing)
        where = os.readlink("/proc/self/fd/%d" % target) if isinstance(target, int) else target
        for entry in entries:
            if entry.is_file(follow_symlinks=False):
                swap(os.path.join(where, entry.name))
        return iter(entries)

    monkeypatch.setattr(os, "lstat", lstat)
    monkeypatch.setattr(os, "scandir", scandir)
    packed = col.pack_job_dir(job_dir, str(tmp_path / "x.tgz"))
    monkeypatch.undo()
    got = _archived(packed)
    assert len(swapped) == 5  # the two ranks' stdout.log and stderr.log, torchrun.log
    assert all(b"root:secret" not in (data or b"") for data in got.values())
    assert os.path.basename(job_dir) + "/result.json" in got


def test_pack_refuses_a_job_directory_that_is_a_link(tmp_path):
    job_dir = job_copy(tmp_path, "ok_1node")
    link = str(tmp_path / "swapped")
    os.symlink(job_dir, link)
    with pytest.raises(OSError):
        col.pack_job_dir(link, str(tmp_path / "x.tgz"))


def test_unpack_skips_members_that_leave_the_destination(tmp_path):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name in ("job/ok.txt", "job/../../evil.txt", "/abs/evil.txt"):
            info = tarfile.TarInfo(name)
            info.size = 2
            archive.addfile(info, io.BytesIO(b"hi"))
        link = tarfile.TarInfo("job/link")
        link.type = tarfile.SYMTYPE
        link.linkname = "/etc/passwd"
        archive.addfile(link)
    dest = str(tmp_path / "dest")
    assert col.unpack_job_archive(buffer.getvalue(), dest) == 1
    assert os.listdir(dest) == ["ok.txt"]
    assert not os.path.exists(str(tmp_path / "evil.txt"))


def test_follow_until_takes_the_supervisor_for_gone_only_after_repeated_misses(tmp_path, monkeypatch):
    """One /proc read that misses the supervisor (a transient failure under load) does not end the
    wait of a running job; three misses in a row without a result do."""
    job_dir = str(tmp_path / "flaky")
    os.makedirs(job_dir)
    answers = iter([False, True, False, True, True])
    monkeypatch.setattr(wait_mod, "job_alive", lambda *a, **k: next(answers, True))
    job = {"job_id": "flaky", "pid": 1, "start": time.time()}
    assert wait_mod.follow_until("flaky", job_dir, job, 1.0, 0, 1, 30, poll=0.05, check_every=0.1) == \
        (False, False, False)
    monkeypatch.setattr(wait_mod, "job_alive", lambda *a, **k: False)
    began = time.time()
    assert wait_mod.follow_until("flaky", job_dir, job, 10, 0, 1, 30, poll=0.05, check_every=0.1) == \
        (True, False, False)
    assert time.time() - began < 2


def test_stop_watcher_kills_only_this_jobs_watcher():
    """state=stopped ends the job's watcher: the pid of job.json is killed only while it carries this
    job's watcher marker (a reused pid, another job's watcher are left alone)."""
    import subprocess

    env = dict(os.environ, MULTINODE_TRAINING_WATCH="job-a")
    watcher = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.3)
        assert fol.stop_watcher({"job_id": "job-b", "watch_pid": watcher.pid}) is None
        assert fol.stop_watcher({"job_id": "job-a", "watch_pid": other.pid}) is None
        assert fol.stop_watcher({"job_id": "job-a"}) is None
        assert watcher.poll() is None and other.poll() is None
        assert fol.stop_watcher({"job_id": "job-a", "watch_pid": watcher.pid}) == watcher.pid
        assert watcher.wait(timeout=10) == -9
    finally:
        for proc in (watcher, other):
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def test_wrapper_exits_reads_the_latest_attempt_of_each_local_rank(tmp_path):
    exits = tmp_path / "exits"
    exits.mkdir()
    records = {"0_0": 1, "1_0": 0, "0_1": 0, "0_2": None}  # local 0: restart 1 succeeded; local 2 still runs
    for name, code in records.items():
        restart, local = (int(x) for x in name.split("_"))
        (exits / (name + ".start")).write_text(json.dumps({"pid": 0, "rank": local, "local_rank": local,
                                                           "restart": restart}))
        if code is not None:
            (exits / (name + ".exit")).write_text(json.dumps({"exitcode": code}))
    assert col.wrapper_exits(str(tmp_path)) == {0: 0, 1: 0}
