# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure logic of the torchrun module: validate options, build the argv and the environment; the root
cause and the report across ranks and nodes.

Nothing here starts a process or imports Ansible (``lift_memlock`` sets this process's limit for what it
starts next): the module
(plugins/modules/torchrun.py) does the acting; tests/unit exercises this file
on recorded torchrun output (tests/fixtures/torchrun/). Standard library only: the Slurm path
ships this file alone to the nodes (roles/train/tasks/slurm.yml, as ``_torchrun.py``). torchrun's
log and error files are read by _torchrun/agent_log.py.

Layout of one job on a node (everything under ``<log_dir>/<job_id>/``)::

    job.json            what was started: masked argv, pid/pgid, start time, options
    torchrun.log        the torchrun agent's stdout+stderr (LOGLEVEL=INFO)
    result.json         written by the supervisor when torchrun ended: rc, end time
    torchrun_error.json root-cause error torchrun copies from the failing rank
    ranks/<rdzv_id>_<random>/attempt_<n>/<local_rank>/{stdout,stderr}.log, error.json
"""
from __future__ import annotations

import ipaddress
import json
import os
import re
import resource

JOB_ENV = "MULTINODE_TRAINING_JOB"
JOB_DIR_ENV = "MULTINODE_TRAINING_JOB_DIR"
MASK = "********"
SECRET_KEY_RE = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
JOB_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# The rank wrapper's option for local_rank_arg (_node.rankwrap.LOCAL_RANK_ARG; the _node files are shipped
# one by one and import no sibling, tests/unit holds the two equal).
LOCAL_RANK_ARG = "--local-rank-arg"
# Seconds from SIGTERM to SIGKILL when a job is stopped, when the caller gives none (the torchrun and
# slurm_job modules' stop_grace; train_stop_grace in roles/train/defaults/main.yml mirrors it).
STOP_GRACE = 15
# The training venv when the caller names none (the torchrun module's venv, slurm_job's python inside
# it); train_venv in roles/train/defaults/main.yml mirrors it.
VENV = "/opt/multinode-training/venv"
# Where the job directories go on a node when the caller names none (the torchrun module's log_dir);
# train_log_dir in roles/train/defaults/main.yml mirrors it.
LOG_DIR = "/var/log/multinode-training"
# Errors a rank raises because *another* rank died first: never the root cause
# when a first-hand failure exists at (about) the same time.
PEER_ERROR_RE = re.compile(
    r"Connection closed by peer|Connection reset by peer|remote worker crashing|Broken pipe"
    r"|DistNetworkError|NCCL communicator was aborted|Socket Timeout|recvBytes|Timed out waiting"
    r"|connection refused",
    re.IGNORECASE,
)


# ---------------------------------------------------------------- locked memory

# NCCL over InfiniBand or RoCE registers the job's buffers with the device as locked memory (ibv_reg_mr),
# far beyond the usual 64 KiB or 8 MiB: with a limit below what it registers, NCCL fails at its first
# collective or the job runs over sockets. Both launchers give the job what this process may
# (lift_memlock); preflight names a node where that is still a limit (memlock_warning).
RDMA_SYSFS = "/sys/class/infiniband"
CAP_SYS_RESOURCE = 24  # linux/capability.h: raise a hard resource limit


def lift_memlock():
    """No limit on locked memory for what this process starts. Root with CAP_SYS_RESOURCE (the
    module under become on a host; not in a default container) lifts both limits, anyone else (a
    Slurm step) the soft one to the hard one. The job thus never depends on a limits.d file, which
    PAM applies only to sessions opened after it was written, and only to the account it names.
    Returns the (soft, hard) limits now in force."""
    unlimited = resource.RLIM_INFINITY
    try:
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (unlimited, unlimited))
    except (ValueError, OSError):
        hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
        try:
            resource.setrlimit(resource.RLIMIT_MEMLOCK, (hard, hard))
        except (ValueError, OSError):
            pass
    return resource.getrlimit(resource.RLIMIT_MEMLOCK)


def has_capability(status_text, cap):
    """Whether /proc/<pid>/status's CapEff line holds capability number ``cap``."""
    for line in status_text.splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> cap & 1)
    return False


def job_memlock(status_path="/proc/self/status", sysfs=RDMA_SYSFS, hard=None):
    """What lift_memlock would give the job here, without changing anything: {rdma: the node's RDMA
    devices (InfiniBand and RoCE, sorted), limit: bytes, or None for unlimited}."""
    try:
        rdma = sorted(os.listdir(sysfs))
    except OSError:
        rdma = []
    try:
        with open(status_path) as handle:
            status = handle.read()
    except (IOError, OSError):
        status = ""
    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1] if hard is None else hard
    if has_capability(status, CAP_SYS_RESOURCE) or hard == resource.RLIM_INFINITY:
        return {"rdma": rdma, "limit": None}
    return {"rdma": rdma, "limit": hard}


def _size(limit):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if limit >= size:
            return "%g %s" % (round(limit / float(size), 1), unit)
    return "%d bytes" % limit


def memlock_warning(node, memlock, launcher="ssh", user=""):
    """"" or the warning for a node with RDMA devices whose job would run with limited locked memory
    (``memlock``: job_memlock's answer there)."""
    memlock = memlock or {}
    if not memlock.get("rdma") or memlock.get("limit") is None:
        return ""
    if launcher == "slurm":
        why = "the hard limit slurmd gives the job's steps"
        fix = ("PropagateResourceLimitsExcept=MEMLOCK in slurm.conf (the submit shell's limit is not carried "
               "over) and slurmd started with LimitMEMLOCK=infinity")
    else:
        why = "the hard limit of %s; root raises it only with CAP_SYS_RESOURCE" % (user or "the play's user")
        fix = ("-b on a host where root holds CAP_SYS_RESOURCE (a container: --ulimit memlock=-1), or an unlimited "
               "memlock hard limit for %s (nccl_tuning_system_conf: true with nccl_tuning_user, then a new "
               "login)" % (user or "the play's user"))
    return ("%s: NCCL over InfiniBand/RoCE (%s) registers the job's buffers as locked memory, and the job gets "
            "%s of it here (%s): NCCL may fail registering memory (ibv_reg_mr) or fall back to sockets; valid: %s"
            % (node, ", ".join(memlock["rdma"][:4]) + (", ..." if len(memlock["rdma"]) > 4 else ""),
               _size(memlock["limit"]), why, fix))


class TorchrunError(ValueError):
    """An option value that cannot work; the message names the option, the value and what is valid."""


# ---------------------------------------------------------------- options

# torch's flight recorder in every rank (TORCH_FR_BUFFER_SIZE entries): the rank's sampler reads the blocks of
# collectives the straggler rule compares (_report.arrival) and, in a hang, the name of the collective a
# rank waits in; the entries also serve a dump of your own (torch's fr_trace analyser). Not set here:
# TORCH_NCCL_ENABLE_TIMING, which gives NCCL's entries each collective's GPU time (the rule prefers it to the
# ranks' CPU clocks) but has stopped NCCL kernels from overlapping with compute (pytorch #143890,
# TransformerEngine #1353): a user's choice, in train_env.
FR_BUFFER = 2000
RECORDER_ENV = {"TORCH_FR_BUFFER_SIZE": str(FR_BUFFER)}


def recorder_env(env):
    """Turn the flight recorder on in ``env`` (RECORDER_ENV), keeping what the user set; returns ``env``."""
    for key, value in RECORDER_ENV.items():
        env.setdefault(key, value)
    return env


def parse_nnodes(value):
    """``2`` / ``"2"`` / ``"1:4"`` -> (min, max). MIN <= MAX, both >= 1."""
    text = str(value).strip()
    match = re.match(r"^(\d+)(?::(\d+))?$", text)
    if not match or isinstance(value, bool):
        raise TorchrunError("nnodes=%r: expected a node count N or an elastic range MIN:MAX (e.g. 2 or 1:4)" % (value,))
    low = int(match.group(1))
    high = int(match.group(2)) if match.group(2) is not None else low
    if low < 1:
        raise TorchrunError("nnodes=%r: node counts start at 1" % (value,))
    if low > high:
        raise TorchrunError("nnodes=%r: MIN (%d) is greater than MAX (%d); valid: MIN <= MAX" % (value, low, high))
    return low, high


def nnodes_arg(low, high):
    return str(low) if low == high else "%d:%d" % (low, high)


def validate_port(port, option="port"):
    try:
        number = int(port)
    except (TypeError, ValueError):
        raise TorchrunError("%s=%r: not a number; valid: 1-65535" % (option, port))
    if isinstance(port, bool) or not 1 <= number <= 65535:
        raise TorchrunError("%s=%r: outside 1-65535" % (option, port))
    return number


def _is_ipv6(text):
    try:
        return ipaddress.ip_address(text.split("%", 1)[0]).version == 6
    except ValueError:
        return False


def format_endpoint(host, port):
    """host + port -> ``host:port``; an IPv6 literal is bracketed (``[fd00::1]:29400``)."""
    host = str(host).strip()
    if not host:
        raise TorchrunError("rdzv_endpoint: empty host")
    number = validate_port(port, "rdzv port")
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if _is_ipv6(bare):
        return "[%s]:%d" % (bare, number)
    if ":" in bare:
        raise TorchrunError("rdzv_endpoint host %r: not an IPv6 address and contains ':'" % (host,))
    return "%s:%d" % (bare, number)


def normalize_endpoint(endpoint):
    """Validate a ``host:port`` / ``[v6]:port`` / bare IPv6 string; return the canonical form."""
    text = str(endpoint).strip()
    match = re.match(r"^\[([^\]]+)\]:(\d+)$", text)
    if match:
        return format_endpoint(match.group(1), match.group(2))
    host, sep, port = text.rpartition(":")
    if ":" in host or _is_ipv6(text):
        raise TorchrunError("rdzv_endpoint=%r: an IPv6 address needs brackets and a port, e.g. [fd00::1]:29400"
                            % (text,))
    if not sep or not host:
        raise TorchrunError("rdzv_endpoint=%r: expected host:port (IPv6 as [addr]:port)" % (text,))
    return format_endpoint(host, port)


def format_rdzv_conf(conf):
    """dict -> ``key=value,key=value`` (sorted, booleans lower-case) for ``--rdzv_conf``."""
    parts = []
    for key in sorted(conf or {}):
        value = conf[key]
        if isinstance(value, bool):
            value = "true" if value else "false"
        value = str(value)
        if not re.match(r"^[A-Za-z0-9_]+$", str(key)) or any(c in value for c in ",="):
            raise TorchrunError("rdzv_conf %r=%r: keys are identifiers, values may not contain ',' or '='" % (key, value))
        parts.append("%s=%s" % (key, value))
    return ",".join(parts)


def validate_job_id(job_id, option="rdzv_id"):
    if not JOB_ID_RE.match(str(job_id or "")):
        raise TorchrunError("%s=%r: use 1-128 characters of letters, digits, '_', '.', '-' (it names a directory)"
                            % (option, job_id))
    return str(job_id)


def count_gpus_nvidia_smi(text):
    """Count ``GPU <n>:`` lines of ``nvidia-smi -L`` (MIG lines are indented and not counted)."""
    return sum(1 for line in (text or "").splitlines() if re.match(r"^GPU \d+:", line))


def resolve_nproc(value, gpu_count, cpu_nproc):
    """``auto`` -> the GPU count, or ``cpu_nproc`` on a node without GPUs; a number stays a number."""
    if str(value) == "auto":
        if gpu_count:
            return int(gpu_count)
        if cpu_nproc is None:
            raise TorchrunError("nproc_per_node=auto: no GPU found on this node and cpu_nproc is not set")
        value = cpu_nproc
        option = "cpu_nproc"
    else:
        option = "nproc_per_node"
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise TorchrunError("%s=%r: expected 'auto' or a positive integer" % (option, value))
    if number < 1:
        raise TorchrunError("%s=%r: expected a positive integer" % (option, value))
    return number


def visible_gpus(gpus, value):
    """The node's GPUs (``gpus``) that CUDA shows the job's ranks under CUDA_VISIBLE_DEVICES=``value`` (None:
    unset, all of them): its entries before the first invalid one, as CUDA reads it (an index or a GPU-/MIG-
    UUID; ``-1`` or an empty value shows none). An index the node does not have is refused: a typo would
    otherwise start fewer ranks than the user listed GPUs."""
    if value is None or not gpus:
        return gpus
    count = 0
    for entry in str(value).split(","):
        entry = entry.strip()
        index = re.match(r"^[0-9]+$", entry)
        if index and int(entry) >= gpus:
            raise TorchrunError("env[\"CUDA_VISIBLE_DEVICES\"]=%s: GPU %s is not on this node (%d GPUs), "
                                "nproc_per_node=auto cannot count it; valid: indices 0 to %d or GPU-/MIG- "
                                "UUIDs, comma-separated" % (json.dumps(str(value)), entry, gpus, gpus - 1))
        if not (index or entry.startswith(("GPU-", "MIG-"))):
            break
        count += 1
    return count


def is_secret_key(key):
    return bool(SECRET_KEY_RE.search(str(key)))


def secret_values(env):
    """Values to mask: those of keys that look secret (``*TOKEN*``, ``*KEY*``, ``*SECRET*``, ``*PASSWORD*``)."""
    return sorted({str(v) for k, v in (env or {}).items() if is_secret_key(k) and v not in (None, "")},
                  key=len, reverse=True)


def mask(value, secrets):
    """Replace every secret occurrence in a string or a list of strings."""
    if isinstance(value, (list, tuple)):
        return [mask(v, secrets) for v in value]
    if value is None:
        return None
    text = str(value)
    for secret in secrets:
        text = text.replace(secret, MASK)
    return text


def parse_env_file(text, path="<env file>"):
    """``KEY=VALUE`` lines (``#`` comments, blank lines, optional ``export``, optional quotes) -> dict."""
    result = {}
    for number, raw in enumerate((text or "").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export "):].lstrip()
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not ENV_NAME_RE.match(key):
            raise TorchrunError("%s line %d: expected KEY=VALUE, got %r" % (path, number, raw))
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        result[key] = value
    return result


def check_env(env, option="env"):
    """The job's environment: names as keys, one-line values without NUL (it is also recorded in job.json)."""
    for key, value in (env or {}).items():
        if not ENV_NAME_RE.match(str(key)):
            raise TorchrunError("%s[%s]: %r is not a variable name; valid: letters, digits and _, not starting "
                                "with a digit" % (option, json.dumps(str(key)), key))
        text = "" if value is None else str(value)
        if any(c in text for c in "\n\r\x00"):
            raise TorchrunError("%s[%s]: the value holds a newline or NUL; valid: one line"
                                % (option, json.dumps(str(key))))


def build_argv(python, opts):
    """The torchrun command as an argv list; script args are appended verbatim (no shell anywhere)."""
    low, high = parse_nnodes(opts["nnodes"])
    argv = [python, "-m", "torch.distributed.run",
            "--nnodes", nnodes_arg(low, high),
            "--nproc_per_node", str(opts["nproc_per_node"]),
            "--rdzv_backend", opts.get("rdzv_backend") or "c10d",
            "--rdzv_id", validate_job_id(opts["rdzv_id"])]
    if opts.get("rdzv_endpoint"):
        argv += ["--rdzv_endpoint", normalize_endpoint(opts["rdzv_endpoint"])]
    elif high > 1:
        raise TorchrunError("rdzv_endpoint is required when nnodes=%r spans more than one node" % (opts["nnodes"],))
    if opts.get("rdzv_conf"):
        argv += ["--rdzv_conf", format_rdzv_conf(opts["rdzv_conf"])]
    if opts.get("node_rank") is not None:
        if not 0 <= int(opts["node_rank"]) < high:
            raise TorchrunError("node_rank=%r: valid 0..%d for nnodes=%r" % (opts["node_rank"], high - 1, opts["nnodes"]))
        argv += ["--node_rank", str(int(opts["node_rank"]))]
    argv += ["--max_restarts", str(int(opts.get("max_restarts") or 0))]
    if opts.get("local_addr"):
        argv += ["--local_addr", str(opts["local_addr"])]
    if opts.get("log_dir"):
        argv += ["--log_dir", opts["log_dir"], "--redirects", "3"]
        if opts.get("tee"):
            argv += ["--tee", "3"]
    args = opts.get("args") or []
    if not isinstance(args, (list, tuple)):
        raise TorchrunError("args=%r: must be a list (each item reaches the script as one argument)" % (args,))
    # With a rank wrapper (the job's mt_rank.py), torchrun runs the wrapper and the wrapper the
    # script or module, in the rank's own process (_node.rankwrap). local_rank_arg: the wrapper's own
    # option before the script, so that the script gets DeepSpeed's --local_rank=<N>: torchrun's argv is
    # the same for every rank, only the rank's process knows its N.
    wrapper = [opts["wrapper"]] if opts.get("wrapper") else []
    if opts.get("local_rank_arg"):
        if not wrapper:
            raise TorchrunError("local_rank_arg=true needs the rank wrapper (wrapper): only the rank's own "
                                "process knows its local rank")
        wrapper.append(LOCAL_RANK_ARG)
    if opts.get("module"):
        argv += wrapper + ["-m", opts["module"]] if wrapper else ["-m", opts["module"]]
    elif opts.get("script"):
        argv += wrapper + [opts["script"]]
    else:
        raise TorchrunError("one of script or module is required")
    argv += [str(a) for a in args]
    return argv


# ---------------------------------------------------------------- results

def is_peer_error(message, exitcode=None):
    """True for errors that are a consequence of another rank's failure (or a kill by the agent)."""
    if exitcode is not None and exitcode < 0:
        return True
    return bool(message and PEER_ERROR_RE.search(message))


def rank_results(local_ranks, global_ranks, failures, rc, exited=None):
    """Per-rank outcome on this node: exit code and state (succeeded/failed/terminated/unknown).

    ``exited``: local rank -> the exit code its wrapper recorded (its latest attempt). A rank that torchrun
    names no failure for succeeded when torchrun exited 0, and also when its own record says 0: it ended
    before torchrun was stopped (a node that waited in the exit barrier for another that failed)."""
    exited = exited or {}
    by_local = {f["local_rank"]: f for f in failures if f.get("local_rank") is not None}
    results = []
    for index, local in enumerate(local_ranks):
        failure = by_local.get(local)
        entry = {"local_rank": local,
                 "rank": global_ranks[index] if index < len(global_ranks) else None,
                 "exitcode": None, "state": "unknown"}
        if failure:
            entry["exitcode"] = failure["exitcode"]
            entry["state"] = "terminated" if (failure["exitcode"] or 0) < 0 else "failed"
            entry["peer"] = bool(failure.get("peer"))
        elif rc == 0 or exited.get(local) == 0:
            entry["exitcode"], entry["state"] = 0, "succeeded"
        results.append(entry)
    return results


def pick_root_cause(failures):
    """The first failure by time, preferring first-hand errors over peer/terminated ones at a tie.

    Each failure needs ``timestamp`` (float seconds, the error file's mtime when known) and may carry
    ``peer`` (bool). Works across nodes as well as within one.
    """
    candidates = [f for f in failures if f]
    if not candidates:
        return None
    first_hand = [f for f in candidates if not f.get("peer")]
    pool = first_hand or candidates
    return sorted(pool, key=lambda f: (f.get("timestamp") is None, f.get("timestamp") or 0))[0]


def tail(text, lines=20):
    return "\n".join((text or "").splitlines()[-lines:])


def summarize_failure(host, root):
    """One line for humans: ``rank 3 (local 1) on node2 exited 1: RuntimeError: ...``."""
    if not root:
        return "torchrun failed on %s (no rank failure recorded; see torchrun.log)" % host
    return "rank %s (local_rank %s) on %s exited %s: %s" % (
        root.get("rank"), root.get("local_rank"), host, root.get("exitcode"), root.get("message") or "no error message")


def cross_node_root_cause(results, node_errors=None):
    """Every node's result -> the job's root cause: {"root": failure with ``node`` or None, "line": str}.

    ``results`` maps node -> the torchrun module's result (its ``failures``); ``node_errors`` maps
    each failed node -> its error line (used when no rank failure was recorded anywhere, e.g. a
    timeout or a node that could not start). The root is pick_root_cause over all nodes'
    failures: first-hand before peer errors, then the earliest; a failure without a time stamp
    sorts last instead of breaking the comparison.
    """
    failures = []
    for node in sorted(results or {}):
        for failure in (results[node] or {}).get("failures") or []:
            if isinstance(failure, dict):
                failures.append(dict(failure, node=node))
    root = pick_root_cause(failures)
    if root:
        return {"root": root, "line": summarize_failure(root["node"], root)}
    errors = node_errors or {}
    return {"root": None, "line": "; ".join(str(errors[node]) for node in errors)}


def _first(values, empty):
    for value in values:
        if value:
            return value
    return empty


def all_home(results, hosts, failed_nodes=()):
    """The usual end of a launch (roles/train/tasks/launch.yml): no node failed and the wait brought every
    node's job directory home with its result (``collected``) -> True; then nothing is left to stop or
    collect. False for no hosts, a node without a result (unreachable, never waited on) or one whose logs
    the wait did not bring (collected false: the collect fallback fetches them)."""
    hosts = list(hosts or [])
    if not hosts or list(failed_nodes or []):
        return False
    results = results or {}
    return all(isinstance(results.get(host), dict) and results[host].get("collected") is True for host in hosts)


def _nnodes_of(result):
    """The ``--nnodes`` a node's torchrun ran with (its result's ``cmd``) -> (min, max), or None."""
    cmd = result.get("cmd") or []
    if "--nnodes" not in cmd or cmd.index("--nnodes") + 1 >= len(cmd):
        return None
    try:
        return parse_nnodes(cmd[cmd.index("--nnodes") + 1])
    except TorchrunError:
        return None


def elastic_lost(results, hosts, failed_nodes=()):
    """The failed nodes an elastic job finished without -> their list ([] when that is not what happened).

    An elastic job (torchrun ``--nnodes MIN:MAX``, MIN < MAX) goes on when a node is lost: the others'
    torchrun re-rendezvous and finish. Then the lost node is not the job's failure (the play ends rc 0 and
    names it lost). All of it read from the nodes' own results, never from the play's variables:
    every failed node is named lost by the watcher of some other node; every other node's torchrun ran
    elastic and ended rc 0 (not failed, not timed out, not stopped); and they are at least MIN. Anything
    else (a failed rank anywhere, a node failed but not lost, too few left) -> []."""
    results = results or {}
    failed = [host for host in hosts if host in (failed_nodes or [])]
    rest = [host for host in hosts if host not in failed]
    if not failed or not rest:
        return []
    named = set()
    for host in rest:
        result = results.get(host) or {}
        span = _nnodes_of(result)
        if result.get("failed") or result.get("timed_out") or result.get("rc") != 0 \
                or span is None or span[0] == span[1] or len(rest) < span[0]:
            return []
        named.update(result.get("lost") or [])
    return failed if all(host in named for host in failed) else []


def consequence(rank):
    """How a rank other than the first failure ended, for the report: ``consequence`` (stopped, killed,
    terminated by a signal, still running or unknown when the job ended, or failed of a peer's error:
    ``is_peer_error``), ``own`` (failed of an error of its own: a second cause, not a consequence) or ''
    (succeeded). ``rank``: an entry of ``rank_results``."""
    state = rank.get("state")
    if state == "succeeded":
        return ""
    if state == "failed" and not rank.get("peer"):
        return "own"
    return "consequence"


def _root(results, ordered, failed_nodes, node_errors, lost_timeout):
    """job_report's (root_line, first_failure, lost): the watchers' decision, the lost nodes, or the ranks'."""
    stop_line = _first((r.get("stop_line") for r in ordered), "")
    first_failure = _first((r.get("first_failure") for r in ordered), {})
    lost = []
    for result in ordered:
        for node in result.get("lost") or []:
            if node not in lost:
                lost.append(node)
    if stop_line:
        return stop_line, first_failure, lost
    if lost and not [node for node in failed_nodes if node not in lost]:
        return "node %s lost (no heartbeat for %ss)" % (", ".join(lost), lost_timeout), first_failure, lost
    cause = cross_node_root_cause(results, node_errors)
    return cause["line"], first_failure or cause["root"] or {}, lost


def job_report(results, hosts, failed_nodes=(), node_errors=None, job_id="", endpoint="", runs_dir="", log_dir="",
               lost_timeout=10, nnodes=""):
    """The play's report of a finished job (roles/train/tasks/report.yml) from every node's result of
    the torchrun module (O(state=finished); {} for a node that returned none) -> {lines, root_line,
    rank0_log, lost}.

    - ``root_line``: what the nodes' watchers decided (the first failure across the nodes, a lost
      node, an expired lease) wins; a job whose only failed nodes were lost names them as lost (their
      connection errors are not the cause); else ``cross_node_root_cause``.
    - ``lines``: the job (world size, nodes, rendezvous, where the logs are), one line per node (rc,
      ranks, duration, timed out, FAILED), and for a failed job the root cause, the ranks that failed of an
      error of their own besides it and the ranks stopped as its consequence (``consequence``); the lost
      nodes.
    - ``rank0_log``: the controller's copy of global rank 0's stdout ('' when no node reported it).
    """
    results = dict((host, (results or {}).get(host) or {}) for host in hosts)
    ordered = [results[host] for host in hosts]
    failed_nodes = list(failed_nodes or [])
    root_line, first_failure, lost = _root(results, ordered, failed_nodes, node_errors, lost_timeout)
    world = _first((r.get("world_size") for r in ordered), "unknown")
    lines = ["job %s: world size %s on %d node(s), rendezvous %s, logs in %s/%s/"
             % (job_id, world, len(hosts), endpoint, runs_dir, job_id)]
    consequences, own, rank0_log = [], [], ""
    prefix = "%s/%s/" % (log_dir, job_id)
    for host in hosts:
        result = results[host]
        ranks = result.get("ranks") or []
        listed = ",".join(str(r.get("rank")) for r in ranks if r.get("rank") is not None) or "-"
        lines.append("%s: rc %s, ranks %s, %s s%s%s" % (
            host, "none" if result.get("rc") is None else result["rc"], listed,
            "?" if result.get("duration") is None else result["duration"],
            ", timed out" if result.get("timed_out") else "",
            ", FAILED" if host in failed_nodes else ", lost" if host in lost else ""))
        for rank in ranks:
            first = host == first_failure.get("node") and rank.get("local_rank") == first_failure.get("local_rank")
            kind = "" if first else consequence(rank)
            if kind == "consequence":
                consequences.append("rank %s on %s" % (rank.get("rank"), host))
            elif kind == "own":
                own.append("rank %s on %s" % (rank.get("rank"), host))
            if rank.get("rank") == 0 and rank.get("stdout") and not rank0_log:
                stdout = rank["stdout"]
                rank0_log = "%s/%s/%s/%s" % (runs_dir, job_id, host,
                                             stdout[len(prefix):] if stdout.startswith(prefix) else stdout)
    if failed_nodes:
        lines.append("root cause: " + root_line)
        if own:
            lines.append("also failed, of an error of their own: " + ", ".join(own))
        if consequences:
            lines.append("stopped as a consequence: " + ", ".join(consequences))
    if lost:
        lines.append("lost node(s): %s%s" % (", ".join(lost),
                                             " (elastic: the job went on without them)" if ":" in str(nnodes) else ""))
    return {"lines": lines, "root_line": root_line, "rank0_log": rank0_log, "lost": lost}
