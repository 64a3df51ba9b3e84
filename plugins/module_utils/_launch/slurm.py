# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure logic of the Slurm launcher: read sinfo/squeue/scontrol, check a request, render the batch script.

Nothing here runs a command or imports Ansible: plugins/modules/slurm_job.py does the acting;
tests/unit exercises this file on output recorded from the test cluster (tests/fixtures/slurm/).

The batch script is ONE job with two srun steps, one task per node each:

1. preflight: ``slurm_node.py preflight`` on every node records its environment (python, torch,
   DeepSpeed, ops, the script's sha256) and its address on the interface; ``slurm_node.py check``
   on the batch host compares them and prints the first node's address, or fails naming the node;
2. the job: ``slurm_node.py run`` on every node starts torchrun (the argv below, verbatim) under
   the torchrun module's supervisor, with this node's address, log directory and ``is_host``.

torchrun's argv is built by _node.torchrun.build_argv and written into the script with every item
quoted for bash (shlex.quote), so each train_args item reaches the script as one argument,
unchanged; two items are shell expressions on purpose: the rendezvous id (``slurm-$SLURM_JOB_ID``)
and the endpoint (the first node's address, known once the allocation exists).
"""
from __future__ import annotations

import json
import math
import re
import shlex

from ansible_collections.multinode.training.plugins.module_utils._fabric import schedule as _fabric_schedule
from ansible_collections.multinode.training.plugins.module_utils._fabric import verdict as _fabric_verdict
from ansible_collections.multinode.training.plugins.module_utils._node.torchrun import (
    STOP_GRACE,
    TorchrunError,
    build_argv,
    parse_nnodes,
)
from ansible_collections.multinode.training.plugins.module_utils._node.torchrun import resolve_nproc as _resolve_nproc

# States after which a job is gone for good (squeue/scontrol JobState).
FINAL_STATES = frozenset([
    "BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY",
    "PREEMPTED", "REVOKED", "SPECIAL_EXIT", "TIMEOUT",
])
# Node states in which a node cannot run a new job (sinfo %T, suffixes like '*' or '~' stripped).
UNUSABLE_NODE_STATES = ("down", "drain", "drained", "draining", "fail", "failing", "future", "inval",
                        "maint", "not_responding", "power_down", "powered_down", "unknown")
# Slurm option values that sbatch reads from '#SBATCH' lines: no whitespace, no newline.
_SBATCH_VALUE_RE = re.compile(r"^\S+$")
# The rank wrapper and the job report's sampler in bin_dir (module slurm_job writes them from _node's
# rankwrap and sampler, the same files the torchrun module puts in a job directory).
RANK_WRAPPER = "mt_rank.py"
SAMPLER = "mt_sample.py"
# The preflight fabric check's step (train_fabric_check warn or gate): the sentinels of its torchrun
# argv (the probe is the train role's file in bin_dir; module slurm_job writes the verdict's helpers).
FABRIC_ID_SENTINEL = "mt-slurm-fabric-id"
FABRIC_NNODES_SENTINEL = "mt-slurm-fabric-nnodes"
FABRIC_NODES_SENTINEL = "mt-slurm-fabric-nodes"
FABRIC_SCHEDULE_SENTINEL = "mt-slurm-fabric-schedule"
FABRIC_SHELL = {FABRIC_ID_SENTINEL: '"slurm-${SLURM_JOB_ID}-fabric"', FABRIC_NNODES_SENTINEL: '"${#nodes[@]}"',
                FABRIC_NODES_SENTINEL: '"$fabric_nodes"', FABRIC_SCHEDULE_SENTINEL: '"$fabric_schedule"'}
# The preflight's settings in the job directory, and the end of the here-document that writes them.
PREFLIGHT_SPEC = "preflight_spec.json"
SPEC_END = "MT_PREFLIGHT_SPEC"
RDZV_ID_SENTINEL = "mt-slurm-job-id"
RDZV_HOST_SENTINEL = "mt-slurm-first-node"
RDZV_ID_SHELL = '"slurm-${SLURM_JOB_ID}"'
RDZV_ENDPOINT_SHELL = '"${rdzv_addr}:%d"'
# The sinfo call the module makes: one line per node and partition.
SINFO_FORMAT = "%R|%N|%T|%G|%c"
SQUEUE_FORMAT = "%i|%T|%M|%D|%N|%R"


class SlurmError(ValueError):
    """A request that cannot work; the message names the variable, the value and what is valid."""


# ---------------------------------------------------------------- reading Slurm

def gpus_in_gres(gres):
    """GPUs in a gres string: ``gpu:8`` -> 8, ``gpu:a100:4(S:0-1),shard:8`` -> 4, ``(null)`` -> 0."""
    total = 0
    for item in re.split(r",(?![^()]*\))", gres or ""):
        item = re.sub(r"\(.*\)$", "", item.strip())
        parts = item.split(":")
        if parts[0] != "gpu":
            continue
        count = parts[-1] if len(parts) > 1 else "1"
        total += int(count) if count.isdigit() else 1
    return total


def parse_sinfo(text):
    """``sinfo -h -N -o '%R|%N|%T|%G|%c'`` -> {partition: {nodes, usable, gpus_per_node, states}}.

    One line per node and partition; a node in several partitions appears once in each. GPUs per
    node is the smallest count among the partition's usable nodes (what every node of a job gets).
    """
    partitions = {}
    for line in (text or "").splitlines():
        fields = line.strip().split("|")
        if len(fields) < 4 or not fields[0]:
            continue
        name, node, state, gres = fields[0], fields[1], fields[2].lower().rstrip("*~#!%$@^-"), fields[3]
        part = partitions.setdefault(name, {"nodes": [], "usable": [], "gpus": {}, "states": {}})
        if node in part["nodes"]:
            continue
        part["nodes"].append(node)
        part["states"][node] = state
        part["gpus"][node] = gpus_in_gres(gres)
        if not any(state.startswith(bad) for bad in UNUSABLE_NODE_STATES):
            part["usable"].append(node)
    for part in partitions.values():
        counts = [part["gpus"][n] for n in part["usable"]] or list(part["gpus"].values())
        part["gpus_per_node"] = min(counts) if counts else 0
    return partitions


def default_partition(scontrol_partitions):
    """The partition marked ``Default=YES`` in ``scontrol show partition -o`` output, else None."""
    for line in (scontrol_partitions or "").splitlines():
        fields = parse_scontrol_line(line)
        if fields.get("Default") == "YES":
            return fields.get("PartitionName")
    return None


def parse_scontrol_line(line):
    """One ``scontrol show ... -o`` line -> {Key: value} (values never contain ' Key=')."""
    result = {}
    for match in re.finditer(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/]*)=(.*?)(?=\s+[A-Za-z][A-Za-z0-9_:/]*=|\s*$)",
                             line.strip()):
        result[match.group(1)] = match.group(2)
    return result


def parse_job(text):
    """``scontrol show job -o <id>`` -> state, reason, nodes, elapsed, exit code, times (None: unknown)."""
    for line in (text or "").splitlines():
        fields = parse_scontrol_line(line)
        if "JobId" not in fields:
            continue
        nodes = fields.get("NodeList")
        return {
            "job_id": fields["JobId"],
            "name": fields.get("JobName"),
            "state": fields.get("JobState"),
            "reason": None if fields.get("Reason") in (None, "None") else fields.get("Reason"),
            "nodes": None if nodes in (None, "(null)", "") else nodes,
            "num_nodes": fields.get("NumNodes"),
            "elapsed": fields.get("RunTime"),
            "exit_code": fields.get("ExitCode"),
            "submit_time": fields.get("SubmitTime"),
            "start_time": fields.get("StartTime"),
            "end_time": fields.get("EndTime"),
            "partition": fields.get("Partition"),
            "std_out": fields.get("StdOut"),
        }
    return None


def parse_sbatch(text):
    """``sbatch --parsable`` prints ``<id>`` or ``<id>;<cluster>`` -> the id."""
    match = re.match(r"^\s*(\d+)(?:;\S+)?\s*$", (text or "").strip().splitlines()[-1] if text and text.strip() else "")
    if not match:
        raise SlurmError("sbatch printed no job id: %r" % (text,))
    return match.group(1)


def expand_hostlist(text):
    """``node[1-3,7],gpu01`` -> [node1, node2, node3, node7, gpu01] (zero padding kept)."""
    hosts = []
    for item in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,]*", text or ""):
        match = re.match(r"^([^\[]*)\[([^\]]*)\](.*)$", item)
        if not match:
            hosts.append(item)
            continue
        prefix, ranges, suffix = match.groups()
        for part in ranges.split(","):
            low, _sep, high = part.partition("-")
            width = len(low)
            for number in range(int(low), int(high or low) + 1):
                hosts.append("%s%0*d%s" % (prefix, width, number, suffix))
    return hosts


def srun_failures(batch_log):
    """``srun: error: <node>: task <n>: Exited with exit code <c>`` lines of the batch log -> [{node, task, rc}]."""
    found = []
    for match in re.finditer(r"srun: error: (\S+): tasks? ([\d\-,]+): (Exited with exit code (\d+)|[A-Z][^\n]*)",
                             batch_log or ""):
        found.append({"node": match.group(1), "task": match.group(2),
                      "rc": int(match.group(4)) if match.group(4) else None, "what": match.group(3)})
    return found


# ---------------------------------------------------------------- checking a request

def gres_request(gres, gpus_per_node):
    """The module's gres / train_slurm_gpus_per_node -> (gres string or '', GPUs per node requested)."""
    gres = (gres or "").strip()
    gpus = int(gpus_per_node or 0)
    if gres and gpus:
        raise SlurmError("gres=%s and train_slurm_gpus_per_node=%d: set one of them; valid: "
                         "gres (e.g. gpu:a100:8) or train_slurm_gpus_per_node (e.g. 8)" % (gres, gpus))
    if gpus < 0:
        raise SlurmError("train_slurm_gpus_per_node=%d: valid: 0 (no GPUs) or a positive count" % gpus)
    if gpus:
        return "gpu:%d" % gpus, gpus
    if gres and not _SBATCH_VALUE_RE.match(gres):
        raise SlurmError("gres=%r: no whitespace; valid: e.g. gpu:8 or gpu:a100:8" % (gres,))
    return gres, gpus_in_gres(gres)


def check_request(partitions, partition, nnodes, gpus_per_node, default=None):
    """The request against the cluster (sinfo) before anything is submitted.

    Returns the partition used; raises SlurmError naming the variable, the value and what exists.
    """
    if not partitions:
        raise SlurmError("sinfo lists no partition: is slurmctld up and this host a submit host?")
    names = sorted(partitions)
    name = partition or default
    if not name:
        raise SlurmError("train_slurm_partition is empty and the cluster has no default partition; valid: %s"
                         % ", ".join(names))
    if name not in partitions:
        raise SlurmError("train_slurm_partition=%s: the cluster has no such partition; valid: %s"
                         % (name, ", ".join(names)))
    part = partitions[name]
    if not str(nnodes or "").strip():
        raise SlurmError("train_nnodes is empty: with train_launcher=slurm it is the node count to allocate; "
                         "valid: N or MIN:MAX with N <= %d (partition %s)" % (len(part["usable"]), name))
    try:
        low, high = parse_nnodes(nnodes)
    except TorchrunError as exc:
        raise SlurmError("train_nnodes=%s: %s" % (nnodes, exc))
    usable = part["usable"]
    if low > len(usable) or high > len(part["nodes"]):
        raise SlurmError("train_nnodes=%s: partition %s has %d node(s), %d usable (%s); valid: 1-%d"
                         % (nnodes, name, len(part["nodes"]), len(usable),
                            ", ".join("%s %s" % (n, part["states"][n]) for n in part["nodes"]),
                            len(usable)))
    if gpus_per_node and part["gpus_per_node"] < gpus_per_node:
        have = part["gpus_per_node"]
        raise SlurmError("train_slurm_gpus_per_node=%d GPUs per node: partition %s %s; valid: %s"
                         % (gpus_per_node, name,
                            "has no GPUs" if not have else "has %d GPU(s) per node" % have,
                            "no GPU request (train_slurm_gpus_per_node 0)" if not have
                            else "1-%d" % have))
    return name


def resolve_nproc(nproc_per_node, gpus_requested, partition_gpus, cpu_nproc):
    """Processes per node, the ssh launcher's rule (``_node/torchrun.resolve_nproc``) with the GPUs of the
    allocation: those requested, else the partition's."""
    try:
        return _resolve_nproc(nproc_per_node, gpus_requested or partition_gpus, cpu_nproc)
    except TorchrunError:
        raise SlurmError("train_nproc_per_node=%r: valid: auto or a positive integer" % (nproc_per_node,))


# ---------------------------------------------------------------- the batch script

def sbatch_options(spec):
    """The '#SBATCH' options, in order; values are refused when sbatch could not read them back."""
    low, high = spec["nodes"]
    options = [("--job-name", spec.get("job_name") or "multinode-training"),
               ("--nodes", str(low) if low == high else "%d-%d" % (low, high)),
               ("--ntasks-per-node", "1"),
               ("--output", spec["output"]),
               ("--open-mode", "append")]
    for key, option in (("partition", "--partition"), ("account", "--account"), ("gres", "--gres"),
                        ("time", "--time"), ("constraint", "--constraint")):
        if spec.get(key):
            options.append((option, str(spec[key])))
    lines = []
    for option, value in options:
        if not _SBATCH_VALUE_RE.match(value):
            raise SlurmError("%s=%r: '#SBATCH' values cannot hold whitespace" % (_VARIABLE.get(option, option), value))
        lines.append("%s=%s" % (option, value))
    for index, extra in enumerate(spec.get("extra_args") or []):
        extra = str(extra)
        if not extra.startswith("-") or not _SBATCH_VALUE_RE.match(extra):
            raise SlurmError("train_slurm_extra_args[%d]=%r: valid: one sbatch option per item, e.g. "
                             "--exclusive or --comment=run-42 (no whitespace)" % (index, extra))
        lines.append(extra)
    return lines


_VARIABLE = {"--partition": "train_slurm_partition", "--account": "train_slurm_account",
             "--time": "train_slurm_time", "--output": "train_slurm_dir"}


def torchrun_argv(spec):
    """torchrun's argv for the job (node-specific parts - local address, log dir, is_host - come from
    slurm_node.py through torchrun's PET_* variables); sentinels stand for the shell expressions."""
    opts = {
        "nnodes": spec["nnodes"],
        "nproc_per_node": spec["nproc_per_node"],
        "rdzv_backend": spec.get("rdzv_backend") or "c10d",
        "rdzv_id": RDZV_ID_SENTINEL,
        "rdzv_endpoint": "%s:%d" % (RDZV_HOST_SENTINEL, int(spec["rdzv_port"])),
        "max_restarts": spec.get("max_restarts") or 0,
        "script": spec.get("script"),
        "module": spec.get("module"),
        "args": spec.get("args") or [],
        # The rank wrapper and the job report's sampler, as under the ssh launcher (slurm_job ships them).
        "wrapper": "%s/%s" % (spec["bin_dir"], RANK_WRAPPER) if spec.get("bin_dir") else None,
        "local_rank_arg": spec.get("local_rank_arg"),
    }
    try:
        return build_argv(spec["python"], opts)
    except TorchrunError as exc:
        raise SlurmError(str(exc))


def fabric_argv(spec):
    """The fabric probe's torchrun argv: one rank per node of the allocation, its own rendezvous id on the
    job's endpoint, the nodes and the pairing schedule from the batch script (sentinels)."""
    opts = {
        "nnodes": "1",
        "nproc_per_node": "1",
        "rdzv_backend": spec.get("rdzv_backend") or "c10d",
        "rdzv_id": FABRIC_ID_SENTINEL,
        "rdzv_endpoint": "%s:%d" % (RDZV_HOST_SENTINEL, int(spec["rdzv_port"])),
        "max_restarts": 0,
        "script": "%s/fabric_probe.py" % spec["bin_dir"],
        "args": ["--probe-nodes", FABRIC_NODES_SENTINEL, "--schedule", FABRIC_SCHEDULE_SENTINEL,
                 "--seconds", str(float(spec.get("fabric_seconds") or _fabric_schedule.SECONDS))]
        + (["--probe-iface", spec["interface"]] if spec.get("interface") else []),
    }
    argv = build_argv(spec["python"], opts)
    argv[argv.index("--nnodes") + 1] = FABRIC_NNODES_SENTINEL  # the nodes Slurm allocated (MIN:MAX)
    return argv


def quote_argv(argv, rdzv_port):
    """argv -> one bash word per item; the sentinels become their shell expressions."""
    words = []
    endpoint = "%s:%d" % (RDZV_HOST_SENTINEL, int(rdzv_port))
    for item in argv:
        if item == RDZV_ID_SENTINEL:
            words.append(RDZV_ID_SHELL)
        elif item == endpoint:
            words.append(RDZV_ENDPOINT_SHELL % int(rdzv_port))
        elif item in FABRIC_SHELL:
            words.append(FABRIC_SHELL[item])
        else:
            words.append(shlex.quote(str(item)))
    return words


def fabric_timeout(spec):
    """The probe step's timeout as a shell expression of the allocated node count (roles/train/tasks/fabric.yml's
    rule: max(TIMEOUT_FLOOR, 30 + 4 x nodes x fabric_seconds))."""
    per_node = int(math.ceil(4 * float(spec.get("fabric_seconds") or _fabric_schedule.SECONDS)))
    floor = _fabric_schedule.TIMEOUT_FLOOR
    return "$(( 30 + %d * ${#nodes[@]} > %d ? 30 + %d * ${#nodes[@]} : %d ))" % (per_node, floor, per_node, floor)


def fabric_lines(spec, node_py, step_options):
    """The batch script's fabric check (train_fabric_check warn or gate), between the preflight and the
    job: the probe as one task per node (a probe that fails leaves its nodes without figures, which the
    verdict flags), then the verdict on the submit side: ``slurm_node.py fabric-verdict`` prints the
    matrix, writes ``$job_dir/fabric.json`` and prints the nodes to run on; under gate it fails (the job
    never starts) or, elastic, leaves the slow nodes out; the rendezvous moves to the first node kept."""
    q = shlex.quote
    system = q(spec.get("system_python") or "python3")
    # the probe's own limit, as under the ssh launcher: at least 120 s, 4 measurements per node pair
    options = list(step_options)
    options[options.index("--timeout") + 1] = '"%s"' % fabric_timeout(spec)
    probe = ["srun", "--nodes=${SLURM_JOB_NUM_NODES}", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
             "--job-name=fabric", q(spec["python"]), q(node_py), "run", '"$job_dir/fabric"'] + options
    probe += ["--"] + quote_argv(fabric_argv(spec), spec["rdzv_port"])
    verdict = [system, q(node_py), "fabric-verdict", '"$job_dir"', "--mode", q(spec["fabric_check"]),
               "--ratio", str(float(spec.get("fabric_ratio") or _fabric_verdict.RATIO)),
               "--min-gbps", str(float(spec.get("fabric_min_gbps") or 0)),
               "--line-ratio", str(float(_fabric_verdict.LINE_RATIO if spec.get("fabric_line_ratio") is None
                                         else spec["fabric_line_ratio"])),
               "--nnodes", q(str(spec["nnodes"])), '"${nodes[@]}"']
    return [
        "# 2. the fabric check (train_fabric_check=%s): every link and node measured, then judged" % spec["fabric_check"],
        'fabric_nodes=$(%s %s fabric-nodes "${nodes[@]}")' % (system, q(node_py)),
        'fabric_schedule=$(%s %s fabric-schedule "${#nodes[@]}")' % (system, q(node_py)),
        _wrap(probe) + ' \\\n  || echo "multinode.training: the fabric probe step failed (rc $?)"',
        "kept=$(%s)" % " ".join(verdict),
        'mapfile -t nodes <<< "$kept"',
        'rdzv_addr=$(%s %s check "$job_dir" "${nodes[@]}")' % (system, q(node_py)),
        'echo "multinode.training: the job runs on ${nodes[*]}, rendezvous ${rdzv_addr}:%d"' % int(spec["rdzv_port"]),
    ]


def _wrap(words, indent="  "):
    """bash words -> lines joined with ' \\' continuations, at most about 100 columns."""
    lines, current = [], ""
    for word in words:
        if current and len(current) + 1 + len(word) > 100:
            lines.append(current + " \\")
            current = indent + word
        else:
            current = word if not current else current + " " + word
    lines.append(current)
    return "\n".join(lines)


def preflight_spec(spec):
    """What slurm_node.py's preflight and check read (JOB_DIR/preflight_spec.json, written by the batch script):
    the probe's arguments and the comparison's settings, as the ssh launcher gives _node.preflight. One line
    of JSON (no line of it can end the here-document)."""
    checks = dict(spec.get("preflight") or {})
    chdir = checks["chdir"] if checks.get("chdir") is not None else spec.get("chdir")
    out = {"python": spec["python"], "script": spec.get("script") or None, "chdir": chdir or None,
           "interface": spec.get("interface") or "", "ip_version": int(spec.get("ip_version") or 4),
           "env_files": checks.get("env_files") or [
               {"var": "train_env_files", "path": path} for path in spec.get("env_files") or []],
           "code": checks.get("code") or None, "venv": checks.get("venv") or "",
           "require_deepspeed": checks.get("require_deepspeed", True) is not False,
           "deepspeed_config": checks.get("deepspeed_config") or {}, "allow_jit": bool(checks.get("allow_jit")),
           "lock": list(checks.get("lock") or [])}
    return json.dumps(out, sort_keys=True, separators=(",", ":"))


def render_batch_script(spec):
    """The whole batch script (bash), from a spec the module assembles from the role's variables."""
    q = shlex.quote
    argv = torchrun_argv(spec)
    node_py = "%s/slurm_node.py" % spec["bin_dir"]
    srun = ["srun", "--nodes=${SLURM_JOB_NUM_NODES}", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    preflight = srun + ["--job-name=preflight", q(spec.get("system_python") or "python3"), q(node_py), "preflight",
                        '"$job_dir"']
    check = [q(spec.get("system_python") or "python3"), q(node_py), "check", '"$job_dir"', '"${nodes[@]}"']
    # slurm_node.py run's options, the same for the fabric probe and the job
    options = ["--first", '"${nodes[0]}"', "--interface", q(spec.get("interface") or ""),
               "--ip-version", str(int(spec.get("ip_version") or 4)),
               "--timeout", str(int(spec.get("timeout") or 0)),
               "--stop-grace", str(int(spec.get("stop_grace") or STOP_GRACE))]
    if spec.get("rdzv_conf"):
        options += ["--rdzv-conf", q(spec["rdzv_conf"])]
    for path in spec.get("env_files") or []:
        options += ["--env-file", q(path)]
    if spec.get("chdir"):
        options += ["--chdir", q(spec["chdir"])]
    fabric = spec.get("fabric_check") in ("warn", "gate")
    if fabric:  # the job runs on the nodes the verdict kept
        run = ["srun", '--nodes="${#nodes[@]}"', '--nodelist="$(IFS=,; echo "${nodes[*]}")"'] + srun[2:]
    else:
        run = list(srun)
    run += ["--job-name=torchrun", q(spec["python"]), q(node_py), "run", '"$job_dir"'] + options
    if spec.get("tee"):
        run += ["--tee"]
    run += ["--"] + quote_argv(argv, spec["rdzv_port"])
    header = ["#!/bin/bash",
              "# Rendered by multinode.training (module slurm_job, train_launcher=slurm).",
              "# One job, two steps with one task per node: a preflight, then one torchrun per node",
              "# rendezvousing on the first node. Resubmit by hand with: sbatch <this file>"]
    header += ["#SBATCH %s" % line for line in sbatch_options(spec)]
    body = [
        "set -euo pipefail",
        "job_dir=%s/\"${SLURM_JOB_ID}\"" % q(spec["job_base"]),
        "mkdir -p \"$job_dir\"",
        "mapfile -t nodes < <(scontrol show hostnames \"$SLURM_JOB_NODELIST\")",
        "echo \"multinode.training: job ${SLURM_JOB_ID} on ${nodes[*]}\"",
        "# 1. preflight on every node, as the ssh launcher's; the check fails naming each node and problem",
        "cat > \"$job_dir/%s\" <<'%s'" % (PREFLIGHT_SPEC, SPEC_END),
        preflight_spec(spec),
        SPEC_END,
        _wrap(preflight),
        "rdzv_addr=$(%s)" % " ".join(check),
        "echo \"multinode.training: rendezvous ${rdzv_addr}:%d (${nodes[0]})\"" % int(spec["rdzv_port"]),
    ]
    if fabric:
        body += fabric_lines(spec, node_py, options)
    body += [
        "# %d. one torchrun per node; a node that fails ends the step on all (--kill-on-bad-exit)" % (3 if fabric else 2),
        _wrap(run),
    ]
    return "\n".join(header + [""] + body) + "\n"
