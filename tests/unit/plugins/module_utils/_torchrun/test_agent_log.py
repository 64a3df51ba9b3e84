"""Unit tests for plugins/module_utils/_torchrun/agent_log.py: torchrun's agent log and a rank's error.json,
recorded from torch 2.13.0+cpu running playbooks/files/smoke_train.py (tests/fixtures/torchrun/)."""
from __future__ import annotations

import json

import pytest

from ansible_collections.multinode.training.plugins.module_utils._node import torchrun as tr
from ansible_collections.multinode.training.plugins.module_utils._torchrun import agent_log
from tests.unit.conftest import FIXTURES

FIX = FIXTURES / "torchrun"


def fixture_text(name):
    return (FIX / name).read_text(encoding="utf-8")


def test_agent_log_success():
    parsed = agent_log.parse_agent_log(fixture_text("agent_success_1node.log"))
    assert parsed["rendezvous"]["world_size"] == 2
    assert parsed["rendezvous"]["local_ranks"] == [0, 1]
    assert parsed["rendezvous"]["global_ranks"] == [0, 1]
    assert parsed["failures"] == [] and parsed["root_cause"] is None


def test_agent_log_failure_single_node():
    parsed = agent_log.parse_agent_log(fixture_text("agent_failure_rank1.log"))
    root = parsed["root_cause"]
    assert (root["rank"], root["local_rank"], root["exitcode"]) == (1, 1, 1)
    assert root["message"] == "RuntimeError: injected failure on rank 1 at step 2"
    assert root["error_file"].endswith("/attempt_0/1/error.json")
    other = parsed["failures"]
    assert [(f["rank"], f["exitcode"], f["signal"]) for f in other] == [(0, -15, "SIGTERM")]
    assert "Connection closed by peer" in other[0]["message"]


@pytest.mark.parametrize("fixture, world, global_ranks, first_hand", [
    ("agent_2node_node0_peer_failures.log", 4, [0, 1], False),
    ("agent_2node_node1_root_cause.log", 4, [2, 3], True),
])
def test_agent_logs_two_nodes(fixture, world, global_ranks, first_hand):
    parsed = agent_log.parse_agent_log(fixture_text(fixture))
    assert parsed["rendezvous"]["world_size"] == world
    assert parsed["rendezvous"]["global_ranks"] == global_ranks
    entries = [parsed["root_cause"]] + parsed["failures"]
    has_first_hand = any(not tr.is_peer_error(e["message"], e["exitcode"]) for e in entries)
    assert has_first_hand is first_hand


@pytest.mark.parametrize("fixture, done", [
    ("agent_success_1node.log", True), ("agent_failure_rank1.log", False),
    ("agent_2node_node1_root_cause.log", False),
])
def test_local_workers_succeeded(fixture, done):
    assert agent_log.local_workers_succeeded(fixture_text(fixture)) is done


def test_error_files():
    injected = agent_log.parse_error_file(fixture_text("error_rank1_injected.json"))
    assert injected["message"] == "RuntimeError: injected failure on rank 1 at step 2"
    assert injected["timestamp"] == 1795237666
    assert "smoke_train.py" in injected["traceback"]
    peer = agent_log.parse_error_file(json.loads(fixture_text("error_rank0_peer_closed.json")))
    assert tr.is_peer_error(peer["message"]) is True
    assert tr.is_peer_error(injected["message"]) is False
    plain = agent_log.parse_error_file({"message": "OOM", "timestamp": "12"})
    assert plain == {"message": "OOM", "traceback": None, "timestamp": 12}
