"""NCCL_DEBUG=INFO parsing on recorded logs (tests/fixtures/nccl_logs/*.log)."""
import pathlib

import pytest

from ansible_collections.multinode.training.plugins.module_utils._nccl.log import (
    parse,
    socket_fallbacks,
    summary,
)

LOGS = pathlib.Path(__file__).resolve().parents[4] / "fixtures" / "nccl_logs"


def parsed(name):
    return parse((LOGS / name).read_text())


@pytest.mark.parametrize("log, host, transport, ranks, gdrdma, no_ib_device", [
    ("ib.log", "gpu-node01", "IB", [0, 1], False, False),
    ("gdrdma.log", "gpu-node02", "IB", [2, 3], True, False),
    ("roce.log", "roce-node02", "RoCE", [2], True, False),
    ("no_device.log", "gpu-node01", "Socket", [0], False, True),
])
def test_transport_per_host(log, host, transport, ranks, gdrdma, no_ib_device):
    result = parsed(log)
    assert list(result["hosts"]) == [host]
    info = result["hosts"][host]
    assert (info["transport"], info["ranks"], info["gdrdma"], info["no_ib_device"]) == (
        transport, ranks, gdrdma, no_ib_device)
    assert info["inter_node"] is True


def test_socket_log_has_two_hosts_on_sockets():
    result = parsed("socket.log")
    assert {name: (h["transport"], h["ranks"], h["socket_devices"]) for name, h in result["hosts"].items()} == {
        "gpu-node01": ("Socket", [0], ["eth0"]),
        "gpu-node02": ("Socket", [1], ["eth0"]),
    }


def test_ib_devices_and_version_are_read():
    info = parsed("ib.log")["hosts"]["gpu-node01"]
    assert info["ib_devices"] == ["mlx5_0:1", "mlx5_1:1", "mlx5_2:1", "mlx5_3:1", "mlx5_4:1", "mlx5_6:1", "mlx5_7:1"]
    assert info["version"] == "2.20.5+cuda12.4"


def test_ranks_map_to_host_and_transport():
    assert parsed("gdrdma.log")["ranks"] == {
        2: {"host": "gpu-node02", "pid": 3310, "transport": "IB", "gdrdma": True},
        3: {"host": "gpu-node02", "pid": 3311, "transport": "IB", "gdrdma": True},
    }


def test_channels_are_counted_per_net_device():
    proc = parsed("ib.log")["processes"][0]
    assert proc["channels"] == {"NET/IB/0": 2, "P2P/IPC": 2}


def test_launcher_prefix_is_tolerated_and_other_lines_ignored():
    result = parsed("gdrdma.log")
    assert result["lines"] == 25
    assert parsed("ib.log")["lines"] == 36                   # the torch.distributed.run line is not NCCL


def test_no_nccl_lines():
    assert parse("Traceback (most recent call last):\n  RuntimeError: boom\n") == {
        "processes": [], "hosts": {}, "ranks": {}, "lines": 0}


@pytest.mark.parametrize("log, active_ib, hosts", [
    ("ib.log", True, []),
    ("gdrdma.log", True, []),
    ("roce.log", True, []),
    ("socket.log", False, []),
    ("socket.log", True, ["gpu-node01", "gpu-node02"]),
    ("socket.log", {"gpu-node02": True, "gpu-node01": False}, ["gpu-node02"]),
    ("socket.log", ["gpu-node01"], ["gpu-node01"]),
    ("no_device.log", True, ["gpu-node01"]),
    ("no_device.log", False, []),
])
def test_socket_fallbacks(log, active_ib, hosts):
    assert [f["host"] for f in socket_fallbacks(parsed(log), active_ib)] == hosts


def test_fallback_reason_tells_no_device_from_forced_socket():
    no_device = socket_fallbacks(parsed("no_device.log"), True)[0]
    assert no_device["reason"].startswith("NET/IB : No device found")
    assert no_device["ranks"] == [0]
    assert no_device["interfaces"] == ["eth0", "docker0"]
    forced = socket_fallbacks(parsed("socket.log"), True)[0]
    assert forced["reason"].startswith("NCCL used NET/Socket")


def test_summary_lines():
    assert summary(parsed("roce.log")) == ["roce-node02: RoCE (GDRDMA) ranks 2 via mlx5_0:1,mlx5_1:1"]
    assert summary(parsed("socket.log")) == ["gpu-node01: Socket ranks 0 via eth0", "gpu-node02: Socket ranks 1 via eth0"]
