"""Fabric detection and NCCL planning on recorded sysfs trees (tests/fixtures/sysfs/<case>)."""
import pathlib
import shutil

import pytest

from ansible_collections.multinode.training.plugins.module_utils._nccl.fabric import (
    FabricError,
    apply_overrides,
    launcher_env,
    odd_nodes,
    parse_version,
    plan,
)
from ansible_collections.multinode.training.plugins.module_utils._nccl.sysfs import (
    gid_ipv4,
    natural_key,
    parse_rate,
    read_gpu_state,
    read_sysfs,
)
from ansible_collections.multinode.training.plugins.module_utils._node import fabric_probe

FIXTURES = pathlib.Path(__file__).resolve().parents[4] / "fixtures"
SYSFS = FIXTURES / "sysfs"
PROC = FIXTURES / "proc"
IB8_HCA = "=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_4:1,mlx5_6:1,mlx5_7:1"


def detect(case):
    return read_sysfs(str(SYSFS / case))


def kinds(detected):
    return {p["name"]: p["kind"] for d in detected["devices"] for p in d["ports"]}


# --- detection -------------------------------------------------------------------------------

@pytest.mark.parametrize("case, expected", [
    ("ib8_storage", dict({"mlx5_%d:1" % i: "ib" for i in range(9)}, **{"mlx5_5:1": "down"})),
    ("roce_v2", {"mlx5_0:1": "roce", "mlx5_1:1": "roce"}),
    ("eth_only", {}),
    ("ib_bond", {"mlx5_0:1": "ib", "mlx5_1:1": "ib", "mlx5_bond_0:1": "roce"}),
])
def test_ports_are_classified(case, expected):
    assert kinds(detect(case)) == expected


def test_device_names_sort_naturally():
    names = [d["name"] for d in detect("ib8_storage")["devices"]]
    assert names == ["mlx5_%d" % i for i in range(9)]
    # Nodes with 10+ HCAs: mlx5_10 sorts after mlx5_9, not between mlx5_1 and mlx5_2.
    assert sorted(["mlx5_10", "mlx5_2", "mlx5_1", "mlx5_bond_0"], key=natural_key) == [
        "mlx5_1", "mlx5_2", "mlx5_10", "mlx5_bond_0"]


def test_down_port_keeps_its_states():
    port = next(p for d in detect("ib8_storage")["devices"] for p in d["ports"] if p["name"] == "mlx5_5:1")
    assert (port["state"], port["phys_state"], port["rate_gbps"]) == ("DOWN", "Polling", 10.0)


def test_ib_port_reads_rate_netdev_and_skips_empty_gids():
    port = detect("ib8_storage")["devices"][0]["ports"][0]
    assert port["rate"] == "400 Gb/sec (4X NDR)"
    assert port["rate_gbps"] == 400.0
    assert port["link_layer"] == "InfiniBand"
    assert port["netdev"] == "ibp0s0"
    assert [g["index"] for g in port["gids"]] == [0]          # gids/1..7 are all zero
    assert port["roce_version"] is None


def test_roce_port_reads_every_gid_with_type_and_ndev():
    port = detect("roce_v2")["devices"][0]["ports"][0]
    assert port["roce_version"] == "v2"
    assert port["netdev"] == "ens1f0np0"
    assert [(g["index"], g["type"], g["ndev"], g["ipv4"]) for g in port["gids"]] == [
        (0, "IB/RoCE v1", "ens1f0np0", None),
        (1, "RoCE v2", "ens1f0np0", None),
        (2, "IB/RoCE v1", "ens1f0np0.100", None),
        (3, "RoCE v2", "ens1f0np0.100", None),
        (4, "IB/RoCE v1", "ens1f0np0.100", "172.16.100.11"),
        (5, "RoCE v2", "ens1f0np0.100", "172.16.100.11"),
        (6, "IB/RoCE v1", "ens1f0np0", "10.10.10.11"),
        (7, "RoCE v2", "ens1f0np0", "10.10.10.11"),
    ]


def test_bond_netdev_and_lag_device_are_seen():
    detected = detect("ib_bond")
    assert detected["netdevs"]["bond0"]["bond"] is True
    assert detected["netdevs"]["bond0"]["slaves"] == ["ens2f0np0", "ens2f1np1"]
    assert detected["netdevs"]["ib0"]["type"] == "infiniband"
    lag = next(d for d in detected["devices"] if d["name"] == "mlx5_bond_0")
    assert lag["ports"][0]["netdev"] == "bond0"                # from its GIDs, not its PF netdevs
    assert lag["netdevs"] == ["ens2f0np0", "ens2f1np1"]


def test_ethernet_only_has_no_infiniband_class():
    detected = detect("eth_only")
    assert detected["has_infiniband_class"] is False
    assert sorted(detected["netdevs"]) == ["eth0", "eth1", "lo"]


@pytest.mark.parametrize("case, expected", [
    ("ib8_storage", {"nvidia_driver": True, "gpu_count": 8, "peermem_loaded": False}),
    ("roce_v2", {"nvidia_driver": True, "gpu_count": 4, "peermem_loaded": True}),
    ("eth_only", {"nvidia_driver": False, "gpu_count": 0, "peermem_loaded": False}),
])
def test_gpu_and_peermem_state(case, expected):
    assert read_gpu_state(str(SYSFS / case), str(PROC / case)) == expected


# --- planning --------------------------------------------------------------------------------

@pytest.mark.parametrize("case, kwargs, fabric, settings", [
    ("ib8_storage", {"exclude": ["mlx5_8"], "cluster_interface": "eth0"}, "ib",
     {"NCCL_NET": "IB", "NCCL_IB_HCA": IB8_HCA, "NCCL_SOCKET_IFNAME": "=eth0"}),
    ("ib8_storage", {"exclude": ["mlx5_8"], "cluster_interface": "eth0", "forbid_socket_fallback": False}, "ib",
     {"NCCL_IB_HCA": IB8_HCA, "NCCL_SOCKET_IFNAME": "=eth0"}),
    ("roce_v2", {"cluster_interface": "eth0", "nccl_version": "2.18.6"}, "roce",
     {"NCCL_NET": "IB", "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1", "NCCL_SOCKET_IFNAME": "=eth0",
      "NCCL_IB_GID_INDEX": "7"}),
    ("roce_v2", {"cluster_interface": "eth0", "nccl_version": "2.21.5"}, "roce",
     {"NCCL_NET": "IB", "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1", "NCCL_SOCKET_IFNAME": "=eth0"}),
    ("roce_v2", {"cluster_interface": "eth0", "nccl_version": "auto"}, "roce",
     {"NCCL_NET": "IB", "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1", "NCCL_SOCKET_IFNAME": "=eth0"}),
    ("roce_v2", {"cluster_interface": "eth0", "roce_gid_index": "always"}, "roce",
     {"NCCL_NET": "IB", "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1", "NCCL_SOCKET_IFNAME": "=eth0",
      "NCCL_IB_GID_INDEX": "7"}),
    ("roce_v2", {"cluster_interface": "eth0", "roce_gid_index": "never", "nccl_version": "2.18"}, "roce",
     {"NCCL_NET": "IB", "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1", "NCCL_SOCKET_IFNAME": "=eth0"}),
    ("eth_only", {"cluster_interface": "eth0"}, "socket",
     {"NCCL_NET": "Socket", "NCCL_SOCKET_IFNAME": "=eth0"}),
    ("ib_bond", {"exclude": ["*bond*"], "cluster_interface": "bond0"}, "ib",
     {"NCCL_NET": "IB", "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1", "NCCL_SOCKET_IFNAME": "=bond0"}),
    ("ib_bond", {"fabric": "roce", "cluster_interface": "bond0", "roce_gid_index": "always"}, "roce",
     {"NCCL_NET": "IB", "NCCL_IB_HCA": "=mlx5_bond_0:1", "NCCL_SOCKET_IFNAME": "=bond0",
      "NCCL_IB_GID_INDEX": "3"}),
    ("ib8_storage", {"fabric": "socket", "cluster_interface": "eth0"}, "socket",
     {"NCCL_NET": "Socket", "NCCL_SOCKET_IFNAME": "=eth0"}),
])
def test_plan_settings(case, kwargs, fabric, settings):
    result = plan(detect(case), node="n1", **kwargs)
    assert result["fabric"] == fabric
    assert result["settings"] == settings
    assert list(result["settings"]) == list(settings)           # order is the file's order


def test_ib8_plan_reports_down_and_excluded_ports():
    result = plan(detect("ib8_storage"), exclude=["mlx5_8"], cluster_interface="eth0", node="n1")
    assert result["down"] == [{"port": "mlx5_5:1", "state": "DOWN", "phys_state": "Polling"}]
    assert result["excluded"] == [{"port": "mlx5_8:1", "pattern": "mlx5_8"}]
    assert result["warnings"] == []
    assert result["signature"] == "ib x7 @ 400 Gb/sec (4X NDR)"


def test_storage_hca_not_excluded_is_used_and_warned_about():
    result = plan(detect("ib8_storage"), cluster_interface="eth0", node="gpu-node01")
    assert result["settings"]["NCCL_IB_HCA"] == IB8_HCA + ",mlx5_8:1"
    assert len(result["warnings"]) == 1
    assert "mlx5_8:1 (200 Gb/sec (4X HDR))" in result["warnings"][0]
    assert result["warnings"][0].startswith("gpu-node01: ")


def test_exclusion_matches_netdev_patterns():
    # bond0 is the netdev of mlx5_bond_0's GIDs: a netdev pattern excludes the LAG device.
    result = plan(detect("ib_bond"), exclude=["bond?"], cluster_interface="bond0", node="n1")
    assert result["excluded"] == [{"port": "mlx5_bond_0:1", "pattern": "bond?"}]
    assert result["unused"] == []


def test_unexcluded_roce_lag_next_to_ib_is_reported_unused():
    result = plan(detect("ib_bond"), cluster_interface="bond0", node="n1")
    assert result["fabric"] == "ib"
    assert result["unused"] == ["mlx5_bond_0:1"]
    assert any("mlx5_bond_0:1" in w and "nccl_tuning_exclude_devices" in w for w in result["warnings"])


def test_gid_index_found_even_when_not_set():
    result = plan(detect("roce_v2"), cluster_interface="eth0", node="n1")
    assert result["gid_index"] == 7
    assert "NCCL_IB_GID_INDEX" not in result["settings"]


def test_gid_index_that_differs_between_ports_is_not_set(tmp_path):
    # Derived from the recording: mlx5_1's IPv4 GID on its data netdev becomes RoCE v1 only,
    # so its best RoCE v2 IPv4 GID is the VLAN one (index 5) while mlx5_0 keeps index 7.
    root = tmp_path / "sysfs"
    shutil.copytree(str(SYSFS / "roce_v2"), str(root))
    (root / "class/infiniband/mlx5_1/ports/1/gid_attrs/types/7").write_text("IB/RoCE v1\n")
    result = plan(read_sysfs(str(root)), cluster_interface="eth0", roce_gid_index="always", node="n1")
    assert "NCCL_IB_GID_INDEX" not in result["settings"]
    assert any("mlx5_0:1=7, mlx5_1:1=5" in w for w in result["warnings"])


def test_no_cluster_interface_leaves_socket_ifname_unset_with_warning():
    result = plan(detect("eth_only"), node="n1")
    assert result["settings"] == {"NCCL_NET": "Socket"}
    assert any("NCCL_SOCKET_IFNAME left unset" in w for w in result["warnings"])


def test_overrides_replace_add_and_remove():
    result = plan(detect("ib8_storage"), exclude=["mlx5_8"], cluster_interface="eth0", node="n1", overrides={
        "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1", "NCCL_NET": None, "NCCL_IB_QPS_PER_CONNECTION": 4})
    assert result["settings"] == {"NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1", "NCCL_SOCKET_IFNAME": "=eth0",
                                  "NCCL_IB_QPS_PER_CONNECTION": "4"}


def test_excluding_hca_override_on_existing_device_is_accepted():
    result = plan(detect("ib8_storage"), cluster_interface="eth0", node="n1", overrides={"NCCL_IB_HCA": "^=mlx5_8"})
    assert result["settings"]["NCCL_IB_HCA"] == "^=mlx5_8"


# --- bad input -------------------------------------------------------------------------------

def test_absent_sysfs_root(tmp_path):
    with pytest.raises(FabricError, match="sysfs root %s does not exist" % (tmp_path / "none")):
        read_sysfs(str(tmp_path / "none"))


def test_tree_without_class_net_is_refused():
    with pytest.raises(FabricError, match="has no class/net: not a sysfs tree"):
        read_sysfs(str(FIXTURES / "nccl_logs"))


@pytest.mark.parametrize("case, fabric, names", [
    ("eth_only", "ib", ["no RDMA device (no class/infiniband under"]),
    ("roce_v2", "ib", ["mlx5_0:1 (Ethernet, ACTIVE, 100 Gb/sec (4X EDR))", "mlx5_1:1 (Ethernet"]),
    ("ib8_storage", "roce", ["mlx5_0:1 (InfiniBand, ACTIVE, 400 Gb/sec (4X NDR))", "mlx5_5:1 (InfiniBand, DOWN"]),
    ("ib_bond", "roce", ["mlx5_bond_0:1 (Ethernet, ACTIVE", "excluded: mlx5_bond_0:1 (excluded by '*bond*')"]),
])
def test_forced_fabric_the_node_lacks_names_node_value_and_devices(case, fabric, names):
    with pytest.raises(FabricError) as err:
        plan(detect(case), fabric=fabric, exclude=["*bond*"], cluster_interface="eth0" if case != "ib_bond"
             else "bond0", node="node7")
    message = str(err.value)
    assert message.startswith("node7: nccl_tuning_fabric=%s " % fabric)
    for name in names:
        assert name in message


@pytest.mark.parametrize("value, token", [
    ("=mlx5_9:1", "mlx5_9:1"),
    ("=mlx5_0:2", "mlx5_0:2"),
    ("mlx5_0:1,mlx4_0", "mlx4_0"),
])
def test_hca_override_naming_missing_device_fails(value, token):
    with pytest.raises(FabricError) as err:
        plan(detect("ib8_storage"), cluster_interface="eth0", node="node7", overrides={"NCCL_IB_HCA": value})
    message = str(err.value)
    assert message.startswith("node7: NCCL_IB_HCA override %r names %r" % (value, token))
    assert "mlx5_0:1 (InfiniBand, ACTIVE, 400 Gb/sec (4X NDR))" in message


def one_port_node(device, port):
    """What read_sysfs gives for a node with one ACTIVE InfiniBand port."""
    return {"root": "/sys", "has_infiniband_class": True, "netdevs": ["eth0"], "devices": [{
        "name": device, "netdevs": [], "ports": [{
            "name": "%s:%d" % (device, port), "device": device, "port": port, "link_layer": "InfiniBand",
            "state": "ACTIVE", "phys_state": "LinkUp", "rate": "400 Gb/sec (4X NDR)", "netdev": "", "gids": [],
            "kind": "ib"}]}]}


# One entry of NCCL_IB_HCA, a node's one port, and whether the entry names that port (NCCL's reading).
HCA_CASES = [
    ("mlx5_1", "mlx5_10", 1, True),      # a prefix without '='
    ("=mlx5_1", "mlx5_10", 1, False),    # '=': whole names
    ("=mlx5_1", "mlx5_1", 1, True),
    ("mlx5", "mlx5_8", 1, True),
    ("=mlx5", "mlx5_8", 1, False),
    ("mlx5_0:1", "mlx5_0", 1, True),     # a port named
    ("mlx5_0:2", "mlx5_0", 1, False),
    ("=mlx5_0:1", "mlx5_0", 1, True),
    ("mlx5_0:01", "mlx5_0", 1, True),    # the port by its number
    ("mlx5_0:x", "mlx5_0", 1, False),
    (" mlx5_0 ,", "mlx5_0", 1, True),    # blanks and an empty entry
    ("mlx4_0", "mlx5_0", 1, False),
    ("^mlx5_0", "mlx5_0", 1, True),      # '^' excludes what it names
    ("^=mlx5_1", "mlx5_10", 1, False),
    ("^=mlx5_1:1", "mlx5_1", 1, True),
    ("^mlx5_0:2", "mlx5_0", 1, False),
]


@pytest.mark.parametrize("spec, device, port, names_it", HCA_CASES)
def test_the_probe_and_the_override_check_read_nccl_ib_hca_alike(spec, device, port, names_it):
    """The one grammar (_node/fabric_probe.parse_hca) in its two uses: the probe lets NCCL use the port when
    the entry names it (or, after '^', when it does not), and nccl_fabric accepts the override on a node
    with that one port exactly when the entry names it."""
    exclude = spec.startswith("^")
    assert fabric_probe.hca_allows(spec, device, str(port)) is (names_it != exclude)
    try:
        settings = apply_overrides({}, {"NCCL_IB_HCA": spec}, one_port_node(device, port), "n1")
    except FabricError as exc:
        assert not names_it, exc
        assert "NCCL_IB_HCA override %r names" % spec in str(exc)
    else:
        assert names_it and settings == {"NCCL_IB_HCA": spec}


def test_socket_ifname_override_naming_missing_interface_fails():
    with pytest.raises(FabricError, match=r"node7: NCCL_SOCKET_IFNAME override '=ens9' .* it has: eth0, eth1, lo"):
        plan(detect("eth_only"), cluster_interface="eth0", node="node7", overrides={"NCCL_SOCKET_IFNAME": "=ens9"})


def test_cluster_interface_missing_on_node_fails():
    with pytest.raises(FabricError, match=r"node7: cluster interface 'bond0' .* it has: eth0, eth1, lo"):
        plan(detect("eth_only"), cluster_interface="bond0", node="node7")


@pytest.mark.parametrize("kwargs, name", [({"fabric": "rdma"}, "nccl_tuning_fabric"),
                                          ({"roce_gid_index": "yes"}, "roce_gid_index")])
def test_invalid_choices_are_refused(kwargs, name):
    with pytest.raises(FabricError, match="node7: %s=" % name):
        plan(detect("eth_only"), node="node7", **kwargs)


# --- helpers ---------------------------------------------------------------------------------

@pytest.mark.parametrize("gid, ipv4", [
    ("0000:0000:0000:0000:0000:ffff:0a00:0001", "10.0.0.1"),
    ("0000:0000:0000:0000:0000:ffff:ac10:640b", "172.16.100.11"),
    ("fe80:0000:0000:0000:0ac0:ebff:fe3a:1b2c", None),
    ("fd00:0000:0000:0000:0000:ffff:0a00:0001", None),
])
def test_gid_ipv4(gid, ipv4):
    assert gid_ipv4(gid) == ipv4


@pytest.mark.parametrize("text, version", [("2.18.6", (2, 18, 6)), ("2.21", (2, 21, 0)),
                                           ("v2.19.3-1", (2, 19, 3)), ("auto", None), ("", None)])
def test_parse_version(text, version):
    assert parse_version(text) == version


@pytest.mark.parametrize("text, rate", [("400 Gb/sec (4X NDR)", 400.0), ("2.5 Gb/sec (1X SDR)", 2.5), ("", None)])
def test_parse_rate(text, rate):
    """One reading of a port's rate: the nodes' fabric probe and nccl_fabric's sysfs reading."""
    assert parse_rate is fabric_probe.parse_rate
    assert parse_rate(text) == rate


def test_odd_nodes_names_the_node_with_another_fabric():
    result = odd_nodes({"n1": "ib x8 @ 400", "n2": "ib x8 @ 400", "n3": "ib x7 @ 400", "n4": "socket"})
    assert result["majority"] == "ib x8 @ 400"
    assert result["odd"] == {"n3": "ib x7 @ 400", "n4": "socket"}
    assert result["groups"] == {"ib x8 @ 400": ["n1", "n2"], "ib x7 @ 400": ["n3"], "socket": ["n4"]}


def test_odd_nodes_all_alike_and_empty():
    assert odd_nodes({"n1": "roce x2", "n2": "roce x2"})["odd"] == {}
    assert odd_nodes({}) == {"majority": None, "odd": {}, "groups": {}}


def test_launcher_env():
    assert launcher_env("/etc/nccl.conf") == {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}
    assert launcher_env("/opt/nccl.conf", {"OMP_NUM_THREADS": 8, "TORCH_NCCL_ASYNC_ERROR_HANDLING": None},
                        debug="INFO") == {"NCCL_CONF_FILE": "/opt/nccl.conf", "NCCL_DEBUG": "INFO",
                                          "OMP_NUM_THREADS": "8"}
    assert launcher_env("/etc/nccl.conf", async_error_handling=False) == {}
