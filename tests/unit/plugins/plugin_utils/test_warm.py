"""plugins/plugin_utils/_warm.py: the filter and test plugins that every per-node worker of train.yml
would load again are loaded once, in ansible-playbook's own process (where the action plugins are
imported before the first fork), so that the worker's lookups import nothing. Run in a fresh python
with Ansible's plugin loader set up from the repository's ansible.cfg, as ansible-playbook has it."""
import json
import os
import subprocess
import sys

from tests.unit.conftest import ROOT

PROBE = r"""
import json, os, sys
from ansible.plugins.loader import init_plugin_loader, filter_loader, test_loader
init_plugin_loader()
from ansible_collections.multinode.training.plugins.plugin_utils import _warm
out = {}
if sys.argv[1] == "action":
    from ansible_collections.multinode.training.plugins.action import node_facts, torchrun, train_access
    out["warmed_by_import"] = not _warm.warm()
elif sys.argv[1] == "warm":
    out["first"] = _warm.warm()
    out["second"] = _warm.warm()
before = set(sys.modules)
# what the train role's per-node templates look up
found = {}
for loader, name in ((filter_loader, "multinode.training.train_run_user"),
                     (filter_loader, "multinode.training.interface_address"),
                     (filter_loader, "community.general.dict_kv"),
                     (filter_loader, "combine"), (filter_loader, "ansible.builtin.combine"),
                     (test_loader, "truthy"), (test_loader, "defined")):
    found[name] = loader.get_with_context(name).object is not None
out["found"] = found
out["imported_by_lookups"] = sorted(m for m in set(sys.modules) - before if "ansible_collections" in m
                                    or m.startswith("ansible.plugins"))
print(json.dumps(out))
"""


def probe(mode):
    done = subprocess.run([sys.executable, "-c", PROBE, mode], cwd=str(ROOT), capture_output=True, text=True,
                          check=False, env=dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg")))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_without_warm_a_worker_s_first_lookups_import_the_filter_files():
    """The cost warm() moves: the first lookup of a collection's filter imports its filter files."""
    out = probe("cold")
    assert all(out["found"].values()), out
    imported = out["imported_by_lookups"]
    assert "ansible_collections.multinode.training.plugins.filter.train_run_user" in imported, imported
    assert "ansible_collections.multinode.training.plugins.filter.interfaces" in imported, imported
    assert any(m.startswith("ansible_collections.community.general.plugins.filter.dict_kv") for m in imported), imported


def test_after_warm_the_lookups_of_the_per_node_templates_import_nothing():
    out = probe("warm")
    assert out["first"] is True and out["second"] is False
    assert all(out["found"].values()), out
    assert out["imported_by_lookups"] == [], out["imported_by_lookups"]


def test_the_actions_of_the_launch_path_warm_the_process_when_imported():
    """node_facts (train.yml's first per-node task), train_access and torchrun warm on import."""
    out = probe("action")
    assert out["warmed_by_import"] is True
    assert out["imported_by_lookups"] == [], out["imported_by_lookups"]
