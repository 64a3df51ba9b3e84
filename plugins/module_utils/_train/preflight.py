# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Preflight of a training job: one probe per node, one comparison across the nodes.

``probe_node`` is module train_node (probe)'s work on a node (one round trip): the job's python
(exists, executable, and what it holds - env_probe.py run by it), the script's sha256,
the working directory, the env files. ``compare`` takes every node's probe and returns the
problems, one line each in the validator's shape (``<node>: <variable>=<value>: what is wrong;
valid: ...``); filter multinode.training.train_preflight_problems is its face in role train.
"""
from __future__ import annotations

import grp
import inspect
import json
import os
import pwd
import socket
import stat
import time

from ansible_collections.multinode.training.plugins.module_utils._node import env_probe
from ansible_collections.multinode.training.plugins.module_utils._build.manifest import sha256_file
from ansible_collections.multinode.training.plugins.module_utils._train.ds_ops import (
    accelerate_deepspeed_config,
    config_ops_problems,
)
from ansible_collections.multinode.training.plugins.module_utils._train.security import MISSING_HINTS
from ansible_collections.multinode.training.plugins.module_utils._wheel.package_set import differences

ENV_KEYS = ("python", "torch", "deepspeed", "ops")
# Seconds the probe's test connection to the rendezvous address waits (role train passes none): a
# TCP connect on a cluster network answers in milliseconds, and 15 s outlast the kernel's first SYN
# retries (1 s, 3 s, 7 s) where a node is slow to answer (docs/design.md, "Fixed timings").
CONNECT_TIMEOUT = 15


class CodeError(ValueError):
    """train_code_src cannot be read on the controller."""


def code_manifest(src):
    """train_code_src (controller) -> {relative path on the node: {"sha256", "mode"}}, the paths
    ansible.builtin.copy gives them under the destination directory: a file by its name, a
    directory ending in ``/`` by its contents, any other directory under its own name; links
    followed (copy's local_follow), mode as copy's ``mode: preserve`` sets it."""
    text = str(src or "")
    path = text.rstrip("/") or "/"
    if not os.path.exists(path):
        raise CodeError("train_code_src=%s: does not exist on the controller; valid: a file or directory" % text)
    if os.path.isfile(path):
        return {os.path.basename(path): _file_entry(path)}
    base = path if text.endswith("/") else os.path.dirname(path)
    files = {}
    for root, _dirs, names in os.walk(path, followlinks=True):
        for name in names:
            full = os.path.join(root, name)
            if os.path.isfile(full):
                files[os.path.relpath(full, base)] = _file_entry(full)
    return files


def _file_entry(path):
    return {"sha256": sha256_file(path), "mode": "%04o" % stat.S_IMODE(os.stat(path).st_mode)}


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
    """Source of env_probe.py, run by the job's python (works from AnsiballZ's zip too)."""
    return inspect.getsource(env_probe)


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


def probe_node(python, run, script=None, chdir=None, env_files=(), connect=None, code=None):
    """Everything preflight compares, from this node.

    ``run(argv) -> (rc, stdout, stderr)`` runs the job's python; ``env_files`` is a list of
    {var, path}; ``connect`` ({host, port, timeout}) is the rendezvous address to reach over TCP;
    ``code`` ({dest, manifest, owner, group}) the controller's train_code_src to compare the node's
    copy with (``same``: no copy needed). Never raises for what it finds: problems are for ``compare``.
    """
    out = {"python": {"path": python, "executable": bool(python) and os.path.isfile(python)
                      and os.access(python, os.X_OK)},
           "environment": None, "probe_error": None}
    if out["python"]["executable"]:
        rc, stdout, stderr = run([python, "-c", env_probe_source()])
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
        out["code"] = {"dest": code.get("dest"), "same": not differ, "differ": differ[:20]}
    else:
        out["code"] = None
    if connect:
        out["connect"] = dict(try_connect(connect["host"], connect["port"], float(connect.get("timeout") or CONNECT_TIMEOUT)),
                              host=connect["host"], port=int(connect["port"]))
    else:
        out["connect"] = None
    return out


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
    """One node's script (against the first node's sha256), chdir, env files and its connect to the
    rendezvous -> problem lines."""
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
    hosts the rendezvous), ``interface`` its train_interface, for messages. ``deepspeed_config``
    ({text, path} of train_deepspeed_config, or {accelerate, accelerate_path, code_src} of an accelerate config:
    the DeepSpeed config it names, _train.ds_ops.accelerate_deepspeed_config): the ops it makes DeepSpeed load
    must be prebuilt in the first node's environment (the others must equal it), unless ``allow_jit``.
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
    if "accelerate" in deepspeed_config:
        deepspeed_config = accelerate_deepspeed_config(deepspeed_config["accelerate"],
                                                       deepspeed_config.get("accelerate_path") or "",
                                                       deepspeed_config.get("code_src") or "")
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


PROBE_SPEC = dict(
    python=dict(type="path", required=True),
    script=dict(type="path"),
    chdir=dict(type="path"),
    env_files=dict(type="list", elements="dict", default=[]),
    code=dict(type="dict"),
    connect_host=dict(type="str"),
    connect_port=dict(type="int"),
    connect_timeout=dict(type="int", default=CONNECT_TIMEOUT),
)
PROBE_REQUIRED_BY = {"connect_host": "connect_port"}


def run_probe_module(module):
    """Module train_node (probe): probe_node with the module's parameters (the Slurm path's preflight)."""
    p = module.params
    connect = None
    if p["connect_host"]:
        connect = {"host": p["connect_host"], "port": p["connect_port"], "timeout": p["connect_timeout"]}
    result = probe_node(p["python"], module.run_command, p["script"], p["chdir"], p["env_files"],
                        connect, p["code"])
    module.exit_json(changed=False, **result)
