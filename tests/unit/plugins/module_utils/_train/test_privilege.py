"""The steps of a run that need root, named before any work (_train.privilege)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.multinode.training.plugins.module_utils._train import privilege as p
from tests.unit.conftest import ROOT

# playbooks/train.yml's _train_writes with the defaults (a new venv: its parent is written)
WRITES = [
    {"var": "", "what": "the node folder of the wheels", "path": "/var/cache/multinode-training", "tags": ["prepare"],
     "on": True},
    {"var": "train_venv", "value": "/opt/multinode-training/venv", "path": "/opt/multinode-training",
     "tags": ["prepare"], "on": True},
    {"var": "", "what": "the NCCL env file", "path": "/etc/multinode-training", "tags": ["nccl"], "on": True},
    {"var": "nccl_tuning_system_conf", "value": "/etc/nccl.conf", "path": "/etc/nccl.conf", "tags": ["nccl"],
     "on": False},
    {"var": "train_code_dir", "path": "/opt/multinode-training/code", "tags": ["train", "train_preflight"],
     "on": True},
    {"var": "train_log_dir", "path": "/var/log/multinode-training", "tags": ["train", "train_preflight"],
     "on": True},
]
# what node_facts reports for alice on a fresh Debian node
ALICE = {"user_id": "alice", "multinode_training_writes": {
    "/var/cache/multinode-training": "/var/cache", "/opt/multinode-training": "/opt",
    "/etc/multinode-training": "/etc", "/etc/nccl.conf": "/etc", "/opt/multinode-training/code": "/opt",
    "/var/log/multinode-training": "/var/log"}}


def _blockers_as(uid, paths):
    """write_blockers in a process of another uid (these tests run as root, which writes anything)."""
    code = ("import json, sys; from ansible_collections.multinode.training.plugins.module_utils._train "
            "import privilege; print(json.dumps(privilege.write_blockers(sys.argv[1:])))")
    env = dict(os.environ, PYTHONPATH=str(ROOT / ".collections"))
    run = subprocess.run(["setpriv", "--reuid=%d" % uid, "--regid=%d" % uid, "--clear-groups", sys.executable,
                          "-c", code] + list(paths), env=env, capture_output=True, text=True, check=True)
    return json.loads(run.stdout)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a probe as another uid")
def test_write_blockers_name_the_path_or_its_nearest_existing_ancestor(shared_dir):
    mine = os.path.join(shared_dir, "nobodys")
    os.mkdir(mine)
    os.chown(mine, 65534, 65534)
    roots = os.path.join(shared_dir, "roots")
    os.mkdir(roots, 0o755)
    got = _blockers_as(65534, [mine + "/venv/releases", roots + "/venv", roots, "/etc/mt-missing-dir/x"])
    assert got == {mine + "/venv/releases": "", roots + "/venv": roots, roots: roots,
                   "/etc/mt-missing-dir/x": "/etc"}
    # root: nothing to report
    assert p.write_blockers([roots + "/venv"]) == {}


def test_tags_selected_as_ansible_selects_them():
    assert p.tags_selected(["prepare"], ["all"], [])
    assert not p.tags_selected(["prepare"], ["all"], ["prepare", "nccl"])
    assert not p.tags_selected(["prepare"], ["train"], [])
    assert p.tags_selected(["train", "train_preflight"], ["train_preflight"], [])
    assert p.tags_selected(["nccl"], ["tagged"], [])
    assert not p.tags_selected(["nccl"], ["validate"], [])
    assert p.tags_selected(["always"], ["validate"], [])


def test_a_user_without_become_is_told_every_path_its_tag_and_the_ways_out():
    refusal = p.root_needed({"node1": ALICE, "node2": ALICE}, WRITES, ["all"], [])
    assert refusal == (
        "ansible_become=false: alice on node1, node2 cannot write what this run writes there: "
        "the node folder of the wheels /var/cache/multinode-training (tag prepare: /var/cache is not writable), "
        "train_venv=/opt/multinode-training/venv (tag prepare: /opt is not writable), "
        "the NCCL env file /etc/multinode-training (tag nccl: /etc is not writable), "
        "train_code_dir=/opt/multinode-training/code (tag train: /opt is not writable), "
        "train_log_dir=/var/log/multinode-training (tag train: /var/log is not writable); "
        "valid: root through sudo: -b on the command line, or ansible_become: true in the inventory "
        "(beside a hostfile: group_vars/train.yml), or --skip-tags prepare,nccl on nodes a root run prepared, "
        "or train_code_dir and train_log_dir in a directory alice can write")


def test_only_the_steps_that_run_and_only_the_nodes_that_cannot():
    home = {"user_id": "alice", "multinode_training_writes": dict(
        ALICE["multinode_training_writes"], **{"/opt/multinode-training/code": "", "/var/log/multinode-training": ""})}
    # the nodes prepared by root before, the job's directories alice's own: nothing needs root
    assert p.root_needed({"node1": home}, WRITES, ["all"], ["prepare", "nccl"]) == ""
    # node2 is root (become): nothing reported there; node1 still cannot prepare
    refusal = p.root_needed({"node1": home, "node2": {"user_id": "root", "multinode_training_writes": {}}},
                            WRITES, ["all"], ["nccl"])
    assert refusal.startswith("ansible_become=false: alice on node1 cannot write")
    assert "nccl" not in refusal and "train_log_dir" not in refusal and "--skip-tags prepare on" in refusal
    # --tags validate: no step writes
    assert p.root_needed({"node1": ALICE}, WRITES, ["validate"], []) == ""
    # a step that does not run (on: false) is left out
    writes = [dict(w, on=False) if "prepare" in w["tags"] else w for w in WRITES]
    assert "tag prepare" not in p.root_needed({"node1": ALICE}, writes, ["all"], [])


def test_nodes_that_differ_get_a_line_each():
    bob = dict(ALICE, user_id="bob")
    refusal = p.root_needed({"node1": ALICE, "node2": bob, "node3": ALICE}, WRITES[:1], ["all"], [])
    assert refusal.split(" | ") == [
        "ansible_become=false: alice on node1, node3 cannot write what this run writes there: the node folder "
        "of the wheels /var/cache/multinode-training (tag prepare: /var/cache is not writable); valid: root through sudo: "
        "-b on the command line, or ansible_become: true in the inventory (beside a hostfile: "
        "group_vars/train.yml), or --skip-tags prepare on nodes a root run prepared",
        "ansible_become=false: bob on node2 cannot write what this run writes there: the node folder "
        "of the wheels /var/cache/multinode-training (tag prepare: /var/cache is not writable); valid: root through sudo: "
        "-b on the command line, or ansible_become: true in the inventory (beside a hostfile: "
        "group_vars/train.yml), or --skip-tags prepare on nodes a root run prepared"]
