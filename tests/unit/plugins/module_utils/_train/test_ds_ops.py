"""Unit tests for _train.ds_ops: the ops a DeepSpeed config makes DeepSpeed load, against the prebuilt ones."""
import json

import pytest

from ansible_collections.multinode.training.plugins.module_utils._train import ds_ops

ADAM = {"type": "Adam", "params": {"lr": 1e-4}}


@pytest.mark.parametrize("config,ops", [
    ({"optimizer": ADAM, "zero_optimization": {"stage": 2}}, ["fused_adam"]),
    ({"optimizer": dict(ADAM, type="AdamW"), "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}},
     ["cpu_adam"]),
    ({"optimizer": ADAM,
      "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme"}, "offload_param": {"device": "nvme"}}},
     ["cpu_adam", "async_io", "async_io"]),
    ({"optimizer": {"type": "Adam", "params": {"torch_adam": True}}}, []),
    ({"optimizer": {"type": "LAMB"}}, ["fused_lamb"]),
    ({"optimizer": {"type": "Lion"}, "zero_optimization": {"offload_optimizer": {"device": "cpu"}}}, ["cpu_lion"]),
    ({"optimizer": {"type": "Lion"}}, ["fused_lion"]),
    ({"optimizer": {"type": "Adagrad"}}, []),
    ({"optimizer": {"type": "Adagrad"}, "zero_optimization": {"offload_optimizer": {"device": "cpu"}}}, ["cpu_adagrad"]),
    ({"zero_optimization": {"stage": 2}, "train_batch_size": 8}, []),     # the script brings its optimizer
    ({"optimizer": ADAM, "zero_optimization": {"offload_optimizer": {"device": "none"}}}, ["fused_adam"]),
])
def test_needed_ops_follow_deepspeeds_choice(config, ops):
    assert [op for op, _why in ds_ops.needed_ops(config)] == ops


def test_an_op_the_node_lacks_is_refused_naming_it_and_the_build_variable():
    text = json.dumps({"optimizer": ADAM, "zero_optimization": {"stage": 2}})
    problems = ds_ops.config_ops_problems(text, "/c/ds.json", "gpu1", ["cpu_adam_op", "utils_op"])
    assert problems == [
        'train_deepspeed_config=/c/ds.json: optimizer "Adam" without offload_optimizer makes DeepSpeed load op '
        "fused_adam, which the DeepSpeed on gpu1 does not have prebuilt (it has: cpu_adam, utils): every rank "
        "would JIT-compile it at the first step; valid: a wheel with it - add fused_adam to deepspeed_build_ops "
        "and build again (build_deepspeed.yml) - or train_allow_jit=true"]
    assert ds_ops.config_ops_problems(text, "/c/ds.json", "gpu1", ["fused_adam_op", "cpu_adam_op"]) == []
    assert ds_ops.config_ops_problems(text, "/c/ds.json", "gpu1", [], allow_jit=True) == []


def test_a_config_that_is_not_json_is_named():
    assert ds_ops.config_ops_problems("{optimizer:", "/c/ds.json", "n", [])[0].startswith(
        "train_deepspeed_config=/c/ds.json: not JSON (")
    assert ds_ops.config_ops_problems("[1]", "/c/ds.json", "n", []) == [
        "train_deepspeed_config=/c/ds.json: not a JSON object; valid: a DeepSpeed JSON config"]
