"""Module nccl_fabric's run_module (_nccl/node_plan.py) on the recorded sysfs and proc trees."""
import pathlib

import pytest

from ansible_collections.multinode.training.plugins.module_utils._nccl import node_plan

from ..stand_in import Exit, StandInModule

FIXTURES = pathlib.Path(__file__).resolve().parents[4] / "fixtures"


def run(case, **params):
    module = StandInModule(node_plan.ARGUMENT_SPEC, sysfs_root=str(FIXTURES / "sysfs" / case),
                           proc_root=str(FIXTURES / "proc" / case), node_name="node1", **params)
    with pytest.raises(Exit):
        node_plan.run_module(module)
    return module


def test_infiniband_node_gets_its_hcas_and_the_active_ports_without_the_excluded_one():
    module = run("ib8_storage", exclude=["mlx5_8"])
    result = module.result
    assert not result.get("failed") and result["fabric"] == "ib"
    assert "mlx5_8:1" not in result["active_rdma_ports"] and "mlx5_8:1" not in result["ports"]
    assert result["active_rdma_ports"] == result["ports"]
    assert result["env"]["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
    assert result["fabric_warnings"] == module.warnings


def test_a_fabric_the_node_cannot_provide_fails_naming_the_node():
    module = run("eth_only", fabric="ib")
    assert module.result["failed"] and module.result["msg"].startswith("node1: ")


def test_peermem_warning_only_on_rdma_with_the_driver_and_without_peermem():
    gpu = {"nvidia_driver": True, "peermem_loaded": False}
    assert node_plan.node_warnings("n1", {"fabric": "ib", "warnings": ["w"]}, gpu) == ["w", node_plan.PEERMEM_WARNING % "n1"]
    assert node_plan.node_warnings("n1", {"fabric": "socket", "warnings": []}, gpu) == []
    assert node_plan.node_warnings("n1", {"fabric": "roce", "warnings": []}, dict(gpu, peermem_loaded=True)) == []
