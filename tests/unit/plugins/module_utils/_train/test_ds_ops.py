"""Unit tests for _train.ds_ops (the DeepSpeed config, read on the controller) and _node.preflight's ops check:
the ops a DeepSpeed config makes DeepSpeed load, against the prebuilt ones."""
import json

import pytest

from ansible_collections.multinode.training.plugins.module_utils._node import preflight as node_preflight
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
    assert [op for op, _why in node_preflight.needed_ops(config)] == ops


def test_an_op_the_node_lacks_is_refused_naming_it_and_the_build_variable():
    text = json.dumps({"optimizer": ADAM, "zero_optimization": {"stage": 2}})
    problems = node_preflight.config_ops_problems(text, "/c/ds.json", "gpu1", ["cpu_adam_op", "utils_op"])
    assert problems == [
        'train_deepspeed_config=/c/ds.json: optimizer "Adam" without offload_optimizer makes DeepSpeed load op '
        "fused_adam, which the DeepSpeed on gpu1 does not have prebuilt (it has: cpu_adam, utils): every rank "
        "would JIT-compile it at the first step; valid: a wheel with it - add fused_adam to deepspeed_build_ops "
        "and build again (build_deepspeed.yml) - or train_allow_jit=true"]
    assert node_preflight.config_ops_problems(text, "/c/ds.json", "gpu1", ["fused_adam_op", "cpu_adam_op"]) == []
    assert node_preflight.config_ops_problems(text, "/c/ds.json", "gpu1", [], allow_jit=True) == []


def test_a_config_that_is_not_json_is_named():
    assert node_preflight.config_ops_problems("{optimizer:", "/c/ds.json", "n", [])[0].startswith(
        "train_deepspeed_config=/c/ds.json: not JSON (")
    assert node_preflight.config_ops_problems("[1]", "/c/ds.json", "n", []) == [
        "train_deepspeed_config=/c/ds.json: not a JSON object; valid: a DeepSpeed JSON config"]


def test_the_deepspeed_file_an_accelerate_config_names_is_checked(tmp_path):
    code = tmp_path / "myjob"
    code.mkdir()
    (code / "ds.json").write_text(json.dumps({"optimizer": ADAM, "zero_optimization": {"stage": 2}}))
    accelerate = {"distributed_type": "DEEPSPEED", "deepspeed_config": {"deepspeed_config_file": "ds.json"}}
    found = ds_ops.accelerate_deepspeed_config(accelerate, "/c/acc.yaml", str(code))
    assert found["path"] == str(code / "ds.json")
    assert node_preflight.config_ops_problems(found["text"], found["path"], "gpu1", ["cpu_adam_op"], label=found["label"]) == [
        'train_accelerate_config=/c/acc.yaml (its deepspeed_config_file ds.json): optimizer "Adam" without '
        "offload_optimizer makes DeepSpeed load op fused_adam, which the DeepSpeed on gpu1 does not have prebuilt "
        "(it has: cpu_adam): every rank would JIT-compile it at the first step; valid: a wheel with it - add "
        "fused_adam to deepspeed_build_ops and build again (build_deepspeed.yml) - or train_allow_jit=true"]
    # an absolute name is read as it is; one that is not on the controller (or code that is one file) is named
    assert ds_ops.accelerate_deepspeed_config(
        {"deepspeed_config": {"deepspeed_config_file": str(code / "ds.json")}}, "/c/acc.yaml")["path"] == str(
        code / "ds.json")
    missing = ds_ops.accelerate_deepspeed_config(
        {"deepspeed_config": {"deepspeed_config_file": "zero3.json"}}, "/c/acc.yaml", str(code))
    assert missing["problem"].startswith(
        "train_accelerate_config=/c/acc.yaml (its deepspeed_config_file zero3.json): cannot be read on the "
        "controller (No such file or directory); valid: a file of the directory train_code_src")
    assert "train_code_src is not a directory" in ds_ops.accelerate_deepspeed_config(
        accelerate, "/c/acc.yaml", str(code / "ds.json"))["problem"]


def test_inline_accelerate_deepspeed_fields_and_no_section():
    inline = ds_ops.accelerate_deepspeed_config(
        {"deepspeed_config": {"zero_stage": 3, "offload_optimizer_device": "nvme", "offload_param_device": "cpu"}},
        "/c/acc.yaml")
    assert inline["label"] == "train_accelerate_config=/c/acc.yaml (its deepspeed_config)"
    # no optimizer section: the script's own; the nvme offload reads through async_io
    assert [op for op, _why in node_preflight.needed_ops(json.loads(inline["text"]))] == ["async_io"]
    assert node_preflight.config_ops_problems(inline["text"], inline["path"], "n", ["cpu_adam_op"],
                                              label=inline["label"])[0].startswith(
        "train_accelerate_config=/c/acc.yaml (its deepspeed_config): ZeRO offload_optimizer to nvme makes "
        "DeepSpeed load op async_io")
    for config in ({"distributed_type": "MULTI_CPU"}, {"deepspeed_config": {}}, None, "text"):
        assert ds_ops.accelerate_deepspeed_config(config, "/c/acc.yaml") == {}
