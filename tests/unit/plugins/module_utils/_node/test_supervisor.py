"""Unit tests for plugins/module_utils/_node/supervisor.py, the file the torchrun module
ships to the node (supervisor, firewall keeper, the one /proc scan), imported here.

The /proc scan runs on a fake /proc tree (environ and stat files as Linux writes them) and on
the real one; the supervisor itself on real processes (test_torchrun.py covers timeouts and
stop_job too).
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import time

import pytest

from ansible_collections.multinode.training.plugins.module_utils._torchrun import proc
from ansible_collections.multinode.training.plugins.module_utils._node import supervisor as sup


def fake_proc(tmp_path, entries):
    """pid -> (environ dict, state letter, comm) as /proc/<pid>/{environ,stat}."""
    root = tmp_path / "proc"
    root.mkdir()
    (root / "self").mkdir()  # not a pid: skipped
    for pid, (environ, state, comm) in entries.items():
        d = root / str(pid)
        d.mkdir()
        (d / "environ").write_bytes(b"\0".join(("%s=%s" % kv).encode() for kv in environ.items()) + b"\0")
        (d / "stat").write_bytes(("%d (%s) %s 1 %d %d 0 -1" % (pid, comm, state, pid, pid)).encode())
        (d / "cmdline").write_bytes(comm.encode() + b"\0--flag\0")
    return str(root)


JOB = {"MULTINODE_TRAINING_JOB": "j1", "MULTINODE_TRAINING_JOB_DIR": "/logs/j1"}


def test_find_job_processes_on_a_fake_proc(tmp_path):
    root = fake_proc(tmp_path, {
        101: (dict(JOB, PATH="/bin"), "S", "python"),
        102: (dict(JOB), "Z", "python"),                                    # zombie: gone
        103: (dict(JOB, MULTINODE_TRAINING_JOB_DIR="/logs/other"), "R", "pt_elastic"),  # other node's share
        104: ({"MULTINODE_TRAINING_JOB": "j10"}, "S", "python"),             # another job, prefix of nothing
        105: ({"PATH": "/bin"}, "S", "bash"),
        106: (dict(JOB), "D", "odd) name (x"),                               # ')' in comm
        107: (dict(JOB), "X", "dead"),
    })
    assert sup.find_job_processes("j1", proc=root) == [101, 103, 106]
    assert sup.find_job_processes("j1", proc=root, job_dir="/logs/j1") == [101, 106]
    assert sup.find_job_processes("j1", proc=root, exclude=["101"]) == [103, 106]
    assert sup.find_job_processes("j", proc=root) == []
    assert sup.find_job_processes("j1", proc=str(tmp_path / "missing")) == []


def test_process_state_and_alive_on_a_fake_proc(tmp_path):
    root = fake_proc(tmp_path, {7: ({}, "S", "a) b"), 8: ({}, "Z", "z")})
    assert sup.process_state(7, root) == "S" and sup.alive(7, root)
    assert sup.process_state(8, root) == "Z" and not sup.alive(8, root)
    assert sup.process_state(9, root) is None and not sup.alive(9, root)
    assert not sup.alive(None, root)


def test_the_module_and_the_supervisor_share_one_scan(tmp_path):
    assert proc.find_job_processes is sup.find_job_processes
    assert proc.process_state is sup.process_state
    root = fake_proc(tmp_path, {5: (dict(JOB), "S", "python")})
    assert proc.describe([5], root) == [{"pid": 5, "cmdline": "python --flag"}]


def test_the_real_proc_finds_a_marked_child():
    env = dict(os.environ, MULTINODE_TRAINING_JOB="scan-%d" % os.getpid(), MULTINODE_TRAINING_JOB_DIR="/x")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=env)
    try:
        deadline = time.time() + 5
        while child.pid not in sup.find_job_processes(env["MULTINODE_TRAINING_JOB"]) and time.time() < deadline:
            time.sleep(0.05)
        assert sup.find_job_processes(env["MULTINODE_TRAINING_JOB"], job_dir="/x") == [child.pid]
    finally:
        child.kill()
        child.wait()
    assert sup.find_job_processes(env["MULTINODE_TRAINING_JOB"]) == []


def test_shipped_source_is_this_file_and_standard_library_only():
    source = proc.supervisor_source()
    with open(sup.__file__) as handle:
        assert source == handle.read()
    tree = ast.parse(source)
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            modules.add(node.module.split(".")[0])
    assert modules <= set(sys.stdlib_module_names) | {"__future__"}, modules - set(sys.stdlib_module_names)


@pytest.mark.parametrize("args", [[], ["keep", "nft"], ["/d", "j", "0", "1", "/d", "x", "true"]])
def test_usage_errors(args, capsys):
    assert sup.main(args) == 2
    assert "usage:" in capsys.readouterr().err


def test_supervisor_as_a_file_records_rc_and_leftovers(tmp_path):
    """Run exactly as the module runs it: python <job_dir>/supervisor.py ... -- argv."""
    job_dir = tmp_path / "j"
    job_dir.mkdir()
    shipped = job_dir / "supervisor.py"
    shipped.write_text(proc.supervisor_source())
    job_id = "file-%d" % os.getpid()
    env = dict(os.environ, MULTINODE_TRAINING_JOB=job_id, MULTINODE_TRAINING_JOB_DIR=str(job_dir))
    # the child leaves a grandchild in a session of its own behind, then exits 4
    code = ("import subprocess,sys; subprocess.Popen([sys.executable,'-c','import time; time.sleep(60)'],"
            "start_new_session=True); sys.exit(4)")
    rc = subprocess.call([sys.executable, str(shipped), str(job_dir), job_id, "0", "1", str(job_dir), "--",
                          sys.executable, "-c", code], env=env, timeout=60)
    assert rc == 0
    result = json.loads((job_dir / "result.json").read_text())
    assert result["rc"] == 4 and result["stopped"] is False and result["timed_out"] is False
    assert len(result["leftovers_killed"]) == 1
    assert sup.find_job_processes(job_id) == []


def test_write_result_is_atomic(tmp_path):
    sup.write_result(str(tmp_path), {"rc": 0})
    assert json.loads((tmp_path / "result.json").read_text()) == {"rc": 0}
    assert not (tmp_path / ".result.json.tmp").exists()
