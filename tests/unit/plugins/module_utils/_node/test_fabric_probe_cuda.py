"""module_utils/_node/fabric_probe.py on GPU nodes, without a GPU: the CUDA branch against fakes of torch and
torch.distributed that keep time the way a GPU does.

A GPU runs what the host queued after the host has moved on: a kernel or an NCCL transfer is queued in
microseconds and runs later, in order, on its device. The fakes model exactly that on one simulated clock:
queuing costs the host 10 us; each device runs its queue at its own speed (GFLOP/s per GPU, the link's
Gbit/s and latency); ``torch.cuda.synchronize`` moves the host to the end of that device's queue. A probe
that reads the clock without a sync times the queuing, not the work, and its figures come out wrong by
orders of magnitude, so these tests see a missing sync (tried: with ``_sync`` a no-op, every figure here
is off). The probe itself runs for real, with gloo on CPU, in molecule (launch_diagnosis, launch_slurm).
"""
import json
import sys
import types

import pytest

from ansible_collections.multinode.training.plugins.module_utils._node import fabric_probe

LAUNCH = 10e-6  # host seconds to queue one operation


class Clock:
    """The host's time and each device's queue (the time its last queued operation ends)."""

    def __init__(self):
        self.now = 0.0
        self.busy_until = {}
        self.syncs = []
        self.log = []  # what each queued operation measured: link, compute, all_reduce

    def perf_counter(self):
        return self.now

    def queue(self, device, seconds):
        self.now += LAUNCH
        start = max(self.now, self.busy_until.get(device, 0.0))
        self.busy_until[device] = start + seconds

    def synchronize(self, device):
        self.syncs.append(device)
        self.now = max(self.now, self.busy_until.get(device, 0.0))


class Device:
    def __init__(self, kind, index=None):
        self.type, self.index = kind, index

    def __eq__(self, other):
        return (self.type, self.index) == (other.type, other.index)

    def __hash__(self):
        return hash((self.type, self.index))

    def __repr__(self):
        return "%s:%s" % (self.type, self.index)


class Tensor:
    def __init__(self, values, device, nbytes):
        self.values, self.device, self.nbytes = list(values), device, nbytes

    def __getitem__(self, i):
        return self.values[i]

    def __setitem__(self, i, value):
        self.values[i] = value


def fake_torch(clock, gpu_gflops):
    """torch with len(gpu_gflops) GPUs, each running matmuls at its GFLOP/s."""
    torch = types.ModuleType("torch")
    torch.float32, torch.int64, torch.bfloat16 = "float32", "int64", "bfloat16"
    torch.set_devices = []

    def device(kind, index=None):
        return Device(kind, index)

    def filled(n, dtype=None, device=None):
        return Tensor([0] * min(n, 4), device, n * 4)

    def tensor(values, dtype=None, device=None):
        return Tensor(values, device, 8 * len(values))

    def randn(rows, cols, dtype=None, device=None):
        return Tensor([0], device, rows * cols * 2)

    def matmul(a, b):
        clock.log.append("compute")
        size = int((a.nbytes // 2) ** 0.5)
        clock.queue(a.device, 2 * size ** 3 / (gpu_gflops[a.device.index] * 1e9))

    torch.device, torch.ones, torch.zeros, torch.tensor, torch.randn, torch.matmul = (
        device, filled, filled, tensor, randn, matmul)
    torch.cuda = types.SimpleNamespace(
        is_available=lambda: True, device_count=lambda: len(gpu_gflops),
        set_device=torch.set_devices.append, synchronize=clock.synchronize)
    return torch


def fake_dist(clock, gbps, gbps_back, latency_s, nodes, peer_figures):
    """torch.distributed for rank 0 of a 2-rank NCCL job (one rank per node), its peer on the other end of a
    link of ``gbps`` out, ``gbps_back`` in and ``latency_s``: a transfer is queued on the rank's device."""
    dist = types.ModuleType("torch.distributed")
    dist.backend = None

    def init_process_group(backend):
        dist.backend = backend

    def send(tensor, _peer):
        clock.log.append("link")
        clock.queue(tensor.device, latency_s + tensor.nbytes * 8 / (gbps * 1e9))

    def recv(tensor, _peer):
        clock.log.append("link")
        clock.queue(tensor.device, latency_s + tensor.nbytes * 8 / (gbps_back * 1e9))

    def all_gather_object(out, obj):
        if isinstance(obj, int):  # each rank's node index
            out[:] = [0, 1]
        else:
            out[:] = [obj, dict(peer_figures, node=nodes[1])]

    def all_reduce(buf):
        clock.log.append("all_reduce")
        clock.queue(buf.device, 2 * (latency_s + buf.nbytes * 8 / (gbps * 1e9)))

    dist.init_process_group = init_process_group
    dist.get_world_size = lambda: 2
    dist.get_backend = lambda: dist.backend
    dist.send, dist.recv = send, recv
    dist.all_gather_object = all_gather_object
    dist.all_reduce = all_reduce
    dist.broadcast = lambda tensor, src: clock.queue(tensor.device, latency_s)
    dist.barrier = lambda: None
    dist.destroy_process_group = lambda: None
    return dist


@pytest.fixture
def gpu_node(monkeypatch):
    """Run the probe as rank 0 (LOCAL_RANK 1: its GPU is cuda:1) of node n1 with two GPUs at 400 and 200
    TFLOP/s, over a link to n2 of 100 Gbit/s out, 50 Gbit/s back, 5 us latency."""
    clock = Clock()
    torch = fake_torch(clock, gpu_gflops=[400e3, 200e3])
    dist = fake_dist(clock, gbps=100.0, gbps_back=50.0, latency_s=5e-6, nodes=["n1", "n2"],
                     peer_figures={"links": [], "compute": {"gflops": 390e3, "devices": [390e3]}})
    torch.distributed = dist
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch.distributed", dist)
    monkeypatch.setattr(fabric_probe.time, "perf_counter", clock.perf_counter)
    monkeypatch.setenv("LOCAL_RANK", "1")
    args = fabric_probe.parse_args(["--probe-node", "n1", "--probe-nodes", json.dumps(["n1", "n2"]),
                                    "--schedule", json.dumps([[[0, 1]]]), "--seconds", "0.05"])
    return torch, dist, clock, fabric_probe.run(args)


def test_nccl_on_the_ranks_gpu(gpu_node):
    torch, dist, clock, result = gpu_node
    assert dist.backend == "nccl" and result["backend"] == "nccl" and result["device"] == "cuda"
    assert torch.set_devices == [Device("cuda", 1)]
    # the links and the all_reduce ran on the rank's GPU (cuda:1), the matmuls on each GPU
    assert Device("cuda", 1) in clock.syncs and Device("cuda", 0) in clock.syncs


def test_link_figures_are_the_links_not_the_launches(gpu_node):
    _torch, _dist, _clock, result = gpu_node
    there, back = result["links"]
    assert (there["a"], there["b"], back["a"], back["b"]) == ("n1", "n2", "n2", "n1")
    # 8 MiB there and 4 bytes back per step: 100 Gbit/s less two latencies and the queuing; back: 50
    assert 95.0 < there["gbps"] <= 100.0 and 47.5 < back["gbps"] <= 50.0
    # half the round trip of one element: the latency and the queuing
    assert 0.004 < there["latency_ms"] == back["latency_ms"] < 0.02
    assert 40.0 < result["allreduce_busbw_gbps"] <= 100.0


def test_node_compute_is_its_slowest_gpu(gpu_node):
    _torch, _dist, _clock, result = gpu_node
    compute = result["compute"]["n1"]
    assert compute["devices"] == [pytest.approx(400e3, rel=0.01), pytest.approx(200e3, rel=0.01)]
    assert compute["gflops"] == min(compute["devices"])
    assert result["compute"]["n2"]["gflops"] == 390e3


def test_compute_passes_are_apart_one_after_each_pass_of_the_links(gpu_node):
    # A dip of the node's own (a burst of another process for a second or two) must not spoil
    # both passes: they are separated by a pass of the links, not run back to back.
    _torch, _dist, clock, _result = gpu_node
    phases = [kind for i, kind in enumerate(clock.log) if i == 0 or clock.log[i - 1] != kind]
    assert phases == ["link", "compute", "link", "compute", "all_reduce"]
