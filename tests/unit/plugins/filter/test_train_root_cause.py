"""Unit tests for filter train_root_cause (plugins/module_utils/_torchrun.py cross_node_root_cause):
the root cause of a failed job across its nodes, on the failures the torchrun module returns."""
from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.multinode.training.plugins.filter.train_root_cause import train_root_cause


def failure(rank, local, message, timestamp, peer=False, exitcode=1):
    return {"rank": rank, "local_rank": local, "exitcode": exitcode, "message": message, "timestamp": timestamp,
            "peer": peer}


def test_first_hand_failure_wins_over_an_earlier_peer_error():
    results = {
        "node1": {"failures": [failure(0, 0, "RuntimeError: Connection closed by peer", 100.0, peer=True),
                               failure(1, 1, "RuntimeError: Connection reset by peer", 100.5, peer=True)]},
        "node2": {"failures": [failure(3, 1, "RuntimeError: injected failure on rank 3 at step 1", 101.0)]},
    }
    out = train_root_cause(results, {"node1": "x", "node2": "y"})
    assert out["root"]["node"] == "node2" and out["root"]["rank"] == 3
    assert out["line"] == "rank 3 (local_rank 1) on node2 exited 1: RuntimeError: injected failure on rank 3 at step 1"


def test_earliest_first_hand_failure_and_missing_timestamps_sort_last():
    results = {
        "a": {"failures": [failure(0, 0, "OOM", None)]},
        "b": {"failures": [failure(2, 0, "ValueError: late", 50.0), failure(3, 1, "KeyError: early", 20.0)]},
    }
    out = train_root_cause(results)
    assert out["root"]["rank"] == 3 and out["root"]["node"] == "b"
    only_missing = {"a": {"failures": [failure(0, 0, "", None)]}, "b": {"failures": [failure(1, 0, "x", None)]}}
    out = train_root_cause(only_missing)
    assert out["line"] == "rank 0 (local_rank 0) on a exited 1: no error message"


def test_without_rank_failures_the_nodes_error_lines():
    results = {"a": {"failures": []}, "b": {}}
    out = train_root_cause(results, {"a": "a: job j timed out after 60s on a and was stopped", "b": "b: failed"})
    assert out == {"root": None, "line": "a: job j timed out after 60s on a and was stopped; b: failed"}
    assert train_root_cause({}, {}) == {"root": None, "line": ""}


def test_refuses_what_is_not_a_mapping():
    with pytest.raises(AnsibleFilterError, match="train_root_cause expects"):
        train_root_cause(["node1"])
