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
