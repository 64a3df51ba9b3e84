"""roles/train/files/accelerate_env.py: which of accelerate's variables reach the ranks.

The accelerate side (its own parser and prepare_*_env) runs for real in the launch cluster's
molecule/default/verify/job_requirements.yml; here the selection, on the environments accelerate 1.15
returned for the seed's DeepSpeed config and a CPU config.
"""
import importlib.util

from tests.unit.conftest import ROOT

_SPEC = importlib.util.spec_from_file_location("accelerate_env", ROOT / "roles" / "train" / "files" / "accelerate_env.py")
accelerate_env = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(accelerate_env)

BEFORE = {"PATH": "/usr/bin", "OMP_NUM_THREADS": "4"}


def test_cpu_config_keeps_accelerate_and_thread_variables_not_rendezvous():
    after = dict(BEFORE, ACCELERATE_USE_CPU="True", ACCELERATE_MIXED_PRECISION="no", OMP_NUM_THREADS="1",
                 MASTER_ADDR="127.0.0.1", MASTER_PORT="29500", KMP_BLOCKTIME="1")
    assert accelerate_env.select_env(BEFORE, after, "/code") == {
        "ACCELERATE_MIXED_PRECISION": "no", "ACCELERATE_USE_CPU": "True", "KMP_BLOCKTIME": "1",
        "OMP_NUM_THREADS": "1"}


def test_deepspeed_config_path_relative_to_the_code_dir_or_the_synced_file():
    after = dict(BEFORE, ACCELERATE_USE_DEEPSPEED="true", ACCELERATE_DEEPSPEED_CONFIG_FILE="./deepspeed.json",
                 ACCELERATE_DEEPSPEED_ZERO3_INIT="true")
    env = accelerate_env.select_env(BEFORE, after, "/opt/code")
    assert env["ACCELERATE_DEEPSPEED_CONFIG_FILE"] == "/opt/code/deepspeed.json"
    env = accelerate_env.select_env(BEFORE, after, "/opt/code", "/opt/code/ds_zero2.json")
    assert env["ACCELERATE_DEEPSPEED_CONFIG_FILE"] == "/opt/code/ds_zero2.json"
    assert env["ACCELERATE_DEEPSPEED_ZERO3_INIT"] == "true"


def test_usage_without_arguments():
    assert accelerate_env.main(["accelerate_env.py"]) == 2
