"""Module nccl_log_check's run_module (_nccl/log_check.py) on the recorded NCCL logs."""
import pathlib

import pytest

from ansible_collections.multinode.training.plugins.module_utils._nccl import log_check

from ..stand_in import Exit, StandInModule

LOGS = pathlib.Path(__file__).resolve().parents[4] / "fixtures" / "nccl_logs"


def run(**params):
    module = StandInModule(log_check.ARGUMENT_SPEC, node_name="node1", **params)
    with pytest.raises(Exit):
        log_check.run_module(module)
    return module


def test_socket_fallback_with_active_ib_fails_naming_hosts_and_ranks():
    module = run(paths=[str(LOGS / "socket.log")], active_ib=True)
    assert module.result["failed"] and module.result["fallback"]
    assert module.result["msg"].startswith("SOCKET FALLBACK: node1 has active InfiniBand/RoCE ports but NCCL used sockets: host ")


def test_socket_fallback_only_warns_when_asked():
    module = run(paths=[str(LOGS / "socket.log")], active_ib=True, fail_on_fallback=False)
    assert not module.result.get("failed") and module.warnings[0].startswith("SOCKET FALLBACK: ")


def test_ib_log_reports_its_transport():
    module = run(paths=[str(LOGS / "ib.log")], active_ib=True)
    assert not module.result.get("failed") and module.result["transports"] and not module.result["fallback"]


def test_no_info_line_warns_or_fails_and_an_unreadable_path_fails(tmp_path):
    module = run(content="hello")
    assert "no NCCL INFO line in the given content" in module.warnings[0]
    assert run(content="hello", require_info=True).result["failed"]
    missing = run(paths=[str(tmp_path / "nope.log")])
    assert missing.result["failed"] and missing.result["msg"].startswith("node1: cannot read NCCL log ")
