# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The per-node side of a Slurm job launched by multinode.training (train_launcher=slurm).

The batch script that module slurm_job renders calls it (see
plugins/module_utils/_launch/slurm.py):

  srun ... python3 slurm_node.py preflight JOB_DIR
      on every node: the ssh launcher's probe (_preflight.py, with the job's settings from
      JOB_DIR/preflight_spec.json, which the batch script writes: the job's python and what it
      holds - env_probe.py run by it -, the script's sha256, train_chdir, the env files, the
      code against the controller's manifest), this node's address on the interface and the
      locked memory its job gets (with its RDMA devices) in JOB_DIR/preflight/<node>.json
  python3 slurm_node.py check JOB_DIR NODE...
      on the batch host: the probes compared as the ssh launcher compares them (the same
      problems, the same words), every node has an address; prints the first node's, or
      fails naming each node and problem; warns naming a node with RDMA devices where the
      job's locked memory is limited
  python3 slurm_node.py fabric-nodes NODE... / fabric-schedule N / fabric-verdict JOB_DIR ... NODE...
      on the batch host, with train_fabric_check warn or gate: the probe's arguments, then the
      verdict on its figures (the ssh launcher's code, _fabric_verdict.py and _fabric_schedule.py
      beside this file); prints the nodes the job runs on, or fails when the gate refuses it
  python3 slurm_node.py guard JOB_ID --heartbeat F --stale N --log L
      on the submit host, started by module slurm_job: scancel the job when the controller
      stops polling
  srun ... P slurm_node.py run JOB_DIR --first NODE ... -- TORCHRUN ARGV...
      on every node: torchrun under the torchrun module's supervisor (supervisor.py, which
      records result.json and kills leftovers carrying the job marker) with this node's
      address (--local_addr), its log directory (--log_dir JOB_DIR/<node>/ranks) and
      is_host on the first node, given through torchrun's PET_* variables; exits with
      torchrun's status, so that srun --kill-on-bad-exit ends the step on every node.

It runs on the nodes with their python (3.9+), standard library only, next to env_probe.py,
_preflight.py, supervisor.py and _torchrun.py in the same directory (module slurm_job writes them
there from its own module_utils/_node).
"""
from __future__ import annotations

import argparse
import fcntl
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SIOCGIFADDR = 0x8915


def node_name():
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def default_interface(route_text):
    """/proc/net/route -> the interface of the default IPv4 route ('' when none)."""
    for line in route_text.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 2 and fields[1] == "00000000":
            return fields[0]
    return ""


def ipv6_global(if_inet6_text, interface):
    """/proc/net/if_inet6 -> the interface's first global (scope 00) IPv6 address, or ''."""
    for line in if_inet6_text.splitlines():
        fields = line.split()
        if len(fields) >= 6 and fields[5] == interface and fields[3] == "00":
            raw = fields[0]
            return socket.inet_ntop(socket.AF_INET6, bytes.fromhex(raw))
    return ""


def _read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return ""


def interfaces():
    return sorted(name for _index, name in socket.if_nameindex())


def address(interface, ip_version):
    """This node's address on the interface (empty: the default route's interface), or ''."""
    interface = interface or default_interface(_read("/proc/net/route"))
    if not interface:
        return interface, ""
    if int(ip_version) == 6:
        return interface, ipv6_global(_read("/proc/net/if_inet6"), interface)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        request = struct.pack("256s", interface.encode()[:15])
        reply = fcntl.ioctl(sock.fileno(), SIOCGIFADDR, request)
        return interface, socket.inet_ntoa(reply[20:24])
    except OSError:
        return interface, ""
    finally:
        sock.close()


def write_json(path, data):
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "w") as handle:
        json.dump(data, handle, indent=1, sort_keys=True)
    os.rename(tmp, path)


# ------------------------------------------------------------------ preflight

SPEC = "preflight_spec.json"


def _run(argv):
    done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
    return done.returncode, done.stdout, done.stderr


def read_json(path):
    with open(path) as handle:
        return json.load(handle)


def preflight(opts):
    """This node's probe - the ssh launcher's (_preflight.py: the job's python and what it holds, the
    script, train_chdir, the env files, the code against the controller's manifest) - with its address on
    the interface and the locked memory its job gets, in JOB_DIR/preflight/<node>.json."""
    sys.path.insert(0, HERE)
    from _preflight import probe_node  # pylint: disable=import-error
    from _torchrun import job_memlock  # pylint: disable=import-error

    spec = read_json(os.path.join(opts.job_dir, SPEC))
    node = node_name()
    record = {"node": node, "interface": spec.get("interface") or "", "ip_version": spec.get("ip_version") or 4}
    # the locked memory the job's step gets here (run lifts the soft limit to this hard one)
    record["memlock"] = job_memlock()
    record["used_interface"], record["address"] = address(record["interface"], record["ip_version"])
    record["interfaces"] = interfaces()
    record["probe"] = probe_node(spec["python"], _run, spec.get("script"), spec.get("chdir"),
                                 spec.get("env_files") or [], None, spec.get("code"))
    directory = os.path.join(opts.job_dir, "preflight")
    os.makedirs(directory, exist_ok=True)
    write_json(os.path.join(directory, node + ".json"), record)
    return 0


def address_problems(records, nodes):
    """The nodes without an address on the interface (the ssh launcher's address step, here) -> lines."""
    errors = []
    for node in nodes:
        rec = records.get(node)
        if rec and not rec.get("address"):
            errors.append("%s: no IPv%s address on train_interface=%s (used: %s); valid: one of %s"
                          % (node, rec.get("ip_version", 4), json.dumps(rec.get("interface")),
                             rec.get("used_interface") or "none", ", ".join(rec.get("interfaces") or [])))
    return errors


def check(opts):
    """Every node's probe compared as the ssh launcher compares them (_preflight.compare, and the venvs with
    the lock of this run), the addresses and the locked memory: prints the first node's address, or fails
    naming each node and problem."""
    sys.path.insert(0, HERE)
    from _preflight import compare, lock_problems, probe_packages  # pylint: disable=import-error
    from _torchrun import memlock_warning  # pylint: disable=import-error

    spec = read_json(os.path.join(opts.job_dir, SPEC))
    records = {}
    for node in opts.nodes:
        path = os.path.join(opts.job_dir, "preflight", node + ".json")
        if os.path.exists(path):
            records[node] = read_json(path)
    probes = {node: rec.get("probe") for node, rec in records.items()}
    errors = address_problems(records, opts.nodes) + compare(
        probes, opts.nodes, opts.nodes[0], spec.get("venv") or "", spec.get("require_deepspeed", True),
        spec.get("interface") or "", spec.get("deepspeed_config") or {}, spec.get("allow_jit", False))
    if spec.get("lock"):  # as the ssh launcher's filter package_lock_problems with the lock of this run
        errors += lock_problems(probe_packages(probes), spec.get("venv") or "", spec["lock"])
    warnings = [line for line in (memlock_warning(node, (records.get(node) or {}).get("memlock"), "slurm")
                                  for node in opts.nodes) if line]
    for line in warnings:
        sys.stderr.write("multinode.training preflight: warning: %s\n" % line)
    first = records.get(opts.nodes[0]) or {}
    addr = first.get("address") or ""
    write_json(os.path.join(opts.job_dir, "preflight.json"),
               {"nodes": opts.nodes, "errors": errors, "warnings": warnings, "rdzv_addr": addr, "records": records})
    if errors:
        for line in errors:
            sys.stderr.write("multinode.training preflight: %s\n" % line)
        return 3
    sys.stdout.write(("[%s]" % addr if ":" in addr else addr) + "\n")
    return 0


# ------------------------------------------------------------------ fabric check (batch host)

def fabric_nodes(opts):
    """The allocated nodes as the probe's JSON list (--probe-nodes)."""
    sys.stdout.write(json.dumps(opts.nodes) + "\n")
    return 0


def fabric_schedule(opts):
    """The pairing schedule for N nodes (--schedule), from the same code as the ssh launcher's filter."""
    sys.path.insert(0, HERE)
    from _fabric_schedule import rounds  # pylint: disable=import-error

    sys.stdout.write(json.dumps(rounds(opts.count)) + "\n")
    return 0


def fabric_verdict(opts):
    """Judge the probe's figures (the first node's ``fabric/<node>/fabric.json``) with the ssh launcher's
    verdict; write ``fabric.json`` (the verdict, the result, nodes without one), print the matrix on
    stderr and the nodes to run on, one per line, on stdout. Exit 3 when the gate refuses the job."""
    sys.path.insert(0, HERE)
    from _fabric_verdict import LINE_RATIO, RATIO, FabricError, verdict  # pylint: disable=import-error

    result, missing = None, []
    for node in opts.nodes:
        path = os.path.join(opts.job_dir, "fabric", node, "fabric.json")
        try:
            with open(path) as handle:
                result = result or json.load(handle)
        except (OSError, ValueError):
            missing.append("%s: no fabric result (the probe failed or hung there; see %s)" % (
                node, os.path.join(opts.job_dir, "fabric", node, "torchrun.log")))
    result = result or {"nodes": [], "links": [], "compute": {}}
    try:
        out = verdict(result, opts.nodes, opts.mode, RATIO if opts.ratio is None else opts.ratio,
                      opts.min_gbps or None, opts.nnodes,
                      LINE_RATIO if opts.line_ratio is None else opts.line_ratio)
    except FabricError as exc:
        sys.stderr.write("multinode.training fabric: %s\n" % exc)
        return 2
    out.update(result=result, errors=missing, mode=opts.mode)
    write_json(os.path.join(opts.job_dir, "fabric.json"), out)
    for line in ["fabric check: " + out["headline"]] + out["matrix"] + out["summary"] + missing:
        sys.stderr.write("multinode.training fabric: %s\n" % line)
    if out["action"] == "fail":
        sys.stderr.write("multinode.training fabric: train_fabric_check=gate: the job is not started; slow: %s\n"
                         % " || ".join(out["summary"]))
        return 3
    if out["action"] == "drop":
        sys.stderr.write("multinode.training fabric: train_fabric_check=gate: the job starts on %s "
                         "(train_nnodes=%s); dropped: %s\n" % (", ".join(out["keep"]), opts.nnodes,
                                                               ", ".join(out["drop"])))
    kept = out["keep"] if out["action"] == "drop" else opts.nodes
    sys.stdout.write("".join(node + "\n" for node in kept))
    return 0


# ------------------------------------------------------------------ run

def run(opts):
    sys.path.insert(0, HERE)
    from _torchrun import (  # pylint: disable=import-error
        JOB_DIR_ENV, JOB_ENV, STOP_GRACE, lift_memlock, parse_env_file, recorder_env)

    node = node_name()
    job_id = "slurm-%s" % os.environ.get("SLURM_JOB_ID", "0")
    node_dir = os.path.join(opts.job_dir, node)
    os.makedirs(os.path.join(node_dir, "ranks"), exist_ok=True)
    env = dict(os.environ)
    for path in opts.env_file:
        env.update(parse_env_file(_read(path), path))
    _iface, addr = address(opts.interface, opts.ip_version)
    conf = [item for item in (opts.rdzv_conf or "").split(",") if item]
    conf.append("is_host=%s" % ("true" if node == opts.first else "false"))
    env.update({
        JOB_ENV: job_id, JOB_DIR_ENV: node_dir,
        "TORCHELASTIC_ERROR_FILE": os.path.join(node_dir, "torchrun_error.json"),
        "PET_LOG_DIR": os.path.join(node_dir, "ranks"), "PET_REDIRECTS": "3",
        "PET_RDZV_CONF": ",".join(conf),
    })
    env.setdefault("TORCH_EXTENSIONS_DIR", os.path.join(node_dir, "torch_extensions"))
    if addr:
        env["PET_LOCAL_ADDR"] = addr
    if opts.tee:
        env["PET_TEE"] = "3"
    env.setdefault("LOGLEVEL", "INFO")
    env.setdefault("PYTHONUNBUFFERED", "1")
    recorder_env(env)  # the straggler rule's and the hang's flight recorder, as under the ssh launcher
    argv = opts.argv
    if not argv:
        sys.stderr.write("slurm_node.py run: no command after --\n")
        return 2
    write_json(os.path.join(node_dir, "job.json"),
               {"job_id": job_id, "host": node, "cmd": argv, "local_addr": addr, "start": time.time(),
                "is_host": node == opts.first})
    # NCCL over InfiniBand/RoCE needs locked memory: the soft limit slurmd gave the step (by default the
    # submit shell's soft limit, capped by slurmd's hard one: slurm.conf(5) PropagateResourceLimits, Slurm
    # 22.05) up to the hard one, for torchrun and the ranks; preflight warned where even that is a limit.
    lift_memlock()
    # Slurm signals every process of the step: the supervisor records the stop, this waits for it.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    supervisor = [sys.executable, os.path.join(HERE, "supervisor.py"), node_dir, job_id, str(opts.timeout),
                  str(STOP_GRACE if opts.stop_grace is None else opts.stop_grace), opts.chdir or node_dir, "--"] + argv
    with open(os.path.join(node_dir, "torchrun.log"), "ab") as log:
        rc = subprocess.call(supervisor, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                             preexec_fn=lambda: [signal.signal(s, signal.SIG_DFL) for s in (
                                 signal.SIGTERM, signal.SIGINT, signal.SIGHUP)])
    result = {}
    try:
        with open(os.path.join(node_dir, "result.json")) as handle:
            result = json.load(handle)
    except (OSError, ValueError):
        pass
    code = result.get("rc", rc)
    sys.stdout.write("multinode.training: %s torchrun rc %s\n" % (node, code))
    return 0 if code == 0 else (code if isinstance(code, int) and 0 < code < 256 else 1)


# ------------------------------------------------------------------ guard (submit host)

def guard(opts):
    """Cancel the job when the controller stops polling (Ctrl-C, lost connection): module slurm_job
    touches HEARTBEAT at every poll; once it is older than --stale seconds the job is scancel'ed,
    queued or running. Ends when the job has left the queue."""
    def log(text):
        with open(opts.log, "a") as handle:
            handle.write("%s %s\n" % (time.strftime("%Y-%m-%dT%H:%M:%S"), text))
    while True:
        queued = subprocess.run(["squeue", "-h", "-j", opts.job_id, "-o", "%T"], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, universal_newlines=True, check=False)
        state = queued.stdout.strip()
        if queued.returncode == 0 and not state:
            return 0
        try:
            silent = time.time() - os.path.getmtime(opts.heartbeat)
        except OSError:
            silent = opts.stale + 1
        if silent > opts.stale:
            log("controller silent for %ds (job %s %s): scancel" % (silent, opts.job_id, state or "?"))
            subprocess.run(["scancel", opts.job_id], check=False)
            return 0
        time.sleep(2)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    sub.required = True
    pre = sub.add_parser("preflight")
    pre.add_argument("job_dir")
    chk = sub.add_parser("check")
    chk.add_argument("job_dir")
    chk.add_argument("nodes", nargs="+")
    rn = sub.add_parser("run")
    rn.add_argument("job_dir")
    rn.add_argument("--first", required=True)
    rn.add_argument("--interface", default="")
    rn.add_argument("--ip-version", type=int, default=4, choices=(4, 6))
    rn.add_argument("--timeout", type=int, default=0)
    rn.add_argument("--stop-grace", type=int)
    rn.add_argument("--rdzv-conf", default="")
    rn.add_argument("--env-file", action="append", default=[])
    rn.add_argument("--chdir")
    rn.add_argument("--tee", action="store_true")
    fnd = sub.add_parser("fabric-nodes")
    fnd.add_argument("nodes", nargs="+")
    fsc = sub.add_parser("fabric-schedule")
    fsc.add_argument("count", type=int)
    fvd = sub.add_parser("fabric-verdict")
    fvd.add_argument("job_dir")
    fvd.add_argument("--mode", required=True, choices=("warn", "gate"))
    fvd.add_argument("--ratio", type=float)
    fvd.add_argument("--min-gbps", type=float, default=0.0)
    fvd.add_argument("--line-ratio", type=float)
    fvd.add_argument("--nnodes", default="")
    fvd.add_argument("nodes", nargs="+")
    grd = sub.add_parser("guard")
    grd.add_argument("job_id")
    grd.add_argument("--heartbeat", required=True)
    grd.add_argument("--stale", type=int, required=True)
    grd.add_argument("--log", required=True)
    return parser.parse_args(argv)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[argv.index("--") + 1:] if "--" in argv else []
    opts = parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    opts.argv = command
    return {"preflight": preflight, "check": check, "run": run, "guard": guard, "fabric-nodes": fabric_nodes,
            "fabric-schedule": fabric_schedule, "fabric-verdict": fabric_verdict}[opts.command](opts)


if __name__ == "__main__":
    sys.exit(main())
