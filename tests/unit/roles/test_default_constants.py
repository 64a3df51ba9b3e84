"""Defaults the collection holds once in Python that a role mirrors where no scan sees the pair.

tests/unit/packaging/test_budgets.py checks every role value a role task hands a module option against
that option's default, every documented default against the code's, and the roles' argument specs and
the docs' default tables against the roles' defaults. What is left here are the mirrors no task hands
over: a role variable whose module option the role never sets, and one path two roles' internal
variables share.
"""
import yaml

from ansible_collections.multinode.training.plugins.module_utils._node import torchrun
from tests.unit.conftest import ROOT


def test_train_venv_is_the_launch_modules_venv():
    # train_python is train_venv/bin/python (a template, worked out in the play): the venv torchrun's and
    # slurm_job's own defaults (venv, python) start from.
    defaults = yaml.safe_load((ROOT / "roles" / "train" / "defaults" / "main.yml").read_text())
    assert defaults["train_venv"] == torchrun.VENV


def test_train_passes_the_nccl_env_file_that_nccl_tuning_writes():
    # One path, two roles' internal variables: role train may not read nccl_tuning's `_` variables.
    train = yaml.safe_load((ROOT / "roles" / "train" / "vars" / "main.yml").read_text())
    nccl = yaml.safe_load((ROOT / "roles" / "nccl_tuning" / "vars" / "main.yml").read_text())
    assert train["_train_nccl_env_file"] == nccl["_nccl_tuning_env_file"] == "/etc/multinode-training/nccl.env"
