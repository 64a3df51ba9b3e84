"""Defaults the collection holds once in Python and the train role mirrors in defaults/main.yml.

The modules, actions and reports take these values from one constant each; a role default with the
same meaning must say the same, or a play that sets nothing would differ from a module call that sets
nothing. A variable the role no longer declares is not checked here.
"""
import yaml

from ansible_collections.multinode.training.plugins.module_utils._fabric import schedule, verdict
from ansible_collections.multinode.training.plugins.module_utils._node import torchrun
from ansible_collections.multinode.training.plugins.module_utils._report import straggler
from ansible_collections.multinode.training.plugins.module_utils._torchrun import bounded
from ansible_collections.multinode.training.plugins.module_utils._train import preflight
from tests.unit.conftest import ROOT

MIRRORS = {
    "train_straggler_ratio": straggler.RATIO,
    "train_fabric_ratio": verdict.RATIO,
    "train_fabric_line_ratio": verdict.LINE_RATIO,
    "train_stop_grace": torchrun.STOP_GRACE,
    "train_connect_timeout": preflight.CONNECT_TIMEOUT,
    "train_venv": torchrun.VENV,
    "train_log_dir": torchrun.LOG_DIR,
    "train_poll_slack": bounded.POLL_SLACK,
}


def test_train_defaults_mirror_the_constants():
    defaults = yaml.safe_load((ROOT / "roles" / "train" / "defaults" / "main.yml").read_text())
    checked = {name: defaults[name] for name in MIRRORS if name in defaults}
    assert checked == {name: MIRRORS[name] for name in checked}
    assert "train_straggler_ratio" in checked


# The modules' documented defaults (DOCUMENTATION is YAML: it cannot import) and the role's argument specs
# say the same as the constant the code uses: a planted 1.3 in any of them fails here.
DOCUMENTED = {
    ("train_job_report", "ratio"): straggler.RATIO,
    ("slurm_job", "fabric_ratio"): verdict.RATIO,
    ("slurm_job", "fabric_line_ratio"): verdict.LINE_RATIO,
    ("torchrun", "poll_slack"): bounded.POLL_SLACK,
    ("slurm_job", "poll_slack"): bounded.POLL_SLACK,
}


def test_documented_defaults_are_the_constants():
    for (module, option), value in DOCUMENTED.items():
        text = (ROOT / "plugins" / "modules" / ("%s.py" % module)).read_text()
        doc = yaml.safe_load(text.split('DOCUMENTATION = r"""', 1)[1].split('"""', 1)[0])
        assert doc["options"][option]["default"] == value, (module, option)
    # torchrun's and slurm_job's straggler_ratio: the progress doc fragment
    text = (ROOT / "plugins" / "doc_fragments" / "progress.py").read_text()
    doc = yaml.safe_load(text.split('DOCUMENTATION = r"""', 1)[1].split('"""', 1)[0])
    assert doc["options"]["straggler_ratio"]["default"] == straggler.RATIO
    text = (ROOT / "plugins" / "modules" / "data_sync.py").read_text()
    doc = yaml.safe_load(text.split('DOCUMENTATION = r"""', 1)[1].split('"""', 1)[0])
    assert doc["options"]["transfer"]["suboptions"]["poll_slack"]["default"] == bounded.POLL_SLACK
    specs = yaml.safe_load((ROOT / "roles" / "train" / "meta" / "argument_specs.yml").read_text())
    for entry in specs["argument_specs"].values():
        for name, value in MIRRORS.items():
            if name in entry.get("options", {}) and "default" in entry["options"][name]:
                assert entry["options"][name]["default"] == value, name


def test_train_passes_the_nccl_env_file_that_nccl_tuning_writes():
    # One path, two roles' internal variables: role train may not read nccl_tuning's `_` variables.
    train = yaml.safe_load((ROOT / "roles" / "train" / "vars" / "main.yml").read_text())
    nccl = yaml.safe_load((ROOT / "roles" / "nccl_tuning" / "vars" / "main.yml").read_text())
    assert train["_train_nccl_env_file"] == nccl["_nccl_tuning_env_file"] == "/etc/multinode-training/nccl.env"


def test_internal_train_values_mirror_the_constants():
    train = yaml.safe_load((ROOT / "roles" / "train" / "vars" / "main.yml").read_text())
    assert train["_train_fabric_seconds"] == schedule.SECONDS
