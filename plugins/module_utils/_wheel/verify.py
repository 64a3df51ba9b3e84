# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""After the install: does the node's venv import torch and DeepSpeed and load every op of the manifest
without a JIT build, and do all nodes report the same environment?

PROBE_SCRIPT runs in the node's venv python (deepspeed_env_verify); the rest reads its output.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile

PROBE_SENTINEL = "@@wheel_distribute@@"


# Runs inside the node's venv python: imports torch and DeepSpeed, loads every op of the
# manifest through the accelerator's op builder and reports what it found. The caller
# points TORCH_EXTENSIONS_DIR at an empty directory: any file there afterwards is a JIT build.
PROBE_SCRIPT = r'''
import json, os, platform, sys
spec = json.loads(sys.argv[1])
out = {"python": platform.python_version(), "executable": sys.executable, "ops": {}}
try:
    import torch
    out["torch"] = torch.__version__
    out["torch_cuda"] = torch.version.cuda
    from deepspeed.git_version_info import installed_ops, version
    out["deepspeed"] = version
    out["installed_ops"] = sorted(k for k, v in installed_ops.items() if v)
    from deepspeed.accelerator import get_accelerator
    acc = get_accelerator()
    out["accelerator"] = acc._name
    for op in spec["ops"]:
        res = {"builder": op["builder"]}
        try:
            builder = acc.create_op_builder(op["builder"])
            if builder is None:
                raise LookupError("accelerator %s has no op builder %s" % (acc._name, op["builder"]))
            res["ds_name"] = builder.name
            res["installed"] = bool(installed_ops.get(builder.name, False))
            mod = builder.load()
            res["module"] = getattr(mod, "__name__", None)
            res["file"] = getattr(mod, "__file__", None)
        except BaseException as exc:
            res["error"] = "%s: %s" % (type(exc).__name__, exc)
        out["ops"][op["name"]] = res
except BaseException as exc:
    out["error"] = "%s: %s" % (type(exc).__name__, exc)
jit = []
root = os.environ.get("TORCH_EXTENSIONS_DIR")
if root:
    for dirpath, dirnames, filenames in os.walk(root):
        jit.extend(os.path.join(dirpath, n) for n in dirnames + filenames)
out["jit_files"] = sorted(jit)
sys.stdout.flush()
print("''' + PROBE_SENTINEL + r'''" + json.dumps(out))
'''


def probe_spec(manifest):
    """The argument PROBE_SCRIPT takes: the ops to load."""
    return json.dumps({"ops": [{"name": o["name"], "builder": o["builder"]} for o in manifest.get("ops") or []]})


def parse_probe_output(stdout):
    """The probe's JSON line among DeepSpeed's own log output, or None."""
    for line in reversed((stdout or "").splitlines()):
        if line.startswith(PROBE_SENTINEL):
            return json.loads(line[len(PROBE_SENTINEL):])
    return None


def verify_problems(manifest, probe, node, venv):
    """What is wrong with an installed environment, judged against the manifest."""
    if probe is None:
        return ["%s: environment %s: the verification probe printed no result" % (node, venv)]
    if probe.get("error"):
        return ["%s: environment %s: importing torch/DeepSpeed failed: %s" % (node, venv, probe["error"])]
    problems = []
    want_torch = (manifest.get("torch") or {}).get("version")
    if probe.get("torch") != want_torch:
        problems.append("%s: environment %s has torch %s, the wheel needs %s" % (
            node, venv, probe.get("torch"), want_torch))
    want_ds = (manifest.get("deepspeed") or {}).get("version")
    if want_ds and probe.get("deepspeed") != want_ds:
        problems.append("%s: environment %s has DeepSpeed %s, the manifest says %s" % (
            node, venv, probe.get("deepspeed"), want_ds))
    if probe.get("accelerator") != manifest.get("accelerator"):
        problems.append("%s: environment %s selected accelerator %s, the wheel was built for %s" % (
            node, venv, probe.get("accelerator"), manifest.get("accelerator")))
    for op in manifest.get("ops") or []:
        res = (probe.get("ops") or {}).get(op["name"])
        if res is None:
            problems.append("%s: op %s was not probed in %s" % (node, op["name"], venv))
            continue
        if not res.get("installed") and "installed" in res:
            problems.append("%s: op %s (%s) is not marked installed in DeepSpeed's installed_ops in %s" % (
                node, op["name"], res.get("ds_name"), venv))
        if res.get("error"):
            problems.append("%s: op %s failed to load through %s in %s: %s" % (
                node, op["name"], op["builder"], venv, res["error"]))
            continue
        if res.get("module") != op["module"]:
            problems.append("%s: op %s loaded module %s, the manifest's prebuilt module is %s" % (
                node, op["name"], res.get("module"), op["module"]))
        if op.get("file") and not str(res.get("file") or "").endswith(op["file"]):
            problems.append("%s: op %s loaded %s, not the prebuilt %s from the wheel" % (
                node, op["name"], res.get("file"), op["file"]))
    if probe.get("jit_files"):
        problems.append("%s: loading the ops in %s JIT-compiled (TORCH_EXTENSIONS_DIR got %s)" % (
            node, venv, ", ".join(probe["jit_files"][:5])))
    return problems


def env_summary(manifest, probe, venv, python):
    """The fact a node exports for train.yml: what its environment holds."""
    return {
        "venv": venv,
        "python": python,
        "python_version": probe.get("python"),
        "torch": probe.get("torch"),
        "torch_cuda": probe.get("torch_cuda"),
        "deepspeed": probe.get("deepspeed"),
        "accelerator": probe.get("accelerator"),
        "ops": sorted(name for name, res in (probe.get("ops") or {}).items() if not res.get("error")),
        "wheel": manifest.get("wheel"),
        "wheel_sha256": manifest.get("wheel_sha256"),
    }


# --------------------------------------------------------------------------- consistency across nodes

REPORT_FIELDS = ("python_version", "torch", "torch_cuda", "deepspeed", "ops", "wheel_sha256")


def consistency_report(envs, fields=REPORT_FIELDS):
    """envs: {node: env_summary}. Compare each field across nodes.

    Returns {"consistent": bool, "fields": {field: {value_text: [nodes]}},
             "differences": [message naming the nodes that differ], "lines": [...]}.
    The majority value is taken as the reference; ties pick the value of the first node by name.
    """
    nodes = sorted(envs)
    table = {}
    differences = []
    lines = []
    for field in fields:
        groups = {}
        for node in nodes:
            value = (envs[node] or {}).get(field)
            text = " ".join(value) if isinstance(value, list) else str(value)
            groups.setdefault(text, []).append(node)
        table[field] = groups
        if len(groups) <= 1:
            lines.append("%s: %s on all %d nodes" % (field, next(iter(groups), "-"), len(nodes)))
            continue
        reference = sorted(groups.items(), key=lambda kv: (-len(kv[1]), nodes.index(kv[1][0])))[0][0]
        for text, members in sorted(groups.items()):
            if text == reference:
                continue
            msg = "%s %s %s %s, %d node(s) have %s" % (
                ", ".join(members), "has" if len(members) == 1 else "have", field, text,
                len(groups[reference]), reference)
            differences.append(msg)
            lines.append("DIFFERS " + msg)
    return {"consistent": not differences, "fields": table, "differences": differences, "lines": lines}


# --------------------------------------------------------------------------- the deepspeed_env_verify module

ARGUMENT_SPEC = dict(
    venv=dict(type="path", required=True),
    manifest=dict(type="dict", required=True),
    node=dict(type="str"),
    fail_on_problems=dict(type="bool", default=True),
    report_as=dict(type="path"),
)


def run_module(module):
    """Run PROBE_SCRIPT in the venv's python with an empty TORCH_EXTENSIONS_DIR; report or refuse what it found."""
    venv = module.params["venv"]
    manifest = module.params["manifest"]
    node = module.params["node"] or socket.gethostname()
    report_as = module.params["report_as"] or venv
    python = os.path.join(venv, "bin", "python")
    shown = [python, "-c", "<deepspeed op probe>", probe_spec(manifest)]
    if not os.access(python, os.X_OK):
        module.fail_json(msg="%s: %s has no executable bin/python" % (node, venv), cmd=shown, problems=[], env={}, probe={})

    ext_dir = tempfile.mkdtemp(prefix="wheel-distribute-jit-")
    try:
        rc, out, err = module.run_command(
            [python, "-c", PROBE_SCRIPT, probe_spec(manifest)],
            environ_update={"TORCH_EXTENSIONS_DIR": ext_dir, "DS_ACCELERATOR": str(manifest.get("accelerator") or "")},
        )
    finally:
        shutil.rmtree(ext_dir, ignore_errors=True)
    probe = parse_probe_output(out)
    problems = verify_problems(manifest, probe, node, report_as)
    if probe is None:
        problems.append("%s: probe exited %d: %s" % (node, rc, (err or out).strip()[-500:]))
        probe = {}
    env = env_summary(manifest, probe, report_as, os.path.join(report_as, "bin", "python"))
    if problems and module.params["fail_on_problems"]:
        module.fail_json(msg="verification failed: " + "; ".join(problems), problems=problems, env=env, probe=probe, cmd=shown)
    module.exit_json(changed=False, env=env, problems=problems, probe=probe, cmd=shown)


REPORT_SPEC = dict(
    envs=dict(type="dict", required=True),
    expected=dict(type="list", elements="str", default=[]),
    fail_on_difference=dict(type="bool", default=True),
)


def env_report(envs, expected):
    """consistency_report of ``envs``, with every ``expected`` node that has none named as missing."""
    report = consistency_report(envs)
    for node in sorted(set(expected) - set(envs)):
        report["differences"].append("%s: no verified environment (unreachable, refused or failed before verification)" % node)
        report["lines"].append("MISSING %s" % node)
    report["consistent"] = not report["differences"]
    return report


def run_report_module(module):
    """Module wheel_distribute (report): the report, failing on a difference when asked."""
    report = env_report(module.params["envs"], module.params["expected"])
    if not report["consistent"] and module.params["fail_on_difference"]:
        module.fail_json(msg="environments differ across nodes: " + "; ".join(report["differences"]), **report)
    module.exit_json(changed=False, **report)
