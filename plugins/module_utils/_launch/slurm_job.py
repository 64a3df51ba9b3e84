# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The slurm_job module's logic: submit a batch job, watch it, cancel it, read its per-rank results.

plugins/modules/slurm_job.py is its documentation plus ``run_module(AnsibleModule(ARGUMENT_SPEC, ...))``.
The Slurm text (sinfo, scontrol, sbatch, the batch script) is parsed and rendered by _launch/slurm.py;
a finished job's node directories are read by the torchrun module's code (_torchrun/collect.py).
"""
from __future__ import annotations

import inspect
import json
import os
import shutil
import socket
import sys
import time

from ansible_collections.multinode.training.plugins.module_utils._fabric import schedule as _fabric_schedule
from ansible_collections.multinode.training.plugins.module_utils._fabric import verdict as _fabric_verdict
from ansible_collections.multinode.training.plugins.module_utils._launch.slurm import (
    FINAL_STATES,
    RANK_WRAPPER,
    SAMPLER,
    SINFO_FORMAT,
    SlurmError,
    check_request,
    default_partition,
    expand_hostlist,
    gres_request,
    parse_job,
    parse_sbatch,
    parse_sinfo,
    render_batch_script,
    resolve_nproc,
    srun_failures,
)
from ansible_collections.multinode.training.plugins.module_utils._node import env_probe, fabric_probe, rankwrap, sampler
from ansible_collections.multinode.training.plugins.module_utils._node import torchrun as _node_torchrun
from ansible_collections.multinode.training.plugins.module_utils._node import preflight as _node_preflight
from ansible_collections.multinode.training.plugins.module_utils._node.watchlib import live_samples, stream_lines, stream_pending
from ansible_collections.multinode.training.plugins.module_utils._node.torchrun import (
    STOP_GRACE,
    VENV,
    TorchrunError,
    format_rdzv_conf,
    mask,
    parse_nnodes,
    pick_root_cause,
    secret_values,
)
from ansible_collections.multinode.training.plugins.module_utils._torchrun.bounded import POLL_SLACK
from ansible_collections.multinode.training.plugins.module_utils._torchrun.collect import (
    TAIL_LINES,
    collect,
    rank_dirs,
    read_json,
    read_text,
)
from ansible_collections.multinode.training.plugins.module_utils._torchrun.follow import stream_ranks
from ansible_collections.multinode.training.plugins.module_utils._torchrun.live import PROGRESS_SPEC
from ansible_collections.multinode.training.plugins.module_utils._torchrun.proc import supervisor_source
from ansible_collections.multinode.training.plugins.module_utils._torchrun.wait import BATCH


# Seconds without a poll from the controller after which the submit host's guard cancels the job:
# the Slurm launcher's counterpart of the lease, long enough for a controller that reconnects, short
# enough that an interrupted play leaves nothing queued for long (docs/design.md, "Fixed timings").
CONTROLLER_TIMEOUT = 120

ARGUMENT_SPEC = dict(
    state=dict(type="str", default="status", choices=["submitted", "status", "cancelled"]),
    job_id=dict(type="str"),
    job_base=dict(type="path", required=True),
    bin_dir=dict(type="path"),
    partition=dict(type="str", default=""),
    account=dict(type="str", default=""),
    gres=dict(type="str", default=""),
    gpus_per_node=dict(type="int", default=0),
    time=dict(type="str", default=""),
    constraint=dict(type="str", default=""),
    extra_args=dict(type="list", elements="str", default=[]),
    job_name=dict(type="str", default="multinode-training"),
    nnodes=dict(type="str", default=""),
    nproc_per_node=dict(type="str", default="auto"),
    cpu_nproc=dict(type="int", default=2),
    script=dict(type="path"),
    module=dict(type="str"),
    args=dict(type="list", elements="str", default=[]),
    local_rank_arg=dict(type="bool", default=False),
    python=dict(type="path", default=VENV + "/bin/python"),
    system_python=dict(type="path", default="/usr/bin/python3"),
    rdzv_backend=dict(type="str", default="c10d"),
    rdzv_port=dict(type="int", default=29400),
    rdzv_conf=dict(type="dict", default={}),
    max_restarts=dict(type="int", default=0),
    interface=dict(type="str", default=""),
    ip_version=dict(type="int", default=4, choices=[4, 6]),
    env=dict(type="dict", default={}),
    env_files=dict(type="list", elements="path", default=[]),
    chdir=dict(type="path"),
    # what the in-job preflight checks beyond the python and the script (_node/preflight.py, as the ssh launcher)
    preflight=dict(type="dict", default={}, options=dict(
        venv=dict(type="str", default=VENV),
        chdir=dict(type="str"),
        require_deepspeed=dict(type="bool", default=True),
        deepspeed_config=dict(type="dict", default={}),
        allow_jit=dict(type="bool", default=False),
        env_files=dict(type="list", elements="dict", default=[]),
        code=dict(type="dict"),
        lock=dict(type="list", elements="str", default=[]),
    )),
    tee=dict(type="bool", default=False),
    timeout=dict(type="int", default=0),
    stop_grace=dict(type="int", default=STOP_GRACE),
    follow=dict(type="bool", default=False),
    **PROGRESS_SPEC,
    # The output of these ranks travels with each poll (as with the torchrun module), and where the last
    # poll left off in each node's rank logs.
    stream_ranks=dict(type="list", elements="str", default=[]),
    stream_offsets=dict(type="dict", default={}),
    wait=dict(type="int", default=10),
    poll_slack=dict(type="int", default=POLL_SLACK),
    controller_timeout=dict(type="int", default=CONTROLLER_TIMEOUT),
    tail_lines=dict(type="int", default=TAIL_LINES),
    fabric_check=dict(type="str", default="off", choices=["off", "warn", "gate"]),
    fabric_ratio=dict(type="float", default=_fabric_verdict.RATIO),
    fabric_min_gbps=dict(type="float", default=0),
    fabric_line_ratio=dict(type="float", default=_fabric_verdict.LINE_RATIO),
    fabric_seconds=dict(type="float", default=_fabric_schedule.SECONDS),
)
MUTUALLY_EXCLUSIVE = [("script", "module")]
REQUIRED_IF = [("state", "status", ["job_id"]), ("state", "cancelled", ["job_id"]),
               ("state", "submitted", ["bin_dir"])]


def run(module, argv, check=True, env=None):
    rc, out, err = module.run_command(argv, environ_update=env)
    if check and rc != 0:
        module.fail_json(msg="%s failed (rc %d) on %s: %s" % (" ".join(argv), rc, socket.gethostname(),
                                                              (err or out).strip()), cmd=argv)
    return rc, out, err


def write_file(path, text, mode=0o644):
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "w") as handle:
        handle.write(text)
    os.chmod(tmp, mode)
    os.rename(tmp, path)


def job_info(module, job_id):
    rc, out, _err = run(module, ["scontrol", "show", "job", "-o", job_id], check=False)
    return parse_job(out) if rc == 0 else None


def in_queue(module, job_id):
    rc, out, _err = run(module, ["squeue", "-h", "-j", job_id, "-o", "%T"], check=False)
    return rc == 0 and bool(out.strip())


def cancel(module, job_id, grace):
    """scancel, then wait until the job has left the queue; returns seconds it took."""
    start = time.time()
    run(module, ["scancel", job_id], check=False)
    deadline = start + grace + 90
    while in_queue(module, job_id) and time.time() < deadline:
        time.sleep(0.5)
    if in_queue(module, job_id):
        module.fail_json(msg="job %s is still in the queue %ds after scancel" % (job_id, time.time() - start),
                         job_id=job_id)
    return round(time.time() - start, 3)


def render(module, host):
    """Check the request against sinfo and render the batch script: (script, partition, nproc per node)."""
    p = module.params
    try:
        if not (p["script"] or p["module"]):
            raise SlurmError("train_script / train_module: one is required")
        gres, gpus = gres_request(p["gres"], p["gpus_per_node"])
        _rc, sinfo, _err = run(module, ["sinfo", "-h", "-N", "-o", SINFO_FORMAT])
        _rc, parts, _err = run(module, ["scontrol", "show", "partition", "-o"])
        partitions = parse_sinfo(sinfo)
        partition = check_request(partitions, p["partition"], p["nnodes"], gpus, default_partition(parts))
        nproc = resolve_nproc(p["nproc_per_node"], gpus, partitions[partition]["gpus_per_node"], p["cpu_nproc"])
        low, high = parse_nnodes(p["nnodes"])  # valid: check_request parsed it
        spec = dict(p, nodes=(low, high), gres=gres, nproc_per_node=nproc,
                    rdzv_conf=format_rdzv_conf(p["rdzv_conf"]),
                    output=os.path.join(p["job_base"], "slurm-%j.out"))
        script = render_batch_script(spec)
    except (SlurmError, TorchrunError) as exc:
        module.fail_json(msg="%s (submit host %s)" % (exc, host), sinfo_partitions=sorted(
            locals().get("partitions") or {}))
    return script, partition, nproc


def start_guard(p, job_id, job_dir, heartbeat):
    """The guard outlives this module: a detached session, stdin /dev/null, output to its log; returns its pid."""
    guard = [p["system_python"] if os.access(p["system_python"], os.X_OK) else sys.executable,
             os.path.join(p["bin_dir"], "slurm_node.py"), "guard", job_id, "--heartbeat", heartbeat,
             "--stale", str(p["controller_timeout"]), "--log", os.path.join(job_dir, "guard.log")]
    guard_log = os.path.join(job_dir, "guard.log")
    return os.posix_spawn(guard[0], guard, dict(os.environ), setsid=True, file_actions=[
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, guard_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644),
        (os.POSIX_SPAWN_DUP2, 1, 2),
    ])


def helpers(fabric_probe_too):
    """{file name: source} of what slurm_node.py imports or runs beside it, from this module's own
    module_utils, as the torchrun module writes its helpers into a job directory (one copy of each in the
    collection): the preflight (the ssh launcher's), the environment probe, torchrun's argv and environment,
    the supervisor, the fabric verdict and schedule, the rank wrapper and the job report's sampler; the
    fabric check's probe only when the check runs."""
    sources = {"_torchrun.py": inspect.getsource(_node_torchrun), "env_probe.py": inspect.getsource(env_probe),
               "_preflight.py": inspect.getsource(_node_preflight),
               "_fabric_verdict.py": inspect.getsource(_fabric_verdict),
               "_fabric_schedule.py": inspect.getsource(_fabric_schedule),
               "supervisor.py": supervisor_source(),
               # every rank runs under the rank wrapper, which loads the sampler beside it (the job report)
               RANK_WRAPPER: inspect.getsource(rankwrap), SAMPLER: inspect.getsource(sampler)}
    if fabric_probe_too:
        sources["fabric_probe.py"] = inspect.getsource(fabric_probe)
    return sources


def write_helpers(bin_dir, fabric_probe_too):
    """Every file of ``helpers`` into ``bin_dir``."""
    for name, source in helpers(fabric_probe_too).items():
        write_file(os.path.join(bin_dir, name), source)


def submit(module):
    p = module.params
    host = socket.gethostname()
    secrets = secret_values(p["env"])
    for value in secrets:
        module.no_log_values.add(value)
    script, partition, nproc = render(module, host)
    result = dict(changed=True, script=script, partition=partition, nproc_per_node=nproc)
    if module.check_mode:
        module.exit_json(**result)
    if not os.path.isfile(os.path.join(p["bin_dir"], "slurm_node.py")):
        module.fail_json(msg="bin_dir %s lacks slurm_node.py (the train role copies it)" % p["bin_dir"])
    write_helpers(p["bin_dir"], p["fabric_check"] != "off")
    pending = os.path.join(p["job_base"], ".submit")
    if not os.path.isdir(pending):
        os.makedirs(pending)
    script_path = os.path.join(pending, "job-%d-%d.sbatch" % (int(time.time()), os.getpid()))
    write_file(script_path, script, 0o755)
    argv = [module.get_bin_path("sbatch", required=True), "--parsable", script_path]
    submitted = time.time()
    _rc, out, _err = run(module, argv, env={str(k): str(v) for k, v in p["env"].items()})
    job_id = parse_sbatch(out)
    job_dir = os.path.join(p["job_base"], job_id)
    if not os.path.isdir(job_dir):
        os.makedirs(job_dir)
    os.rename(script_path, os.path.join(job_dir, "job.sbatch"))
    heartbeat = os.path.join(job_dir, "controller.heartbeat")
    write_file(heartbeat, "%f\n" % time.time())
    write_file(os.path.join(job_dir, "submit.json"), json.dumps(
        {"job_id": job_id, "submitted": submitted, "host": host, "cmd": argv, "timeout": p["timeout"],
         "partition": partition, "nnodes": p["nnodes"], "nproc_per_node": nproc,
         "env": mask(sorted("%s=%s" % kv for kv in p["env"].items()), secrets)}, indent=1))
    pid = start_guard(p, job_id, job_dir, heartbeat)
    result.update(job_id=job_id, job_dir=job_dir, cmd=argv, guard_pid=pid)
    module.exit_json(**result)


def first_rank_start(job_dir, nodes):
    """Earliest start of a rank: mtime of the attempt directories torchrun creates when it spawns ranks."""
    times = []
    for node in nodes:
        for directory in rank_dirs(os.path.join(job_dir, node)).values():
            try:
                times.append(os.path.getmtime(os.path.dirname(directory)))
            except OSError:
                pass
    return min(times) if times else None


def root_cause_line(root, preflight, batch_text, state, info, fabric=None):
    """One line for a failed job: the first rank's error, else the preflight's, else the fabric gate's
    refusal, else srun's, else Slurm's state."""
    if root:
        return "rank %s (local_rank %s) on %s exited %s: %s" % (
            root.get("rank"), root.get("local_rank"), root["node"], root.get("exitcode"),
            root.get("message") or "no error message")
    if preflight.get("errors"):
        return "preflight: " + "; ".join(preflight["errors"])
    if (fabric or {}).get("action") == "fail":
        return "train_fabric_check=gate: the job was not started; slow: " + " || ".join(fabric.get("summary") or [])
    srun = srun_failures(batch_text)
    return "; ".join("%s: task %s %s" % (f["node"], f["task"], f["what"]) for f in srun) or \
        "Slurm job state %s%s" % (state, " (%s)" % info["reason"] if info and info.get("reason") else "")


def summary_lines(job_id, job_dir, out, line):
    """The lines the play prints: the job, one per node, the timings, preflight's warnings, the root cause."""
    nodes, per_node, timings = out["nodes"], out["node_results"], out["timings"]
    lines = ["job %s: %s, world size %s on %d node(s), logs in %s" % (
        job_id, out["state"], out["world_size"] or "unknown", len(nodes), job_dir)]
    for node in nodes:
        entry = per_node.get(node, {})
        lines.append("%s: rc %s, ranks %s, %s s%s" % (
            node, entry.get("rc"), ",".join(str(r["rank"]) for r in entry.get("ranks", []) if r.get("rank") is not None)
            or "-", entry.get("duration"), ", timed out" if entry.get("timed_out") else ""))
    lines.append("submit to first rank %s s, failure to end %s s" % (
        timings["submit_to_first_rank"], timings["failure_to_end"]))
    lines.extend("warning: " + warning for warning in out.get("warnings") or [])
    if line:
        lines.append("root cause: " + line)
    return lines


def results(module, job_id, job_dir, info, ended_at):
    """Every node's directory -> the torchrun module's per-node results, then one root cause."""
    p = module.params
    nodes = expand_hostlist(info.get("nodes") or "") if info else []
    batch_log = os.path.join(p["job_base"], "slurm-%s.out" % job_id)
    if os.path.exists(batch_log):
        shutil.move(batch_log, os.path.join(job_dir, "batch.log"))
    batch_text = read_text(os.path.join(job_dir, "batch.log"))
    per_node, failures = {}, []
    for node in nodes:
        node_dir = os.path.join(job_dir, node)
        job = read_json(os.path.join(node_dir, "job.json"))
        if job is None:
            continue
        data = read_json(os.path.join(node_dir, "result.json"))
        entry = collect(node_dir, job, data, p["tail_lines"], node)
        per_node[node] = entry
        failures += [dict(f, node=node) for f in entry["failures"]]
    preflight = read_json(os.path.join(job_dir, "preflight.json")) or {}
    state = (info or {}).get("state") or "UNKNOWN"
    failed = state != "COMPLETED" or any(r.get("rc") not in (0, None) for r in per_node.values())
    out = {"node_results": per_node, "job_failed": failed, "nodes": nodes, "state": state,
           "world_size": next((r["world_size"] for r in per_node.values() if r.get("world_size")), None),
           "warnings": preflight.get("warnings") or []}
    root = pick_root_cause(failures)
    line = None
    if failed:
        line = root_cause_line(root, preflight, batch_text, state, info,
                               read_json(os.path.join(job_dir, "fabric.json")))
        out.update(root_cause=root, root_cause_line=line)
    rank0 = ""
    for node, entry in per_node.items():
        for rank in entry.get("ranks", []):
            if rank.get("rank") == 0 and rank.get("stdout"):
                rank0 = os.path.relpath(rank["stdout"], job_dir)
    submitted = (read_json(os.path.join(job_dir, "submit.json")) or {}).get("submitted")
    first = first_rank_start(job_dir, nodes)
    out["timings"] = {
        "submit_to_first_rank": round(first - submitted, 3) if first and submitted else None,
        "failure_to_end": round(ended_at - root["timestamp"], 3) if root and root.get("timestamp") else None,
    }
    out.update(lines=summary_lines(job_id, job_dir, out, line), rank0_stdout=rank0)
    return out


def node_offsets(offsets, node):
    """The streamed rank logs' offsets of one node (kept as ``<node>/<key>`` for all the nodes)."""
    prefix = node + "/"
    return dict((key[len(prefix):], value) for key, value in (offsets or {}).items() if key.startswith(prefix))


def stream(job_dir, nodes, ranks, offsets, final=False):
    """The new lines of the streamed ranks in every node's job directory (``<job dir>/<node>/``) ->
    ([[node, global rank, line]], offsets): _node.watchlib.stream_lines per node."""
    lines, out = [], dict(offsets or {})
    for node in nodes:
        if os.path.isdir(os.path.join(job_dir, node)):
            got, mine = stream_lines(os.path.join(job_dir, node), ranks, node_offsets(offsets, node), final=final)
            lines.extend([node] + item for item in got)
            out.update(("%s/%s" % (node, key), value) for key, value in mine.items())
    return lines, out


def stream_news(job_dir, nodes, ranks, offsets):
    """Whether a streamed rank of any node printed since ``offsets``."""
    return any(stream_pending(os.path.join(job_dir, node), ranks, node_offsets(offsets, node))
               for node in nodes if os.path.isdir(os.path.join(job_dir, node)))


def status(module):
    p = module.params
    job_id = p["job_id"]
    job_dir = os.path.join(p["job_base"], job_id)
    heartbeat = os.path.join(job_dir, "controller.heartbeat")
    submitted = (read_json(os.path.join(job_dir, "submit.json")) or {}).get("submitted") or time.time()
    began = time.time()
    deadline = began + max(p["wait"], 0)
    timed_out = False
    try:
        ranks = stream_ranks(p["stream_ranks"])
    except ValueError as exc:
        module.fail_json(msg=str(exc), job_id=job_id)
    offsets = p["stream_offsets"] or {}
    while True:
        if os.path.exists(heartbeat):
            os.utime(heartbeat, None)
        info = job_info(module, job_id)
        state = (info or {}).get("state")
        gone = info is None or (state in FINAL_STATES and not in_queue(module, job_id))
        if gone:
            break
        if p["timeout"] and time.time() - submitted > p["timeout"]:
            cancel(module, job_id, p["stop_grace"])
            timed_out = True
            info = job_info(module, job_id)
            break
        nodes = expand_hostlist(info.get("nodes") or "")
        # As the torchrun module's long poll: back a second after a streamed rank printed.
        news = ranks and time.time() - began >= BATCH and stream_news(job_dir, nodes, ranks, offsets)
        if time.time() >= deadline or news:
            progress = "job %s: %s%s, %s node(s) %s, elapsed %s" % (
                job_id, state, " (%s)" % info["reason"] if info.get("reason") else "",
                info.get("num_nodes"), info.get("nodes") or "-", info.get("elapsed"))
            streamed = stream(job_dir, nodes, ranks, offsets) if ranks else ([], offsets)
            module.exit_json(changed=False, job_id=job_id, job_dir=job_dir, state=state, done=False,
                             nodes=nodes, elapsed=info.get("elapsed"), progress=progress,
                             live={node: live_samples(os.path.join(job_dir, node)) for node in nodes
                                   if os.path.isdir(os.path.join(job_dir, node))},
                             stream=streamed[0], stream_offsets=streamed[1])
        time.sleep(1)
    ended_at = time.time()
    out = results(module, job_id, job_dir, info, ended_at)
    if ranks:
        out["stream"], out["stream_offsets"] = stream(job_dir, out["nodes"], ranks, offsets, final=True)
    if timed_out:
        out["job_failed"] = True
        out["root_cause_line"] = "job %s ran past train_timeout=%ss since submission and was cancelled; %s" % (
            job_id, p["timeout"], out.get("root_cause_line") or "")
        out["lines"].append("timed out: cancelled")
    progress = "job %s: %s, %d node(s), elapsed %s" % (job_id, out["state"], len(out["nodes"]),
                                                       (info or {}).get("elapsed"))
    module.exit_json(changed=timed_out, job_id=job_id, job_dir=job_dir, done=True, progress=progress,
                     elapsed=(info or {}).get("elapsed"), timed_out=timed_out, **out)


def cancelled(module):
    p = module.params
    was_queued = in_queue(module, p["job_id"])
    seconds = cancel(module, p["job_id"], p["stop_grace"]) if not module.check_mode else 0
    info = job_info(module, p["job_id"])
    module.exit_json(changed=was_queued, job_id=p["job_id"], job_dir=os.path.join(p["job_base"], p["job_id"]),
                     state=(info or {}).get("state"), seconds=seconds)


def run_module(module):
    p = module.params
    if p["state"] == "submitted":
        submit(module)
    if p["state"] == "cancelled":
        cancelled(module)
    status(module)
