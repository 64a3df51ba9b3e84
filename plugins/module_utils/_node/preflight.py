# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Preflight of a training job, for every launcher: one probe per node, one comparison across the nodes.

``probe_node`` is each node's part (one round trip): the job's python (exists, executable, and what
it holds - env_probe.py run by it), the script's sha256, the working directory, the env files, the
node's copy of train_code_src against the controller's manifest, a TCP connect to the rendezvous
address. ``compare`` takes every node's probe and returns the problems, one line each in the
validator's shape (``<node>: <variable>=<value>: what is wrong; valid: ...``).

One implementation for every launcher, so that each refuses the same things with the same words:
the ssh launcher runs the probe in module train_node (access and probe steps) and compares in
filter multinode.training.train_preflight_problems on the controller; the Slurm launcher ships this
file beside roles/train/files/slurm_node.py (module slurm_job writes it as ``_preflight.py``), whose
preflight step probes every node and whose check compares them on the batch host before torchrun
starts; the env launcher probes its own container and compares it with itself. The venvs against
the lock of this run (``lock_problems``) are checked by the ssh launcher's filter
package_lock_problems and by the Slurm check alike. Standard library only, no sibling imported (the
rule of ``_node/``): it runs on the node's python (3.9+) without Ansible.
"""
from __future__ import annotations

import grp
import hashlib
import json
import os
import pwd
import re
import socket
import stat
import time

ENV_KEYS = ("python", "torch", "deepspeed", "ops")
# Seconds the probe's test connection to the rendezvous address waits (role train passes none): a
# TCP connect on a cluster network answers in milliseconds, and 15 s outlast the kernel's first SYN
# retries (1 s, 3 s, 7 s) where a node is slow to answer (docs/design.md, "Fixed timings").
CONNECT_TIMEOUT = 15
# What to do about a path a node lacks, by the variable that names it (also the security step's).
MISSING_HINTS = {
    "train_python": "the venv that multinode.training.wheel_distribute installs (tag prepare)",
    "train_script": "a file of train_code_src (copied into train_code_dir), or a file that exists on every node",
    "train_chdir": "an existing directory on every node, or one that train_code_src brings into train_code_dir, "
                   "or empty (the directory of train_script)",
    "train_data_paths": "paths that exist on every node (shared storage, or copied there before the job)",
    "train_env_files": "existing KEY=VALUE files",
    "train_nccl": ("the NCCL env file multinode.training.nccl_tuning writes (tag nccl), or train_nccl=false "
                   "to leave it out"),
}
# The DeepSpeed optimizer offload devices that make DeepSpeed use its CPU optimizers (needed_ops).
OFFLOAD_DEVICES = ("cpu", "nvme")


def sha256_file(path):
    """sha256 of a file's content, read in 1 MiB blocks. Written again (the module side takes _data/worker.py's):
    this file and the data worker each run alone on the nodes, from their source."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# ------------------------------------------------------------------ the probe (each node)

def code_differences(dest, manifest, owner=None, group=None):
    """The node's copy under ``dest`` against the controller's ``manifest`` -> relative paths that
    differ (missing, other content, mode, owner or - when given - group), sorted."""
    differ = []
    for rel in sorted(manifest or {}):
        want = manifest[rel]
        path = os.path.join(dest, rel)
        try:
            st = os.stat(path)
        except OSError:
            differ.append(rel)
            continue
        if not stat.S_ISREG(st.st_mode) or "%04o" % stat.S_IMODE(st.st_mode) != want.get("mode") or \
                (owner and _name(pwd.getpwuid, st.st_uid) != owner) or \
                (group and _name(grp.getgrgid, st.st_gid) != group) or sha256_file(path) != want.get("sha256"):
            differ.append(rel)
    return differ


def _name(lookup, number):
    try:
        entry = lookup(number)
    except KeyError:
        return str(number)
    return getattr(entry, "pw_name", None) or getattr(entry, "gr_name", None)


def env_probe_source():
    """env_probe.py, beside this file on the node and in the collection."""
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "env_probe.py")) as handle:
        return handle.read()


def try_connect(host, port, timeout, interval=0.25):
    """TCP connect to host:port, retried every ``interval`` s for up to ``timeout`` s -> {ok, error, seconds}."""
    start = time.time()
    error = None
    while True:
        try:
            sock = socket.create_connection((host, int(port)), timeout=max(1.0, min(5.0, timeout)))
            sock.close()
            return {"ok": True, "error": None, "seconds": round(time.time() - start, 3)}
        except (OSError, ValueError) as exc:
            error = str(exc)
        if time.time() - start + interval > timeout:
            return {"ok": False, "error": error, "seconds": round(time.time() - start, 3)}
        time.sleep(interval)


def probe_node(python, run, script=None, chdir=None, env_files=(), connect=None, code=None, probe_source=None):
    """Everything preflight compares, from this node.

    ``run(argv) -> (rc, stdout, stderr)`` runs the job's python; ``env_files`` is a list of
    {var, path}; ``connect`` ({host, port, timeout}) is the rendezvous address to reach over TCP;
    ``code`` ({dest, manifest, owner, group}) the controller's train_code_src to compare the node's
    copy with (``same``: no copy needed); ``probe_source`` env_probe.py's source (default: the file beside
    this one; a module passes its own, as AnsiballZ has no file). Never raises for what it finds: problems
    are for ``compare``.
    """
    out = {"python": {"path": python, "executable": bool(python) and os.path.isfile(python)
                      and os.access(python, os.X_OK)},
           "environment": None, "probe_error": None}
    if out["python"]["executable"]:
        rc, stdout, stderr = run([python, "-c", probe_source or env_probe_source()])
        try:
            out["environment"] = json.loads(stdout) if rc == 0 else None
        except ValueError:
            out["environment"] = None
        if out["environment"] is None:
            out["probe_error"] = ("rc %s: %s" % (rc, (stderr or stdout or "").strip().splitlines()[-1:] or ""))[:500]
    if script:
        exists = os.path.isfile(script)
        out["script"] = {"path": script, "exists": exists, "sha256": sha256_file(script) if exists else None}
    else:
        out["script"] = None
    out["chdir"] = {"path": chdir, "isdir": os.path.isdir(chdir)} if chdir else None
    out["env_files"] = [{"var": f.get("var"), "path": f.get("path"), "exists": os.path.isfile(f.get("path") or "")}
                        for f in env_files or []]
    if code:
        differ = code_differences(code.get("dest") or "", code.get("manifest") or {}, code.get("owner"),
                                  code.get("group"))
        out["code"] = {"dest": code.get("dest"), "same": not differ, "differ": differ[:20], "count": len(differ)}
    else:
        out["code"] = None
    if connect:
        out["connect"] = dict(try_connect(connect["host"], connect["port"], float(connect.get("timeout") or CONNECT_TIMEOUT)),
                              host=connect["host"], port=int(connect["port"]))
    else:
        out["connect"] = None
    return out


# ------------------------------------------------------------------ what the DeepSpeed config needs

def _zero(config):
    zero = config.get("zero_optimization")
    return zero if isinstance(zero, dict) else {}


def _device(section):
    return str((section or {}).get("device") or "none").lower() if isinstance(section, dict) else "none"


def needed_ops(config):
    """DeepSpeed config (parsed JSON) -> [(op, why)] in the order DeepSpeed would load them.

    An op the wheel lacks is JIT-compiled by every rank of every node at the first step (minutes, a compiler
    and the CUDA toolkit on every node, or a crash where there is none): what the collection's prebuilt wheel
    exists to prevent. DeepSpeed 0.19's engine picks the optimizer class from the config
    (``DeepSpeedEngine._configure_basic_optimizer`` and ``get_optimizer_configuration``):

    - Adam / AdamW: ``torch_adam: true`` uses torch's (no op); with ZeRO's ``offload_optimizer`` on cpu or
      nvme, ``DeepSpeedCPUAdam`` (op ``cpu_adam``); otherwise ``FusedAdam`` (op ``fused_adam``).
    - Lamb: ``FusedLamb`` (``fused_lamb``). Lion: offloaded ``DeepSpeedCPULion`` (``cpu_lion``), else
      ``FusedLion`` (``fused_lion``). Adagrad: offloaded ``DeepSpeedCPUAdagrad`` (``cpu_adagrad``), else torch's.
    - An optimizer or parameter offload to nvme reads and writes through ``async_io``.

    A config without an ``optimizer`` section leaves the optimizer to the script: nothing is claimed for it.
    """
    zero = _zero(config)
    # as DeepSpeed's zero_use_cpu_optimizer: the device alone decides
    offloaded = _device(zero.get("offload_optimizer")) in OFFLOAD_DEVICES
    optimizer = config.get("optimizer") if isinstance(config.get("optimizer"), dict) else {}
    name = str(optimizer.get("type") or "").lower()
    params = optimizer.get("params") if isinstance(optimizer.get("params"), dict) else {}
    where = "with ZeRO offload_optimizer to %s" % _device(zero.get("offload_optimizer")) if offloaded else \
        "without offload_optimizer"
    ops = []
    if name in ("adam", "adamw") and not params.get("torch_adam"):
        ops.append(("cpu_adam" if offloaded else "fused_adam", 'optimizer "%s" %s' % (optimizer["type"], where)))
    elif name == "lamb":
        ops.append(("fused_lamb", 'optimizer "%s"' % optimizer["type"]))
    elif name == "lion":
        ops.append(("cpu_lion" if offloaded else "fused_lion", 'optimizer "%s" %s' % (optimizer["type"], where)))
    elif name == "adagrad" and offloaded:
        ops.append(("cpu_adagrad", 'optimizer "%s" %s' % (optimizer["type"], where)))
    for key in ("offload_optimizer", "offload_param"):
        if _device(zero.get(key)) == "nvme":
            ops.append(("async_io", "ZeRO %s to nvme" % key))
    return ops


def op_name(binary):
    """A prebuilt op's name from its binary's stem ('fused_adam_op' -> 'fused_adam')."""
    return binary[:-3] if binary.endswith("_op") else binary


def config_ops_problems(text, path, node, node_ops, allow_jit=False, label=None):
    """The DeepSpeed config ``text`` (train_deepspeed_config at ``path``) against the ops prebuilt in ``node``'s
    environment (``node_ops``: the probe's binaries) -> problem lines (empty with ``allow_jit``: DeepSpeed then
    JIT-compiles what is missing on every node, as the user asked). ``label``: how the messages name the
    config (default ``train_deepspeed_config=<path>``)."""
    label = label or "train_deepspeed_config=%s" % path
    try:
        config = json.loads(text)
    except ValueError as exc:
        return ["%s: not JSON (%s); valid: a DeepSpeed JSON config" % (label, exc)]
    if not isinstance(config, dict):
        return ["%s: not a JSON object; valid: a DeepSpeed JSON config" % label]
    have = sorted(set(op_name(op) for op in node_ops or []))
    problems = []
    for op, why in needed_ops(config):
        if op in have or allow_jit:
            continue
        problems.append(
            "%s: %s makes DeepSpeed load op %s, which the DeepSpeed on %s does not have "
            "prebuilt (it has: %s): every rank would JIT-compile it at the first step; valid: a wheel with it - "
            "add %s to deepspeed_build_ops and build again (build_deepspeed.yml) - or train_allow_jit=true"
            % (label, why, op, node, ", ".join(have) or "none", op))
    return problems


# ------------------------------------------------------------------ the package sets

def canonicalize_name(name):
    """PEP 503's normalized project name ('Foo_Bar.baz' -> 'foo-bar-baz'), as packaging.utils has it: the one
    rule of the collection (requirements, sdist, seed and space take it from here)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_set(specs):
    """['Foo_Bar==1.0', ...] -> {'foo-bar': '1.0'}; a line without '==' keeps an empty version."""
    out = {}
    for spec in specs:
        name, _sep, version = str(spec).partition("==")
        out[canonicalize_name(name.strip())] = version.strip()
    return out


def differences(sets):
    """{node: [name==version]} -> one line per package that is not the same on every node.

    Each line names the package and, grouped by version, the nodes (a missing package is
    "not installed"); the most common state comes last, so the odd node comes first.
    """
    parsed = {node: parse_set(specs) for node, specs in sets.items()}
    names = sorted(set().union(*[set(p) for p in parsed.values()])) if parsed else []
    lines = []
    for name in names:
        groups = {}
        for node in sets:
            groups.setdefault(parsed[node].get(name), []).append(node)
        if len(groups) < 2:
            continue
        ordered = sorted(groups.items(), key=lambda kv: (len(kv[1]), kv[0] is None, kv[0] or ""))
        parts = ["%s on %s" % (("%s==%s" % (name, version)) if version is not None else "not installed",
                               ", ".join(sorted(nodes)))
                 for version, nodes in ordered]
        lines.append("%s: %s" % (name, "; ".join(parts)))
    return lines


# What a fresh venv holds before anything is installed into it (python -m venv seeds pip, and
# setuptools before Python 3.12): not part of a lock, never counted as extra.
VENV_SEED = ("pip", "setuptools")


def lock_differences(installed, lock, seed=VENV_SEED):
    """[name==version] installed in a venv, [name==version] of its lock -> one line per package that differs.

    Every package of the lock must be installed at the locked version; a package installed but not in
    the lock is extra (the venv's seed packages excepted, unless the lock pins them). Empty: the venv
    holds exactly the lock.
    """
    have, want = parse_set(installed), parse_set(lock)
    lines = []
    for name in sorted(set(have) | set(want)):
        if name not in want:
            if name not in seed:
                lines.append("%s==%s installed, not in the lock" % (name, have[name]))
        elif name not in have:
            lines.append("%s: the lock has %s, not installed" % (name, want[name]))
        elif have[name] != want[name]:
            lines.append("%s: the lock has %s, installed %s" % (name, want[name], have[name]))
    return lines


def venv_problems(diffs, venv, against):
    """{node: [what differs]} of the nodes' venvs against ``against`` (the lock, or the job requirements) ->
    one line per node that differs, naming the venv and every package."""
    return ["%s: the venv %s does not hold %s: %s; valid: the venv that multinode.training.wheel_distribute "
            "installs from train_requirements (run with tag prepare)" % (node, venv, against, " | ".join(diff))
            for node, diff in sorted(diffs.items()) if diff]


def probe_packages(probes):
    """{node: probe_node()} -> {node: [name==version]} of the nodes whose probe listed their packages."""
    return {str(node): [str(spec) for spec in ((probe or {}).get("environment") or {}).get("packages")]
            for node, probe in probes.items() if ((probe or {}).get("environment") or {}).get("packages")}


def lock_problems(packages, venv, lock):
    """{node: [name==version] of its venv} against the lock of this run (wheel_distribute resolved it: every
    package of the environment) -> one line per node whose venv is not exactly the lock."""
    return venv_problems({node: lock_differences(packages[node], lock) for node in packages}, venv,
                         "the job requirements' lock")


# ------------------------------------------------------------------ the comparison

def _env(probe):
    environment = (probe or {}).get("environment") or {}
    return {key: environment.get(key) for key in ENV_KEYS}


def endpoint(host, port):
    return "[%s]:%s" % (host, port) if ":" in str(host) else "%s:%s" % (host, port)


def environment_problem(host, probe, first, reference, venv, require_deepspeed):
    """One node's python against the first node's -> a problem line or None: missing, its probe
    failed, it lacks torch (or DeepSpeed, when required), or its environment differs."""
    j = json.dumps
    python = probe["python"]["path"]
    if not probe["python"]["executable"]:
        return ("%s: train_python=%s: missing or not executable on this node (train_venv=%s); valid: the "
                "venv that multinode.training.wheel_distribute installs (tag prepare)" % (host, j(python), j(venv)))
    if probe.get("environment") is None:
        return ("%s: train_python=%s: the environment probe failed (%s); valid: a python 3.8+ with torch "
                "(the venv of multinode.training.wheel_distribute, tag prepare)"
                % (host, j(python), probe.get("probe_error")))
    mine, first_env = _env(probe), _env(reference)
    lacks = [name for name in ("torch", "deepspeed") if mine[name] is None
             and (name == "torch" or require_deepspeed)]
    if lacks:
        return ("%s: train_python=%s: lacks %s; valid: the venv that multinode.training.wheel_distribute "
                "installs (tag prepare)%s" % (host, j(python), " and ".join(lacks), (
                    ", or train_require_deepspeed=false" if lacks == ["deepspeed"] else "")))
    if host != first and reference.get("environment") is not None and mine != first_env:
        return ("%s: train_python=%s: its environment %s differs from %s's %s; valid: the same python, "
                "torch, DeepSpeed and ops on all nodes (run with tag prepare)"
                % (host, j(python), j(mine, sort_keys=True), first, j(first_env, sort_keys=True)))
    return None


def file_problems(host, probe, first, first_sum, interface):
    """One node's script (against the first node's sha256), chdir, env files, its copy of the code and its
    connect to the rendezvous -> problem lines."""
    j = json.dumps
    problems = []
    script = probe.get("script")
    if script is not None:
        if not script["exists"]:
            problems.append("%s: train_script=%s: missing on this node; valid: the same file on all nodes "
                            "(train_code_src is copied there)" % (host, j(script["path"])))
        elif host != first and script["sha256"] != first_sum:
            problems.append("%s: train_script=%s: sha256 %s differs from %s's %s; valid: the same file on all nodes "
                            "(train_code_src is copied there)" % (host, j(script["path"]), script["sha256"], first, first_sum))
    chdir = probe.get("chdir")
    if chdir is not None and not chdir["isdir"]:
        problems.append("%s: train_chdir=%s: not a directory on this node; valid: an existing directory on every "
                        "node, or empty (the directory of train_script)" % (host, j(chdir["path"])))
    for entry in probe.get("env_files") or []:
        if not entry["exists"]:
            problems.append("%s: %s=%s: missing on this node; valid: %s" % (
                host, entry["var"], j(entry["path"]), MISSING_HINTS.get(entry["var"], MISSING_HINTS["train_env_files"])))
    code = probe.get("code")
    if code is not None and not code["same"]:
        problems.append("%s: train_code_dir=%s: %d file(s) differ from the controller's train_code_src (%s); valid: "
                        "the same code on every node (train_code_src is copied there; on storage the nodes share, "
                        "a node that mounts it)" % (host, j(code["dest"]), code.get("count", len(code["differ"])),
                                                    ", ".join(code["differ"][:5])))
    reach = probe.get("connect")
    if reach and not reach["ok"]:
        problems.append("%s: train_rdzv_port=%s: this node cannot connect to the rendezvous address %s (%s, "
                        "train_interface=%s) within %ss (%s); valid: an interface all nodes reach, a port the "
                        "firewall lets through" % (host, reach["port"], endpoint(reach["host"], reach["port"]), first,
                                                   j(interface), int(reach["seconds"]), reach["error"]))
    return problems


def compare(probes, hosts, first, venv="", require_deepspeed=True, interface="", deepspeed_config=None,
            allow_jit=False):
    """{node: probe_node()} -> problem lines (empty: every node is ready and the same).

    ``hosts`` gives the order of the nodes, ``first`` the node the others are compared with (it
    hosts the rendezvous), ``interface`` its train_interface, for messages. ``deepspeed_config``: the
    DeepSpeed config the job uses, as the controller read it ({text, path, label}: train_deepspeed_config, or
    the one an accelerate config names, _train.ds_ops.job_deepspeed_config; {problem} when it cannot be read;
    {} for none): the ops it makes DeepSpeed load must be prebuilt in the first node's environment (the
    others must equal it), unless ``allow_jit``.
    """
    deepspeed_config = dict(deepspeed_config or {})
    problems = []
    reference = probes.get(first) or {}
    first_sum = ((reference.get("script") or {}).get("sha256")) or "none"
    packages = {}
    for host in hosts:
        probe = probes.get(host)
        if not probe:
            problems.append("%s: no preflight probe result (the node did not answer)" % host)
            continue
        problem = environment_problem(host, probe, first, reference, venv, require_deepspeed)
        if problem:
            problems.append(problem)
        if probe["python"]["executable"] and probe.get("environment") is not None:
            packages[host] = probe["environment"].get("packages") or []
        problems.extend(file_problems(host, probe, first, first_sum, interface))
    environment = reference.get("environment") or {}
    if deepspeed_config.get("problem"):
        problems.append(deepspeed_config["problem"])
    if deepspeed_config.get("text") is not None and environment.get("deepspeed"):
        problems.extend(config_ops_problems(deepspeed_config["text"], deepspeed_config.get("path") or "",
                                            first, environment.get("ops"), allow_jit, deepspeed_config.get("label")))
    if len(packages) > 1:
        diff = differences(packages)
        if diff:
            problems.append("the venvs (%s) differ between the nodes: %s; valid: the same package set on all nodes "
                            "(wheel_distribute_requirements / train_requirements install the job's packages on every "
                            "node; run with tag prepare)" % (venv, " | ".join(diff)))
    return problems
