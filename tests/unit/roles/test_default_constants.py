"""Defaults the collection holds once in Python and the train role mirrors in defaults/main.yml.

The modules, actions and reports take these values from one constant each; a role default with the
same meaning must say the same, or a play that sets nothing would differ from a module call that sets
nothing. A variable the role no longer declares is not checked here.
"""
import yaml

from ansible_collections.multinode.training.plugins.module_utils._fabric import schedule, verdict
from ansible_collections.multinode.training.plugins.module_utils._node import torchrun
from ansible_collections.multinode.training.plugins.module_utils._report import straggler
from ansible_collections.multinode.training.plugins.module_utils._train import preflight
from tests.unit.conftest import ROOT

MIRRORS = {
    "train_straggler_ratio": straggler.RATIO,
    "train_fabric_ratio": verdict.RATIO,
    "train_fabric_seconds": schedule.SECONDS,
    "train_stop_grace": torchrun.STOP_GRACE,
    "train_connect_timeout": preflight.CONNECT_TIMEOUT,
    "train_venv": torchrun.VENV,
    "train_log_dir": torchrun.LOG_DIR,
}


def test_train_defaults_mirror_the_constants():
    defaults = yaml.safe_load((ROOT / "roles" / "train" / "defaults" / "main.yml").read_text())
    checked = {name: defaults[name] for name in MIRRORS if name in defaults}
    assert checked == {name: MIRRORS[name] for name in checked}
    assert "train_straggler_ratio" in checked
