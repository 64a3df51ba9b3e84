"""slurm_job's reading of a finished job: every node's directory through the torchrun module's code
(_torchrun/collect.py), then one root cause across the nodes.

The node directories are laid out as slurm_node.py leaves them on the shared storage, holding the
two recorded torchrun agent logs of tests/fixtures/torchrun (a 4-rank job, rank 3 failing at step 2;
the other node's ranks dying of it).
"""
from __future__ import annotations

import json
import shutil
import time

from ansible_collections.multinode.training.plugins.module_utils._launch import slurm_job
from tests.unit.conftest import FIXTURES


class FakeModule:
    def __init__(self, **params):
        self.params = params


def node_dir(job_dir, node, agent_log, rc):
    directory = job_dir / node
    (directory / "ranks").mkdir(parents=True)
    (directory / "torchrun.log").write_text((FIXTURES / "torchrun" / agent_log).read_text())
    (directory / "job.json").write_text(json.dumps({"job_id": "slurm-7", "host": node}))
    (directory / "result.json").write_text(json.dumps({"rc": rc, "start": 100.0, "end": 160.5}))


def test_results_name_the_first_hand_failure_across_nodes(tmp_path):
    base = tmp_path / "jobs"
    job_dir = base / "7"
    job_dir.mkdir(parents=True)
    node_dir(job_dir, "n1", "agent_2node_node0_peer_failures.log", 1)
    node_dir(job_dir, "n2", "agent_2node_node1_root_cause.log", 1)
    (base / "slurm-7.out").write_text("srun: error: n2: task 1: Exited with exit code 1\n")
    (job_dir / "submit.json").write_text(json.dumps({"submitted": time.time() - 30}))
    module = FakeModule(job_base=str(base), tail_lines=5)
    out = slurm_job.results(module, "7", str(job_dir), {"state": "FAILED", "nodes": "n[1-2]"}, time.time())
    assert out["job_failed"] is True
    assert out["nodes"] == ["n1", "n2"]
    assert out["world_size"] == 4
    assert out["root_cause"]["node"] == "n2"
    assert out["root_cause_line"] == \
        "rank 3 (local_rank 1) on n2 exited 1: RuntimeError: injected failure on rank 3 at step 2"
    assert [r["rank"] for r in out["node_results"]["n2"]["ranks"]] == [2, 3]
    # n1's ranks died of rank 3's failure (their peer errors): the report's consequences (_node.torchrun.consequence)
    assert [(r["rank"], r["state"], r["peer"]) for r in out["node_results"]["n1"]["ranks"]] == \
        [(0, "terminated", True), (1, "failed", True)]
    assert (job_dir / "batch.log").exists() and not (base / "slurm-7.out").exists()
    assert out["lines"][-1].startswith("root cause: rank 3 (local_rank 1) on n2")


def test_results_name_the_failing_rank_when_slurm_signalled_every_torchrun_before_its_summary(tmp_path):
    """tests/fixtures/torchrun/jobs/slurm_2node_signalled (recorded by its record.py with torch 2.13): the
    hub's stop ended n1's torchrun, and srun's kill-on-bad-exit ended n2's while it still waited for rank 2.
    Neither agent printed its failure summary; rank 3's own record names it (CI, 2026-12-02: the play named
    "rank 0 ... exited -15: ... Connection closed by peer" instead)."""
    base = tmp_path / "jobs"
    job_dir = base / "7"
    shutil.copytree(str(FIXTURES / "torchrun" / "jobs" / "slurm_2node_signalled"), str(job_dir))
    for node in ("n1", "n2"):
        assert "Root Cause" not in (job_dir / node / "torchrun.log").read_text()
    (base / "slurm-7.out").write_text("srun: error: n1: task 0: Exited with exit code 1\n")
    out = slurm_job.results(FakeModule(job_base=str(base), tail_lines=5), "7", str(job_dir),
                            {"state": "FAILED", "nodes": "n[1-2]"}, time.time())
    assert out["root_cause_line"] == \
        "rank 3 (local_rank 1) on n2 exited 1: RuntimeError: injected failure on rank 3 at step 2"
    assert out["root_cause"]["source"] == "rank record"
    states = {r["rank"]: r["state"] for r in out["node_results"]["n2"]["ranks"]}
    assert states[3] == "failed"


def test_results_report_the_preflight_when_no_rank_ran(tmp_path):
    base = tmp_path / "jobs"
    job_dir = base / "8"
    job_dir.mkdir(parents=True)
    (job_dir / "preflight.json").write_text(json.dumps(
        {"errors": ["n2: train_python=/x/bin/python is missing"]}))
    out = slurm_job.results(FakeModule(job_base=str(base), tail_lines=5), "8", str(job_dir),
                            {"state": "FAILED", "nodes": "n[1-2]"}, time.time())
    assert out["job_failed"] is True
    assert out["root_cause_line"] == "preflight: n2: train_python=/x/bin/python is missing"


def test_a_job_no_rank_reported_is_explained_by_srun_then_by_slurms_state():
    batch = "srun: error: n2: task 1: Exited with exit code 3\nsrun: error: n1: task 0: Killed\n"
    assert slurm_job.root_cause_line(None, {}, batch, "FAILED", None) == \
        "n2: task 1 Exited with exit code 3; n1: task 0 Killed"
    assert slurm_job.root_cause_line(None, {}, "", "TIMEOUT", {"reason": "TimeLimit"}) == \
        "Slurm job state TIMEOUT (TimeLimit)"
    assert slurm_job.root_cause_line(None, {}, "", "NODE_FAIL", {}) == "Slurm job state NODE_FAIL"


def test_summary_lines_name_every_node_of_the_allocation_and_the_root_cause():
    out = {"nodes": ["n1", "n2"], "state": "FAILED", "world_size": None,
           "node_results": {"n1": {"rc": 1, "duration": 2.5, "ranks": [{"rank": 0}, {"rank": 1}], "timed_out": True}},
           "timings": {"submit_to_first_rank": 1.2, "failure_to_end": None}}
    assert slurm_job.summary_lines("9", "/jobs/9", out, "preflight: n2: no python") == [
        "job 9: FAILED, world size unknown on 2 node(s), logs in /jobs/9",
        "n1: rc 1, ranks 0,1, 2.5 s, timed out",
        "n2: rc None, ranks -, None s",
        "submit to first rank 1.2 s, failure to end None s",
        "root cause: preflight: n2: no python",
    ]
    out["warnings"] = ["n2: NCCL over InfiniBand/RoCE (mlx5_0) ..."]
    assert slurm_job.summary_lines("9", "/jobs/9", out, None)[-1] == "warning: n2: NCCL over InfiniBand/RoCE (mlx5_0) ..."
