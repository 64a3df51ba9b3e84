"""Unit tests for train_checkpoint_shared's proof (_train.shared.prove) and its place in the access call
(_train.access: run as the account, a refused run leaves no directory): nodes as threads, shared storage
as one directory for all of them, a node's local disk as a directory of its own."""
from __future__ import annotations

import os
import threading

import pytest

from ansible_collections.multinode.training.plugins.module_utils._train import access as acc
from ansible_collections.multinode.training.plugins.module_utils._train import shared

NODES = ["node1", "node2", "node3"]


def run_nodes(paths, token="t0k3n", wait=1.0, nodes=None):
    """Every node's half at once (as the play's one task does) -> {node: problem or None}."""
    nodes = nodes or NODES
    out = {}

    def one(node):
        out[node] = shared.prove(paths[node], token, node, nodes, nodes[0], wait=wait, poll=0.05)

    threads = [threading.Thread(target=one, args=(node,)) for node in nodes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return out


def test_one_directory_for_every_node_is_shared_and_the_check_leaves_nothing(tmp_path):
    out = run_nodes({node: str(tmp_path) for node in NODES})
    assert out == {"node1": None, "node2": None, "node3": None}
    assert os.listdir(str(tmp_path)) == []


def test_a_directory_of_each_nodes_own_is_refused_on_every_node_naming_the_others(tmp_path):
    paths = {node: str(tmp_path / node) for node in NODES}
    for path in paths.values():
        os.makedirs(path)
    out = run_nodes(paths)
    assert out["node1"].startswith('train_checkpoint_dir="%s": not shared with node2, node3: no answer of theirs '
                                   'appeared in it on this node within 1s' % paths["node1"])
    for node in ("node2", "node3"):
        assert out[node].startswith('train_checkpoint_dir="%s": not shared with node1: the file node1 writes there '
                                    '(once its own checks passed) did not appear on this node within 1s; valid: a '
                                    'directory on storage every node mounts' % paths[node])
    assert [os.listdir(path) for path in paths.values()] == [[], [], []]


def test_one_node_that_does_not_share_it_is_named_alone(tmp_path):
    common, own = tmp_path / "nfs", tmp_path / "node3-local"
    common.mkdir()
    own.mkdir()
    out = run_nodes({"node1": str(common), "node2": str(common), "node3": str(own)})
    assert out["node2"] is None
    assert "not shared with node3:" in out["node1"] and "node2" not in out["node1"]
    assert "not shared with node1:" in out["node3"]
    assert os.listdir(str(common)) == [] and os.listdir(str(own)) == []


def test_a_file_of_another_run_does_not_count(tmp_path):
    # the same name with another run's content: not this run's proof
    (tmp_path / (shared.PREFIX + "t0k3n")).write_text("another run")
    problem = shared.prove(str(tmp_path), "t0k3n", "node2", NODES[:2], "node1", wait=0.3, poll=0.05)
    assert "did not appear on this node within 0.3s" in problem


def test_a_single_node_has_nothing_to_prove(tmp_path):
    assert shared.prove(str(tmp_path), "t", "node1", ["node1"], "node1", wait=0.1) is None
    assert os.listdir(str(tmp_path)) == []


def test_a_directory_it_cannot_write_into_is_a_problem(tmp_path):
    problem = shared.prove(str(tmp_path / "missing"), "t", "node1", NODES[:2], "node1", wait=0.1)
    assert problem.startswith('train_checkpoint_dir="%s": cannot write the check\'s file on this node: '
                              % (tmp_path / "missing"))


@pytest.mark.parametrize("made", [True, False])
def test_a_refused_proof_removes_the_directory_the_call_made_and_only_that(tmp_path, made):
    path = tmp_path / "ckpt"
    path.mkdir()
    # the call changed something (this directory, or its owner where it existed): only a directory it made
    # is removed, and then nothing else is left changed
    result = {"directories": [{"path": str(path), "changed": made}], "changed": True, "account_created": False}
    acc.unmake_directory(result, str(path))
    assert path.exists() is not made
    assert result["changed"] is not made
