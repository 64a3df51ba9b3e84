"""The hostfile inventory plugin as ansible-inventory runs it (the ansible.cfg of the repository)."""
import json
import os
import pathlib
import subprocess
import sys

from tests.unit.conftest import FIXTURES, ROOT

BIN = pathlib.Path(sys.executable).parent


def _inventory(path):
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".collections"))
    return subprocess.run([str(BIN / "ansible-inventory"), "-i", str(path), "--list"], cwd=str(ROOT), env=env,
                          capture_output=True, text=True, check=False)


def test_seed_hostfile_is_group_train_with_slots_as_nproc():
    run = _inventory(FIXTURES / "hostfile" / "deepspeed_seed.hostfile")
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    assert data["train"]["hosts"] == ["huaweiyun1", "huaweiyun2"]
    hostvars = data["_meta"]["hostvars"]["huaweiyun1"]
    # ansible_local ({}, no local facts): Ansible lists it for every host where facts are not
    # injected as variables (ansible.cfg's inject_facts_as_vars = False); the plugin adds the rest
    hostvars.pop("ansible_local", None)
    assert hostvars == {"train_nproc_per_node": 8}


def test_bad_hostfile_error_recorded_for_train_yml(tmp_path):
    bad = tmp_path / "hostfile"
    bad.write_text("w1 slots=2\nw1 slots=0\n")
    run = _inventory(bad)
    assert "%s line 2: 'w1 slots=0': slots=0" % bad in run.stderr
    assert "duplicate host w1 (first at line 1)" in run.stderr
    data = json.loads(run.stdout)
    errors = data["_meta"]["hostvars"]["w1"]["multinode_training_inventory_errors"]
    assert "line 2" in json.dumps(errors)
    assert "train" not in data


def test_every_documented_file_name_is_read_as_a_hostfile(tmp_path):
    """hostfile*, *.hostfile and *_hostfile (the plugin's documentation) are this plugin's; others are not."""
    text = (FIXTURES / "hostfile" / "deepspeed_seed.hostfile").read_text()
    for name in ("hostfile", "cluster.hostfile", "cluster_hostfile"):
        (tmp_path / name).write_text(text)
        run = _inventory(tmp_path / name)
        assert run.returncode == 0 and json.loads(run.stdout)["train"]["hosts"] == ["huaweiyun1", "huaweiyun2"], name
    (tmp_path / "cluster_hosts").write_text(text)
    assert "train" not in json.loads(_inventory(tmp_path / "cluster_hosts").stdout)


def test_become_for_a_hostfile_from_group_vars_beside_it(tmp_path):
    """docs/train.md: a hostfile cannot say become; group_vars/train.yml beside it does (Ansible's own
    host_group_vars plugin, for any inventory source)."""
    (tmp_path / "hostfile").write_text("worker-1 slots=8\nworker-2 slots=8\n")
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "train.yml").write_text("---\nansible_become: true\nansible_user: alice\n")
    data = json.loads(_inventory(tmp_path / "hostfile").stdout)
    for host in ("worker-1", "worker-2"):
        hostvars = data["_meta"]["hostvars"][host]
        assert (hostvars["ansible_become"], hostvars["ansible_user"], hostvars["train_nproc_per_node"]) == (
            True, "alice", 8)
    (tmp_path / "group_vars" / "train.yml").unlink()
    assert "ansible_become" not in json.loads(_inventory(tmp_path / "hostfile").stdout)["_meta"]["hostvars"]["worker-1"]
