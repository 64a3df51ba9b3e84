"""roles/train/files/fabric_probe.py: how the passes of the compute measure combine.

The probe itself (torch.distributed, gloo) runs for real in molecule/launch_diagnosis/verify/fabric_gate.yml
and launch_slurm; here the rule that keeps each device's best pass, on figures of the kind recorded on
the 2-core test host (three equal nodes' matmuls sharing two cores: 22, 10.2 and 9.53 GFLOP/s in one pass).
"""
import importlib.util

from ansible_collections.multinode.training.plugins.module_utils._fabric import schedule
from tests.unit.conftest import ROOT

_SPEC = importlib.util.spec_from_file_location("fabric_probe", ROOT / "roles" / "train" / "files" / "fabric_probe.py")
fabric_probe = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(fabric_probe)


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
