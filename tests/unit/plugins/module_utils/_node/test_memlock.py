"""The locked memory a job gets, and the warning for an RDMA node where it is limited (_node.torchrun)."""
from __future__ import annotations

import resource

from ansible_collections.multinode.training.plugins.module_utils._node import torchrun as t

# /proc/self/status of root, recorded: on this test host (a sandbox without CAP_SYS_RESOURCE, bit 24)
# and in a container of Docker's defaults (`docker run multinode-training/debian:bookworm grep Cap
# /proc/self/status`); a host's root holds every capability up to CAP_LAST_CAP 40 (linux/capability.h).
STATUS_SANDBOX = "Name:\tgrep\nCapInh:\t0000000000000000\nCapPrm:\t000001fffeffffff\nCapEff:\t000001fffeffffff\n"
STATUS_DOCKER = "Name:\tgrep\nCapInh:\t0000000000000000\nCapPrm:\t00000000a80425fb\nCapEff:\t00000000a80425fb\n"
STATUS_HOST_ROOT = "Name:\tgrep\nCapInh:\t0000000000000000\nCapPrm:\t000001ffffffffff\nCapEff:\t000001ffffffffff\n"
EIGHT_MIB = 8 << 20  # `ulimit -Hl` in that container: 8192 (KiB)


def test_cap_sys_resource_read_from_the_status_line():
    assert t.has_capability(STATUS_HOST_ROOT, t.CAP_SYS_RESOURCE)
    assert not t.has_capability(STATUS_DOCKER, t.CAP_SYS_RESOURCE)
    assert not t.has_capability(STATUS_SANDBOX, t.CAP_SYS_RESOURCE)
    assert t.has_capability(STATUS_DOCKER, 0)  # CAP_CHOWN, which Docker keeps
    assert not t.has_capability("", t.CAP_SYS_RESOURCE)


def test_job_memlock_is_unlimited_only_where_root_may_lift_it(tmp_path):
    sysfs = tmp_path / "infiniband"
    sysfs.mkdir()
    for name in ("mlx5_1", "mlx5_0"):
        (sysfs / name).mkdir()
    status = tmp_path / "status"
    status.write_text(STATUS_DOCKER)
    assert t.job_memlock(str(status), str(sysfs), hard=EIGHT_MIB) == {"rdma": ["mlx5_0", "mlx5_1"], "limit": EIGHT_MIB}
    assert t.job_memlock(str(status), str(sysfs), hard=resource.RLIM_INFINITY)["limit"] is None
    status.write_text(STATUS_HOST_ROOT)
    assert t.job_memlock(str(status), str(sysfs), hard=EIGHT_MIB)["limit"] is None
    assert t.job_memlock(str(status), str(tmp_path / "none"), hard=EIGHT_MIB)["rdma"] == []


def test_the_warning_names_node_devices_limit_and_the_way_out():
    limited = {"rdma": ["mlx5_0", "mlx5_1"], "limit": EIGHT_MIB}
    assert t.memlock_warning("node1", limited, "ssh", "alice") == (
        "node1: NCCL over InfiniBand/RoCE (mlx5_0, mlx5_1) registers the job's buffers as locked memory, and the job "
        "gets 8 MiB of it here (the hard limit of alice; root raises it only with CAP_SYS_RESOURCE): NCCL may fail "
        "registering memory (ibv_reg_mr) or fall back to sockets; valid: -b on a host where root holds "
        "CAP_SYS_RESOURCE (a container: --ulimit memlock=-1), or an unlimited memlock hard limit for alice "
        "(nccl_tuning_system_conf: true with nccl_tuning_user, then a new login)")
    assert "64 KiB of it" in t.memlock_warning("n", dict(limited, limit=64 << 10), "slurm")
    assert "mlx5_3, ..." in t.memlock_warning("n", dict(limited, rdma=["mlx5_%d" % i for i in range(6)]))
    # no RDMA device, or no limit: nothing to say
    assert t.memlock_warning("node1", {"rdma": [], "limit": EIGHT_MIB}) == ""
    assert t.memlock_warning("node1", {"rdma": ["mlx5_0"], "limit": None}) == ""
    assert t.memlock_warning("node1", None) == ""
