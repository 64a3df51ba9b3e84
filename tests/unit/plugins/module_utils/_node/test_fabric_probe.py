"""module_utils/_node/fabric_probe.py: how the passes of the compute measure combine, the fast steps, the
line rate.

The probe itself (torch.distributed, gloo) runs for real in molecule/launch_diagnosis/verify/fabric_gate.yml
and launch_slurm; here the rule that keeps each device's best pass, on figures of the kind recorded on
the 2-core test host (three equal nodes' matmuls sharing two cores: 22, 10.2 and 9.53 GFLOP/s in one pass),
and the line rate read from recorded sysfs trees.
"""
import shutil

import pytest

from ansible_collections.multinode.training.plugins.module_utils._fabric import schedule
from ansible_collections.multinode.training.plugins.module_utils._node import fabric_probe
from tests.unit.conftest import ROOT


def test_first_pass_is_kept_as_is():
    first = {"gflops": 9.53, "devices": [9.53]}
    assert fabric_probe.keep_faster(None, first) == first


def test_each_device_keeps_its_best_pass_and_the_node_its_slowest_device():
    best = fabric_probe.keep_faster({"gflops": 300.0, "devices": [300.0, 610.0]},
                                    {"gflops": 450.0, "devices": [640.0, 450.0]})
    assert best == {"gflops": 610.0, "devices": [640.0, 610.0]}


def test_a_slow_device_stays_slow_over_passes():
    best = None
    for figures in ([600.0, 120.0], [590.0, 125.0]):
        best = fabric_probe.keep_faster(best, {"gflops": min(figures), "devices": figures})
    assert best["gflops"] == 125.0


def test_seconds_default_is_the_collections():
    args = fabric_probe.parse_args(["--probe-nodes", "[]", "--schedule", "[]"])
    assert args.seconds == schedule.SECONDS


def test_a_link_is_judged_by_its_fast_steps_not_by_a_busy_hosts_slow_ones():
    # a healthy link on a loaded host: 0.12 ms at rest, but most round trips delayed by a
    # scheduler slice (2 to 7 ms): the median is 2 ms (as on the CI host), the fast tenth is the link's
    steps = [0.00012] * 30 + [0.002, 0.004, 0.007] * 20 + [0.0002] * 10
    assert sorted(steps)[len(steps) // 2] == 0.002
    assert fabric_probe.fast_step(steps, fabric_probe.FAST_STEPS["latency"]) == 0.00012
    # a link slowed by 20 ms on every round trip stays slow
    assert fabric_probe.fast_step([0.02 + s for s in steps], fabric_probe.FAST_STEPS["latency"]) > 0.02


def test_fast_step_of_few_steps_and_of_a_quarter():
    assert fabric_probe.fast_step([3.0, 1.0, 2.0, 5.0, 4.0], 0.25) == 2.0
    assert fabric_probe.fast_step([3.0, 1.0, 2.0, 5.0, 4.0], 0.1) == 1.0
    assert fabric_probe.fast_step([0.5], 0.25) == 0.5


# ------------------------------------------------------------------ the line rate (sysfs)
SYSFS = ROOT / "tests" / "fixtures" / "sysfs"


def _tree(tmp_path, case, speeds=None, route_iface="eth0"):
    """A copy of a recorded sysfs tree with interface speeds (Mb/s; a recorded tree has none) and a
    /proc/net/route whose default route leaves through ``route_iface``."""
    root = tmp_path / "sys"
    shutil.copytree(SYSFS / case, root, symlinks=True)
    for iface, speed in (speeds or {}).items():
        (root / "class" / "net" / iface).mkdir(parents=True, exist_ok=True)
        (root / "class" / "net" / iface / "speed").write_text("%s\n" % speed)
    proc = tmp_path / "proc"
    (proc / "net").mkdir(parents=True)
    (proc / "net" / "route").write_text(
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
        "eth1\t0000A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"
        "%s\t00000000\t0100A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n" % route_iface)
    return str(root), str(proc)


def test_gpu_node_on_infiniband_is_judged_by_its_slowest_port_nccl_may_use(tmp_path):
    root, proc = _tree(tmp_path, "ib8_storage")
    conf = str(tmp_path / "nccl.conf")
    # every ACTIVE port: the 200 Gb/s storage port (mlx5_8) is the slowest; mlx5_5 is DOWN at 10
    line = fabric_probe.line_rate("", True, {}, root, proc, conf)
    assert line == {"transport": "rdma", "via": "mlx5_8:1 (InfiniBand)", "gbps": 200.0}
    # NCCL_IB_HCA as nccl_tuning writes it leaves the storage port out: 400
    env = {"NCCL_IB_HCA": "=mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7"}
    assert fabric_probe.line_rate("", True, env, root, proc, conf)["gbps"] == 400.0
    # ... read from /etc/nccl.conf as NCCL reads it, the environment first
    (tmp_path / "nccl.conf").write_text("NCCL_DEBUG=WARN\nNCCL_IB_HCA=^=mlx5_8\n")
    assert fabric_probe.line_rate("", True, {}, root, proc, conf)["gbps"] == 400.0
    assert fabric_probe.line_rate("", True, {"NCCL_IB_HCA": "mlx5_8"}, root, proc, conf)["gbps"] == 200.0


def test_sockets_when_ib_is_off_and_on_cpu_nodes(tmp_path):
    root, proc = _tree(tmp_path, "ib8_storage", speeds={"eth0": 100000, "eth1": 1000})
    conf = str(tmp_path / "absent.conf")
    socket_line = {"transport": "socket", "via": "eth0", "gbps": 100.0}
    assert fabric_probe.line_rate("", True, {"NCCL_IB_DISABLE": "1"}, root, proc, conf) == socket_line
    assert fabric_probe.line_rate("", True, {"NCCL_NET": "Socket"}, root, proc, conf) == socket_line
    # gloo on a CPU node: sockets whatever the ports; the interface the play names, else the default route's
    assert fabric_probe.line_rate("", False, {}, root, proc, conf) == socket_line
    assert fabric_probe.line_rate("eth1", False, {}, root, proc, conf)["gbps"] == 1.0
    # a network plugin (EFA, ...): not read
    plugin = fabric_probe.line_rate("", True, {"NCCL_NET": "AWS Libfabric"}, root, proc, conf)
    assert plugin["gbps"] is None and plugin["transport"] == "plugin"


@pytest.mark.parametrize("speed, why", [(-1, "no speed in sysfs (-1)"), (None, "no speed in sysfs (unreadable)")])
def test_an_interface_without_a_speed_has_no_line_rate(tmp_path, speed, why):
    # a veth reads 10000, a VM's virtio NIC -1, a bridge or tunnel nothing (EINVAL)
    root, proc = _tree(tmp_path, "eth_only", speeds={} if speed is None else {"eth0": speed})
    line = fabric_probe.line_rate("eth0", False, {}, root, proc, str(tmp_path / "absent.conf"))
    assert line == {"transport": "socket", "via": "eth0", "gbps": None, "why": why}


@pytest.mark.parametrize("spec, device, port, allowed", [
    ("", "mlx5_8", "1", True),
    ("mlx5_0,mlx5_1", "mlx5_1", "1", True),
    ("mlx5_0,mlx5_1", "mlx5_8", "1", False),
    ("mlx5", "mlx5_8", "1", True),          # a prefix without '='
    ("=mlx5", "mlx5_8", "1", False),        # exact with '='
    ("^=mlx5_8", "mlx5_8", "1", False),
    ("^=mlx5_8", "mlx5_0", "1", True),
    ("mlx5_0:2", "mlx5_0", "1", False),     # a port named
    ("mlx5_0:1", "mlx5_0", "1", True),
])
def test_nccl_ib_hca_syntax(spec, device, port, allowed):
    assert fabric_probe.hca_allows(spec, device, port) is allowed


def test_no_interface_named_and_no_default_route(tmp_path):
    # a Slurm node on an internal network, train_interface unset
    root, proc = _tree(tmp_path, "eth_only", route_iface="eth0")
    (tmp_path / "proc" / "net" / "route").write_text("Iface\tDestination\tGateway \tFlags\n")
    line = fabric_probe.line_rate("", False, {}, root, proc, str(tmp_path / "absent.conf"))
    assert line == {"transport": "socket", "via": "-", "gbps": None, "why": "no interface named and no default route"}
