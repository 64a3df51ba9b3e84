"""The fabric verdict on probe results (tests/fixtures/fabric/<case>.json): flagged nodes, the gate, the matrix."""
import json

import pytest

from ansible_collections.multinode.training.plugins.module_utils._fabric.verdict import (
    FabricError,
    decide,
    matrix,
    verdict,
)

from ....conftest import FIXTURES

N3 = ["node1", "node2", "node3"]


def load(case):
    return json.loads((FIXTURES / "fabric" / (case + ".json")).read_text())


def test_healthy_nothing_flagged():
    out = verdict(load("healthy3"), N3, "gate", 0.5)
    assert out["flagged"] == {}
    assert out["action"] == "ok" and out["keep"] == N3 and out["drop"] == []
    assert out["median"]["gbps"] == 9.65 and out["median"]["gflops"] == 41.2


def test_slow_link_and_slow_cpu_are_named_with_figures():
    out = verdict(load("delay1_cpu3"), N3, "warn", 0.5)
    assert sorted(out["flagged"]) == ["node1", "node3"]
    # node1: both of its links slow (two of the three links: a median over links would miss it)
    assert len(out["flagged"]["node1"]) == 2
    assert "link node1 -> node2: 0.31 Gbit/s < 0.5 x median 3.19" in out["flagged"]["node1"][0]
    assert "latency 20.4 ms" in out["flagged"]["node1"][0]
    assert out["flagged"]["node3"] == ["compute 11.8 GFLOP/s < 0.5 x median 40.1"]
    assert out["action"] == "warn" and out["keep"] == N3
    assert out["summary"][0].startswith("node1: link node1 -> node2")


def test_gate_fails_fixed_count_and_drops_in_elastic_range():
    result = load("delay1")
    assert verdict(result, N3, "gate", 0.5, nnodes="")["action"] == "fail"
    assert verdict(result, N3, "gate", 0.5, nnodes="3")["action"] == "fail"
    elastic = verdict(result, N3, "gate", 0.5, nnodes="2:3")
    assert (elastic["action"], elastic["keep"], elastic["drop"]) == ("drop", ["node2", "node3"], ["node1"])
    # two bad nodes of three: a 2:3 job cannot keep two good ones
    assert verdict(load("delay1_cpu3"), N3, "gate", 0.5, nnodes="2:3")["action"] == "fail"
    assert verdict(result, N3, "off", 0.5)["action"] == "ok"


def test_bad_cable_between_good_nodes_names_both_ends():
    nodes = ["n%d" % i for i in range(1, 9)]
    out = verdict(load("badcable8"), nodes, "gate", 0.5, nnodes="6:8")
    assert sorted(out["flagged"]) == ["n3", "n6"]
    assert out["drop"] == ["n3", "n6"] and len(out["keep"]) == 6


def _both_ways(links, slow_sender=None, slow_gbps=0.02):
    """Each link of ``links`` in both directions, the ones ``slow_sender`` sends at ``slow_gbps``."""
    out = []
    for link in links:
        for a, b in ((link["a"], link["b"]), (link["b"], link["a"])):
            out.append(dict(link, a=a, b=b, gbps=slow_gbps if a == slow_sender else link["gbps"]))
    return out


@pytest.mark.parametrize("node", N3)
def test_a_nodes_slow_egress_is_named_whichever_node(node):
    # tc tbf on one node's egress: what it sends is slow, what it receives is not. The probe once
    # measured each pair from the lower node only, and missed node3's egress.
    result = load("healthy3")
    result["links"] = _both_ways(result["links"], slow_sender=node)
    out = verdict(result, N3, "gate", 0.5)
    assert list(out["flagged"]) == [node]
    assert all(reason.startswith("link %s -> " % node) for reason in out["flagged"][node])
    assert len(out["flagged"][node]) == 2


def test_a_slow_egress_that_slows_its_ingress_partly_names_that_node_alone():
    # the acknowledgements of what node1 receives leave through its slow egress: where that slows
    # what it receives, one link below the threshold and one above, its best incoming link not
    # slow: node1 alone, not node2 as the far end of a bad cable
    result = load("healthy3")
    result["links"] = _both_ways(result["links"], slow_sender="node1")
    for link in result["links"]:
        if link["b"] == "node1":
            link["gbps"] = {"node2": 2.0, "node3": 5.5}[link["a"]]
    out = verdict(result, N3, "gate", 0.5)
    assert list(out["flagged"]) == ["node1"]
    assert "link node2 -> node1: 2 Gbit/s < 0.5 x median" in " ".join(out["flagged"]["node1"])


def test_a_nodes_slow_ingress_is_named_on_the_receiver():
    result = load("healthy3")
    result["links"] = [dict(link, gbps=0.02) if link["b"] == "node2" else link
                       for link in _both_ways(result["links"])]
    out = verdict(result, N3, "gate", 0.5)
    assert list(out["flagged"]) == ["node2"]
    assert sorted(out["flagged"]["node2"]) == [
        "link node1 -> node2: 0.02 Gbit/s < 0.5 x median 9.65",
        "link node3 -> node2: 0.02 Gbit/s < 0.5 x median 9.65"]


def test_matrix_rows_send_columns_receive():
    result = load("healthy3")
    result["links"] = _both_ways(result["links"], slow_sender="node3")
    lines = matrix(result, {})
    # node3 sends slowly to node1 and node2, receives from them at their figures
    assert lines[3].split() == ["node3", "0.02", "(0.065)", "0.02", "(0.09)", "-"]
    assert lines[1].split() == ["node1", "-", "9.8", "(0.071)", "10.4", "(0.065)"]


def _h100_cluster(link_down=None, slow_gpu=None):
    """Four nodes shaped like H100 SXM nodes with one 400 Gb/s NDR NIC per GPU (not recorded here: there is
    no GPU cluster to record from): one NCCL rank per node, about 370 Gbit/s each way between two
    nodes and 640-660 TFLOP/s of bf16 matmul, a few per cent apart; ``link_down``'s NIC trained down
    to 200 Gb/s (185 Gbit/s each way), ``slow_gpu`` power-capped to 0.7 of the others."""
    nodes = ["gpu1", "gpu2", "gpu3", "gpu4"]
    jitter = [1.0, 0.97, 1.02, 0.99, 1.01, 0.98]
    links = []
    for i, (a, b) in enumerate([(a, b) for a in nodes for b in nodes if a < b]):
        for x, y in ((a, b), (b, a)):
            gbps = 370.0 * jitter[i] * (0.5 if link_down in (x, y) else 1.0)
            links.append({"a": x, "b": y, "gbps": round(gbps, 1), "latency_ms": 0.012})
    compute = {n: {"gflops": g * (0.7 if n == slow_gpu else 1.0)}
               for n, g in zip(nodes, [652e3, 641e3, 660e3, 648e3])}
    return nodes, {"nodes": nodes, "backend": "nccl", "device": "cuda", "links": links, "compute": compute}


def test_default_ratio_flags_a_half_rate_link_and_a_gpu_at_0_7_on_dedicated_nodes():
    nodes, healthy = _h100_cluster()
    assert verdict(healthy, nodes, "gate")["flagged"] == {}
    nodes, faulty = _h100_cluster(link_down="gpu4", slow_gpu="gpu2")
    out = verdict(faulty, nodes, "gate")
    assert sorted(out["flagged"]) == ["gpu2", "gpu4"]
    assert out["flagged"]["gpu2"] == ["compute 4.49e+05 GFLOP/s < 0.8 x median 6.5e+05"]
    assert len(out["flagged"]["gpu4"]) == 6  # its three links, both ways
    # the ratio it replaces let both through
    assert verdict(faulty, nodes, "gate", 0.5)["flagged"] == {}


def test_absolute_threshold_and_two_nodes():
    result = load("two_cpu_slow")
    # two nodes: one link, no relative link rule; the absolute one applies
    assert "a" not in verdict(result, ["a", "b"], "warn", 0.5)["flagged"]
    out = verdict(result, ["a", "b"], "warn", 0.5, min_gbps=25)
    assert out["flagged"]["a"] == ["link a -> b: 9.5 Gbit/s < train_fabric_min_gbps 25"]
    # compute: b at 12 against a median of 26
    assert out["flagged"]["b"][-1] == "compute 12 GFLOP/s < 0.5 x median 26"
    assert verdict(load("healthy3"), N3, "warn", 0.5, min_gbps=9.5)["flagged"] == {
        "node2": ["link node2 -> node3: 8.9 Gbit/s < train_fabric_min_gbps 9.5"],
        "node3": ["link node2 -> node3: 8.9 Gbit/s < train_fabric_min_gbps 9.5"]}


def test_a_node_without_result_is_flagged():
    out = verdict(load("healthy3"), N3 + ["node4"], "gate", 0.5, nnodes="3:4")
    assert out["flagged"] == {"node4": ["no result (the probe did not run there)"]}
    assert out["drop"] == ["node4"]


def test_matrix_text():
    result = load("delay1_cpu3")
    lines = matrix(result, {"node1": [], "node3": []})
    assert lines[0].split() == ["Gbit/s", "(latency", "ms)", "node1", "node2", "node3"]
    assert lines[1].split() == ["node1*", "-", "0.31", "(20.4)", "0.29", "(20.6)"]
    assert lines[3].split() == ["node3*", "0.29", "(20.6)", "6.1", "(0.2)", "-"]
    assert lines[4].split() == ["GFLOP/s", "40.1", "41", "11.8"]


@pytest.mark.parametrize("ratio", [0, 1, 1.5, -0.2])
def test_ratio_out_of_range(ratio):
    with pytest.raises(FabricError, match="train_fabric_ratio"):
        verdict(load("healthy3"), N3, "warn", ratio)


def test_unknown_mode_and_bad_result():
    with pytest.raises(FabricError, match="train_fabric_check='loud'"):
        decide({"a": ["x"]}, ["a"], "loud", "")
    with pytest.raises(FabricError, match="expected a mapping with 'nodes'"):
        verdict({"links": []}, N3)
    with pytest.raises(FabricError, match="names a node not in"):
        verdict({"nodes": ["a"], "links": [{"a": "a", "b": "z", "gbps": 1, "latency_ms": 1}]}, ["a"])


@pytest.mark.parametrize("case, nodes", [
    # molecule default, 3 containers, no fault (fabric_check.yml, gate)
    ("recorded_cluster_ok", ["default-node1", "default-node2", "default-node3"]),
    # 3 probes on one loaded 2-core host: one node's latency at 1.9 ms against 0.1 ms
    ("recorded_loaded_host_ok", N3),
    # molecule default, no fault, a loaded host: node2-node3 at 1.2 against 2.6 and 2.8 Gbit/s, and at
    # 6.55 against 8.77 and 13.5 (a reference from each node's best link would flag both)
    ("recorded_cluster_noisy0", ["default-node1", "default-node2", "default-node3"]),
    ("recorded_cluster_noisy1", ["default-node1", "default-node2", "default-node3"]),
])
def test_recorded_without_fault_no_false_alarm(case, nodes):
    out = verdict(load(case), nodes, "gate", 0.5)
    assert out["flagged"] == {} and out["action"] == "ok"


def test_latency_jitter_below_the_slack_is_not_slow():
    result = load("recorded_loaded_host_ok")
    assert max(link["latency_ms"] for link in result["links"]) > 1.5
    # 20 ms (netem) is slow, whatever the ratio
    result["links"][0]["latency_ms"] = 20.0
    assert "node1" in verdict(result, N3, "warn", 0.5)["flagged"]


def test_headline_above_the_matrix():
    out = verdict(load("delay1"), N3, "warn", 0.5)
    assert out["headline"] == "gloo on cpu, 3.2 s; all_reduce bus bandwidth 2.0 Gbit/s"
    assert verdict({"nodes": []}, N3, "warn", 0.5)["headline"] == (
        "no result on -, - s; all_reduce bus bandwidth None Gbit/s")


# ------------------------------------------------------------------ the line rate
def _line(nodes, gbps=10.0, via="eth0", transport="socket"):
    return {n: {"gbps": gbps, "via": via, "transport": transport} for n in nodes}


def _two_nodes(there, back, busbw=4.1, line=10.0):
    """Two containers over veths (sysfs speed 10000), as molecule's fabric step runs them."""
    return {"nodes": ["a", "b"], "backend": "gloo", "device": "cpu", "allreduce_busbw_gbps": busbw,
            "links": [{"a": "a", "b": "b", "gbps": there, "latency_ms": 0.09},
                      {"a": "b", "b": "a", "gbps": back, "latency_ms": 0.09}],
            "compute": {"a": {"gflops": 180.0}, "b": {"gflops": 176.0}}, "line": _line(["a", "b"], line)}


def test_two_nodes_one_slow_direction_is_flagged_against_the_line_rate():
    assert verdict(_two_nodes(9.2, 8.6), ["a", "b"], "gate")["flagged"] == {}
    # a 50 Mbit/s shaper on a's egress: no median to compare with, the line rate judges it; a's egress
    # or b's ingress, with one link each way both are named
    out = verdict(_two_nodes(0.047, 9.2), ["a", "b"], "gate")
    why = "link a -> b: 0.047 Gbit/s < 0.25 x line rate (a eth0 10 Gbit/s)"
    assert out["flagged"] == {"a": [why], "b": [why]} and out["action"] == "fail"
    # the rule off: nothing but the medians, which two nodes do not have
    assert verdict(_two_nodes(0.047, 9.2), ["a", "b"], "gate", line_ratio=0)["flagged"] == {}


def test_a_socket_transport_is_judged_against_at_most_socket_gbps():
    # gloo between 100 GbE nodes: one TCP stream per pair, 18 Gbit/s, is not slow
    assert verdict(_two_nodes(18.0, 17.5, busbw=12.0, line=100.0), ["a", "b"], "gate")["flagged"] == {}
    # the pair's traffic over a 1 GbE management interface instead: slow
    out = verdict(_two_nodes(0.94, 0.93, busbw=0.9, line=100.0), ["a", "b"], "gate")
    assert out["flagged"]["a"][0] == (
        "link a -> b: 0.94 Gbit/s < 0.25 x line rate (a eth0 100 Gbit/s, over sockets at most 10)")
    assert out["cluster"] == [
        "all_reduce bus bandwidth 0.9 Gbit/s < 0.25 x line rate (a eth0 100 Gbit/s, over sockets at most 10, the slowest)"]


def test_nccl_fallen_back_to_sockets_on_infiniband_is_slow_on_every_node():
    nodes, healthy = _h100_cluster()
    healthy.update(line=_line(nodes, 400.0, "mlx5_0:1 (InfiniBand)", "rdma"), allreduce_busbw_gbps=290.0)
    assert verdict(healthy, nodes, "gate")["flagged"] == {}
    # every link at TCP's 20 Gbit/s: equal, so no median sees it; the line rate does
    fallen = dict(healthy, links=[dict(link, gbps=20.0) for link in healthy["links"]], allreduce_busbw_gbps=18.0)
    out = verdict(fallen, nodes, "gate", nnodes="2:4")
    assert sorted(out["flagged"]) == nodes and out["action"] == "fail"
    assert "20 Gbit/s < 0.25 x line rate (gpu1 mlx5_0:1 (InfiniBand) 400 Gbit/s)" in out["flagged"]["gpu1"][0]


def test_a_port_trained_down_is_named_by_its_line_rate_with_two_nodes_too():
    nodes, faulty = _h100_cluster(link_down="gpu4")
    faulty["line"] = dict(_line(nodes, 400.0, "mlx5_0:1 (InfiniBand)", "rdma"),
                          gpu4={"gbps": 200.0, "via": "mlx5_0:1 (InfiniBand)", "transport": "rdma"})
    out = verdict(faulty, nodes, "gate")
    assert list(out["flagged"]) == ["gpu4"]
    assert out["flagged"]["gpu4"][-1] == (
        "line rate 200 Gbit/s (mlx5_0:1 (InfiniBand)) < 0.8 x the fastest node's 400")
    pair = _two_nodes(185.0, 185.0, busbw=180.0)
    pair["line"] = {"a": {"gbps": 400.0, "via": "mlx5_0:1", "transport": "rdma"},
                    "b": {"gbps": 200.0, "via": "mlx5_0:1", "transport": "rdma"}}
    assert list(verdict(pair, ["a", "b"], "gate")["flagged"]) == ["b"]


def test_a_slow_all_reduce_with_no_node_to_blame_fails_the_gate():
    # the case: every link fast both ways, the all_reduce at 0.0189 Gbit/s
    result = dict(load("healthy3"), allreduce_busbw_gbps=0.0189, line=_line(N3))
    result["links"] = _both_ways(result["links"])
    why = "all_reduce bus bandwidth 0.0189 Gbit/s < 0.25 x line rate (node1 eth0 10 Gbit/s, the slowest)"
    out = verdict(result, N3, "gate", 0.5, nnodes="2:3")
    assert (out["flagged"], out["cluster"], out["action"]) == ({}, [why], "fail")
    assert out["summary"] == ["all nodes: " + why]
    assert verdict(result, N3, "warn", 0.5)["action"] == "warn"
    # with a node flagged the elastic job drops it: the all_reduce ran through it
    result["links"] = _both_ways(result["links"], slow_sender="node1")
    out = verdict(result, N3, "gate", 0.5, nnodes="2:3")
    assert (out["action"], out["drop"], out["cluster"]) == ("drop", ["node1"], [why])


def test_an_unknown_line_rate_leaves_the_line_rules_out():
    result = _two_nodes(0.047, 9.2, busbw=0.01)
    result["line"]["b"] = {"gbps": None, "via": "eth0", "transport": "socket", "why": "no speed in sysfs (-1)"}
    out = verdict(result, ["a", "b"], "gate")
    assert (out["flagged"], out["cluster"], out["line"]) == ({}, [], {"a": 10.0})
    del result["line"]
    assert verdict(result, ["a", "b"], "gate")["flagged"] == {}


@pytest.mark.parametrize("line_ratio", [1, 1.5, -0.2])
def test_line_ratio_out_of_range(line_ratio):
    with pytest.raises(FabricError, match="train_fabric_line_ratio"):
        verdict(_two_nodes(9.2, 8.6), ["a", "b"], "warn", line_ratio=line_ratio)


def test_matrix_line_rate_row():
    result = _two_nodes(9.2, 8.6)
    result["line"]["b"]["gbps"] = None
    assert matrix(result, {})[-1].split() == ["line", "rate", "Gbit/s", "10", "-"]
    assert not matrix(load("healthy3"), {})[-1].startswith("line")
