"""Unit tests for filter train_root_cause (plugins/module_utils/_node/torchrun.py cross_node_root_cause):
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


# ------------------------------------------------------------------ the play's report (filter train_report)

from ansible_collections.multinode.training.plugins.filter.train_root_cause import train_report  # noqa: E402


def rank(number, local, state, stdout=None, peer=False):
    return {"rank": number, "local_rank": local, "state": state, "stdout": stdout, "peer": peer}


REPORT_ARGS = dict(job_id="j1", endpoint="10.0.0.1:29500", runs_dir="/ctl/runs", log_dir="/var/log/mt", lost_timeout=10)


def test_report_of_a_successful_job():
    results = {
        "node1": {"rc": 0, "world_size": 4, "duration": 7.5,
                  "ranks": [rank(0, 0, "succeeded", "/var/log/mt/j1/ranks/x/attempt_0/0/stdout.log"),
                            rank(1, 1, "succeeded")]},
        "node2": {"rc": 0, "world_size": 4, "duration": 7.4, "ranks": [rank(2, 0, "succeeded"), rank(3, 1, "succeeded")]},
    }
    out = train_report(results, ["node1", "node2"], **REPORT_ARGS)
    assert out["lines"] == ["job j1: world size 4 on 2 node(s), rendezvous 10.0.0.1:29500, logs in /ctl/runs/j1/",
                            "node1: rc 0, ranks 0,1, 7.5 s", "node2: rc 0, ranks 2,3, 7.4 s"]
    assert out["rank0_log"] == "/ctl/runs/j1/node1/ranks/x/attempt_0/0/stdout.log"
    assert out["lost"] == []


def test_report_watchers_stop_line_wins_and_names_the_consequences():
    """The watchers' first failure (rank 3 on node2) is the root cause; the other ranks that did not
    succeed are its consequence, the failed rank itself is not listed there."""
    stop_line = "rank 3 (local_rank 1) on node2 failed first: AssertionError: boom"
    first = {"node": "node2", "rank": 3, "local_rank": 1}
    results = {
        "node1": {"rc": 1, "stop_line": stop_line, "first_failure": first,
                  "ranks": [rank(0, 0, "stopped"), rank(1, 1, "stopped")],
                  "failures": [failure(0, 0, "RuntimeError: Connection closed by peer", 10.0, peer=True)]},
        "node2": {"rc": 1, "stop_line": stop_line, "first_failure": first, "duration": 3.0,
                  "ranks": [rank(2, 0, "stopped"), rank(3, 1, "failed")]},
    }
    out = train_report(results, ["node1", "node2"], ["node1", "node2"], {"node1": "a", "node2": "b"}, **REPORT_ARGS)
    assert out["root_line"] == stop_line
    assert out["lines"][1:] == ["node1: rc 1, ranks 0,1, ? s, FAILED", "node2: rc 1, ranks 2,3, 3.0 s, FAILED",
                                "root cause: " + stop_line,
                                "stopped as a consequence: rank 0 on node1, rank 1 on node1, rank 2 on node2"]
    assert out["lines"][0].startswith("job j1: world size unknown on 2 node(s)")


def test_report_a_second_rank_that_failed_of_its_own_error_is_no_consequence():
    """No watcher stop line: the root cause is the first first-hand failure across the nodes (rank 3), which
    is listed nowhere else; rank 1 failed of its own error later (a second cause, not a consequence);
    rank 0 died of a peer's error and rank 2 was terminated: those two are the consequences."""
    results = {
        "node1": {"rc": 1, "ranks": [rank(0, 0, "failed", peer=True), rank(1, 1, "failed")],
                  "failures": [failure(0, 0, "RuntimeError: Connection closed by peer", 11.0, peer=True),
                               failure(1, 1, "ValueError: bad batch", 12.0)]},
        "node2": {"rc": 1, "ranks": [rank(2, 0, "terminated"), rank(3, 1, "failed")],
                  "failures": [failure(2, 0, "", 11.5, exitcode=-15), failure(3, 1, "AssertionError: boom", 10.0)]},
    }
    out = train_report(results, ["node1", "node2"], ["node1", "node2"], {}, **REPORT_ARGS)
    assert out["root_line"] == "rank 3 (local_rank 1) on node2 exited 1: AssertionError: boom"
    assert out["lines"][-2:] == ["also failed, of an error of their own: rank 1 on node1",
                                 "stopped as a consequence: rank 0 on node1, rank 2 on node2"]


def test_report_a_lost_node_is_named_lost_not_by_its_connection_error():
    results = {"node1": {"rc": 1, "lost": ["node3"], "ranks": []}, "node2": {"lost": ["node3"]}, "node3": {}}
    hosts = ["node1", "node2", "node3"]
    out = train_report(results, hosts, ["node3"], {"node3": "node3: Failed to connect to the host via ssh"},
                       nnodes="3", **REPORT_ARGS)
    assert out["root_line"] == "node node3 lost (no heartbeat for 10s)"
    assert out["lines"][-1] == "lost node(s): node3"
    assert "node3: rc none, ranks -, ? s, FAILED" in out["lines"]
    # another node failed too: its own error is the cause (the rank failures across the nodes)
    out = train_report(dict(results, node2={"failures": [failure(2, 0, "ValueError: x", 5.0)]}), hosts,
                       ["node2", "node3"], {}, **REPORT_ARGS)
    assert out["root_line"] == "rank 2 (local_rank 0) on node2 exited 1: ValueError: x"
    # elastic: the job went on without the lost node
    out = train_report({"node1": {"rc": 0, "lost": ["node3"]}}, hosts, [], {}, nnodes="2:3", **REPORT_ARGS)
    assert out["lines"][-1] == "lost node(s): node3 (elastic: the job went on without them)"
    assert not any(line.startswith("root cause") for line in out["lines"])


def test_report_refuses_what_is_not_a_result_map():
    with pytest.raises(AnsibleFilterError, match="train_report expects"):
        train_report(["node1"], ["node1"])


from ansible_collections.multinode.training.plugins.filter.train_root_cause import train_all_home  # noqa: E402


def test_all_home_only_when_no_node_failed_and_every_node_s_logs_came_home():
    home = {"collected": True, "rc": 0}
    hosts = ["n1", "n2", "n3"]
    assert train_all_home({"n1": home, "n2": home, "n3": home}, hosts) is True
    # a failed node, even with its logs home: stop and report the failure
    assert train_all_home({"n1": home, "n2": home, "n3": home}, hosts, ["n2"]) is False
    # a node whose logs the wait did not bring (the collect fallback), or without a result (unreachable)
    assert train_all_home({"n1": home, "n2": {"collected": False, "collect_error": "x"}, "n3": home}, hosts) is False
    assert train_all_home({"n1": home, "n2": {}, "n3": home}, hosts) is False
    assert train_all_home({"n1": home, "n3": home}, hosts) is False
    # "collected" must be true itself, not merely present
    assert train_all_home({"n1": home, "n2": {"collected": "yes"}, "n3": home}, hosts) is False
    assert train_all_home({}, []) is False


def test_all_home_refuses_what_is_not_a_result_map():
    with pytest.raises(AnsibleFilterError, match="train_all_home expects"):
        train_all_home(["n1"], ["n1"])
    with pytest.raises(AnsibleFilterError, match="train_all_home expects"):
        train_all_home({}, "n1")


from ansible_collections.multinode.training.plugins.filter.train_root_cause import train_elastic_lost  # noqa: E402


def _survivor(nnodes="2:3", rc=0, lost=("n3",), **extra):
    cmd = ["python", "-m", "torch.distributed.run", "--nnodes", nnodes, "--nproc_per_node", "2", "train.py"]
    result = {"rc": rc, "lost": list(lost), "cmd": cmd}
    result.update(extra)
    return result


def test_elastic_lost_forgives_a_lost_node_only_when_the_rest_finished_elastic():
    hosts = ["n1", "n2", "n3"]
    gone = {"failed": True, "msg": "lost the connection to n3 during the wait"}
    ok = {"n1": _survivor(), "n2": _survivor(), "n3": gone}
    assert train_elastic_lost(ok, hosts, ["n3"]) == ["n3"]
    # named lost by one watcher is enough (the hub names it; the others may not have heard)
    assert train_elastic_lost(dict(ok, n2=_survivor(lost=())), hosts, ["n3"]) == ["n3"]
    # no failed node: nothing to forgive
    assert train_elastic_lost(ok, hosts, []) == []
    # not elastic (N, or MIN == MAX): a lost node fails the job
    assert train_elastic_lost(dict(ok, n1=_survivor("3"), n2=_survivor("3")), hosts, ["n3"]) == []
    assert train_elastic_lost(dict(ok, n1=_survivor("3:3"), n2=_survivor("3:3")), hosts, ["n3"]) == []
    # fewer left than MIN
    assert train_elastic_lost(dict(ok, n1=_survivor("3:4"), n2=_survivor("3:4")), hosts, ["n3"]) == []
    # another node's torchrun did not end rc 0, timed out or failed
    assert train_elastic_lost(dict(ok, n2=_survivor(rc=1)), hosts, ["n3"]) == []
    assert train_elastic_lost(dict(ok, n2=_survivor(rc=None)), hosts, ["n3"]) == []
    assert train_elastic_lost(dict(ok, n2=_survivor(timed_out=True)), hosts, ["n3"]) == []
    assert train_elastic_lost(dict(ok, n2=_survivor(failed=True)), hosts, ["n3"]) == []
    # a node without a result or a command line proves nothing
    assert train_elastic_lost(dict(ok, n2={}), hosts, ["n3"]) == []
    # a failed node nobody named lost (its ranks failed, say) is a failure
    assert train_elastic_lost(dict(ok, n1=_survivor(lost=()), n2=_survivor(lost=())), hosts, ["n3"]) == []
    # two failed, one of them not lost: both stay failures
    assert train_elastic_lost(dict(ok, n2=gone), hosts, ["n2", "n3"]) == []
    # every node failed: nobody finished
    assert train_elastic_lost({"n1": gone}, ["n1"], ["n1"]) == []


def test_elastic_lost_refuses_what_is_not_a_result_map():
    with pytest.raises(AnsibleFilterError, match="train_elastic_lost expects"):
        train_elastic_lost(["n1"], ["n1"])


def test_report_marks_a_lost_node_that_is_not_a_failure():
    hosts = ["n1", "n2", "n3"]
    results = {"n1": _survivor(), "n2": _survivor(), "n3": {"failed": True}}
    report = train_report(results, hosts, [], {}, "job", "n1:29400", "/runs", "/logs", nnodes="2:3")
    assert report["lost"] == ["n3"]
    assert [line for line in report["lines"] if line.startswith("n3:")] == ["n3: rc none, ranks -, ? s, lost"]
    assert not [line for line in report["lines"] if line.startswith("root cause")]
    assert "lost node(s): n3 (elastic: the job went on without them)" in report["lines"]
