# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The job report's model from the collected job directories (``<runs>/<job id>/<host>/``): every rank's
start and exit (the rank wrapper's ``exits/``), restarts, the first failure across the nodes, lost
nodes, the samples (_node.sampler's ``samples/``), step times and the straggler verdict. Pure: reads
files, returns a dict the writer (_report.html) draws."""
from __future__ import annotations

import glob
import json
import os

from ansible_collections.multinode.training.plugins.module_utils._report import arrival as _arrival
from ansible_collections.multinode.training.plugins.module_utils._report import steps as _steps
from ansible_collections.multinode.training.plugins.module_utils._report import straggler


def _json(path):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def _jsonl(path):
    out = []
    try:
        with open(path) as handle:
            for line in handle:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue  # a line cut by a killed rank
    except OSError:
        pass
    return out


def rank_records(node_dir):
    """{"<restart>_<local rank>": {start, exit}} from the rank wrapper's files."""
    ranks = {}
    for path in glob.glob(os.path.join(node_dir, "exits", "*_*.*")):
        key, kind = os.path.basename(path).rsplit(".", 1)
        if kind in ("start", "exit"):
            ranks.setdefault(key, {})[kind] = _json(path)
    return ranks


def node_model(node_dir, patterns):
    """One node: its job and result files, ranks, samples and step lines by rank key."""
    ranks = rank_records(node_dir)
    samples, rank_steps = {}, {}
    for path in glob.glob(os.path.join(node_dir, "samples", "*.jsonl")):
        key = os.path.basename(path)[:-len(".jsonl")]
        records = _jsonl(path)
        samples[key] = [r for r in records if r.get("kind") == "proc"]
        rank_steps[key] = _steps.steps([r for r in records if r.get("kind") == "line"], patterns)
    return {"job": _json(os.path.join(node_dir, "job.json")) or {},
            "watch": _json(os.path.join(node_dir, "watch_state.json")) or {},
            "result": _json(os.path.join(node_dir, "result.json")),
            "ranks": ranks, "samples": samples, "steps": rank_steps}


def is_rank0(node, key):
    """Whether the rank of ``key`` ("<restart>_<local rank>") on ``node`` was global rank 0 (its start record)."""
    return (node["ranks"].get(key, {}).get("start") or {}).get("rank") == 0


def counted_steps(nodes):
    """The steps each rank is counted with: its own step lines, else (DeepSpeed and the Hugging Face Trainer
    print theirs on global rank 0 only) global rank 0's of the same attempt - the ranks of a synchronous job
    step together, and the nodes' clocks agree to NTP's milliseconds against 2 s samples.
    -> ({host: {rank key: steps}}, [hosts none of whose ranks printed a step line])."""
    leader = {}
    for node in nodes.values():
        for key, steps in node["steps"].items():
            if steps and is_rank0(node, key):
                leader[key.split("_")[0]] = steps
    counted = {host: {key: node["steps"].get(key) or leader.get(key.split("_")[0], [])
                      for key in set(node["steps"]) | set(node["samples"])}
               for host, node in nodes.items()}
    return counted, [host for host, node in nodes.items() if leader and not any(node["steps"].values())]


def last_steps(nodes):
    """{host: the highest step its ranks' step lines reached, or None} (what the straggler line says it saw)."""
    return {host: max((s["step"] for steps in node["steps"].values() for s in steps), default=None)
            for host, node in nodes.items()}


def events(nodes):
    """Every start and exit, in time order: {t, host, key, rank, restart, kind, exitcode, message}."""
    out = []
    for host, node in nodes.items():
        for key, record in node["ranks"].items():
            for kind in ("start", "exit"):
                data = record.get(kind)
                if data:
                    out.append({"t": data.get("time", 0), "host": host, "key": key, "rank": data.get("rank"),
                                "restart": data.get("restart", 0), "kind": kind,
                                "exitcode": data.get("exitcode"), "message": data.get("message")})
    return sorted(out, key=lambda e: (e["t"], e["host"], e["key"]))


def first_failure(all_events):
    """The earliest rank exit with a non-zero code, or None."""
    for event in all_events:
        if event["kind"] == "exit" and event["exitcode"]:
            return event
    return None


def self_cost(nodes):
    """The samplers' CPU seconds per node per minute of sampling, over the node's ranks and the sampled span:
    as the node's watcher read them from /proc (``watch_state.json``'s ``sampler_cpu``: from outside the rank),
    else each sampler's own thread clock (its last sample's ``self_cpu``). -> ({host: value}, {host: source})."""
    cost, source = {}, {}
    for host, node in nodes.items():
        outside = (node.get("watch") or {}).get("sampler_cpu") or {}
        cpu, span, seen = 0.0, 0.0, False
        for key, series in node["samples"].items():
            if len(series) >= 2:
                if key in outside:
                    cpu, seen = cpu + float(outside[key]), True
                else:
                    cpu += series[-1].get("self_cpu", 0.0)
                span = max(span, series[-1]["t"] - series[0]["t"])
        if span > 0:
            cost[host] = round(cpu / span * 60, 4)
            source[host] = "read from /proc by the node's watcher" if seen else "the sampler's own thread clock"
    return cost, source


def _by_value(values):
    """{host: value} -> one text: the value, or each value with its nodes where they differ."""
    seen = {}
    for host, value in values.items():
        seen.setdefault(value, []).append(host)
    if len(seen) == 1:
        return next(iter(seen))
    return "; ".join("%s (%s)" % (value, ", ".join(hosts)) for value, hosts in sorted(seen.items()))


def environment(nodes):
    """The header's python, environment (the venv's real path: its release names the wheel) and the
    versions of the libraries the ranks imported, from the rank wrapper's records; {} without them."""
    found = {"python": {}, "environment": {}, "versions": {}}
    for host, node in nodes.items():
        for record in node["ranks"].values():
            start, end = record.get("start") or {}, record.get("exit") or {}
            if start.get("python"):
                found["python"].setdefault(host, start["python"])
            if start.get("prefix"):
                found["environment"].setdefault(host, start["prefix"])
            if end.get("versions"):
                found["versions"].setdefault(host, ", ".join(
                    "%s %s" % item for item in sorted(end["versions"].items())))
    return {key: _by_value(values) for key, values in found.items() if values}


def build(run_dir, hosts=None, pattern=None, ratio=straggler.RATIO):
    """The report's model of ``run_dir``; ``hosts`` (the play's nodes in order) names nodes with no
    directory as lost."""
    patterns = _steps.compile_patterns(pattern)
    # A node's directory: one of ``hosts``, or any other that holds a job.json (a Slurm job's nodes);
    # not the controller's own (.live, the progress lines' figures) or a Slurm job's preflight/.
    present = sorted(d for d in os.listdir(run_dir) if os.path.isdir(os.path.join(run_dir, d)) and (
        d in (hosts or []) or os.path.isfile(os.path.join(run_dir, d, "job.json"))))
    order = list(hosts or []) + [d for d in present if d not in (hosts or [])]
    nodes = {host: node_model(os.path.join(run_dir, host), patterns) for host in order if host in present}
    all_events = events(nodes)
    counted, borrowed = counted_steps(nodes)
    measured = {host: straggler.node_time(counted[host], node["samples"]) for host, node in nodes.items()}
    how = {m[1] for m in measured.values() if m[0]}
    wall = {host: straggler.node_step_time(counted[host]) for host in nodes}
    if how == {"demand", "wall"}:  # compare like with like: wall step time where a node lacks the demand
        measured = {host: (wall[host], "wall") for host in nodes}
    times = {host: value for host, (value, _how) in measured.items()}
    measure = "wall" if "wall" in {m[1] for m in measured.values() if m[0]} else "demand"
    rank0 = [s for node in nodes.values() for key, s in node["steps"].items() if is_rank0(node, key)]
    cpu_verdict = straggler.verdict(times, ratio, measure, wall, last_steps(nodes))
    arrivals = _arrival.figures(_arrival.node_ranks(nodes))
    # the flight recorder's figure decides where two nodes have one; the CPU (or wall) figure is secondary
    main = cpu_verdict
    cost, cost_source = self_cost(nodes)
    if len(arrivals) >= 2:
        main = straggler.cost_verdict({host: arrivals.get(host) for host in nodes}, ratio)
    return {"job_id": os.path.basename(os.path.normpath(run_dir)), "hosts": order, "nodes": nodes,
            "lost": [host for host in order if host not in nodes], "events": all_events,
            "first_failure": first_failure(all_events), "step_time": times,
            "measure": measure, "straggler": main, "cpu_straggler": cpu_verdict, "arrival": arrivals,
            "ratio": ratio,
            "steps_of_rank0": borrowed,
            "loss": [s for s in (rank0[0] if rank0 else []) if s["loss"] is not None],
            "fabric": _json(os.path.join(run_dir, "fabric.json")), "sampler_cost": cost,
            "sampler_cost_source": cost_source,
            "environment": environment(nodes)}
