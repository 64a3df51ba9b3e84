# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Will this DeepSpeed wheel run on that node? Pure decisions for role wheel_distribute.

Everything here takes plain data (the wheel manifest, see docs/manifest.md, and the
facts a node reported) and returns plain data, so it is unit-tested on recorded
inputs and imported unchanged by the modules that run on the nodes (python 3.9+).

Every problem is one sentence that names the node, what the wheel needs and what
the node has, so that a refusal can be acted on without reading a log.
"""
from __future__ import annotations

import json
import re

from ansible_collections.multinode.training.plugins.module_utils._build import cuda_arch
from ansible_collections.multinode.training.plugins.module_utils._build import fatbin
from ansible_collections.multinode.training.plugins.module_utils._build import manifest as _manifest
from ansible_collections.multinode.training.plugins.module_utils._node import env_probe
from ansible_collections.multinode.training.plugins.module_utils._wheel import dist as _wheel_dist
from ansible_collections.multinode.training.plugins.module_utils._build.cpu_isa import cpuinfo_flags

MARKER_NAME = ".multinode-training.json"
PROBE_SENTINEL = "@@wheel_distribute@@"

# TORCH_CUDA_ARCH_LIST also accepts architecture names (torch.utils.cpp_extension).
ARCH_NAMES = {
    "kepler": ["3.5+PTX"],
    "maxwell": ["5.0;5.2+PTX"],
    "pascal": ["6.0;6.1+PTX"],
    "volta": ["7.0+PTX"],
    "turing": ["7.5+PTX"],
    "ampere": ["8.0;8.6+PTX"],
    "ada": ["8.9+PTX"],
    "hopper": ["9.0+PTX"],
    "blackwell": ["10.0;12.0+PTX"],
}


# --------------------------------------------------------------------------- wheel tags

def parse_wheel_filename(filename):
    """Split a wheel file name (PEP 427) into its parts; tag fields are lists.

    >>> parse_wheel_filename("deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl")["python"]
    ['cp311']
    """
    name = filename.rsplit("/", 1)[-1]
    if not name.endswith(".whl"):
        raise ValueError("not a wheel file name (no .whl suffix): %s" % name)
    parts = name[:-4].split("-")
    if len(parts) == 6:
        dist, version, build, py, abi, plat = parts
    elif len(parts) == 5:
        dist, version, py, abi, plat = parts
        build = None
    else:
        raise ValueError("not a wheel file name (expected 5 or 6 dash-separated fields): %s" % name)
    return {
        "distribution": dist,
        "version": version,
        "build": build,
        "python": py.split("."),
        "abi": abi.split("."),
        "platform": plat.split("."),
    }


_MANYLINUX = re.compile(r"^manylinux_(\d+)_(\d+)_(.+)$")
_LEGACY_MANYLINUX = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


def _platform_ok(tag, node):
    """Does a wheel platform tag run on the node (platform like linux_x86_64, glibc '2.36')?"""
    if tag == "any":
        return True
    if tag == node.get("platform"):
        return True
    arch = (node.get("platform") or "").partition("_")[2]
    glibc = _version_tuple(node.get("glibc") or "")
    match = _MANYLINUX.match(tag)
    if match:
        need, tag_arch = (int(match.group(1)), int(match.group(2))), match.group(3)
    else:
        legacy, _sep, tag_arch = tag.partition("_")
        if legacy not in _LEGACY_MANYLINUX:
            return False
        need = _LEGACY_MANYLINUX[legacy]
    return bool(glibc) and tag_arch == arch and glibc >= need


def _python_ok(tag, node):
    major, minor = (node.get("version") or "0.0").split(".")[:2]
    impl = node.get("implementation", "cp")
    return tag in ("py%s" % major, "py%s%s" % (major, minor), "%s%s%s" % (impl, major, minor))


def _abi_ok(tag, node):
    return tag in ("none", "abi3", node.get("abi"))


def wheel_tag_problems(wheel_name, python_facts, node):
    """Problems running a wheel on a node's interpreter (python tag, ABI, platform)."""
    tags = parse_wheel_filename(wheel_name)
    have = "python %s (%s, abi %s) on %s" % (
        python_facts.get("version"), python_facts.get("tag"), python_facts.get("abi"),
        python_facts.get("platform"))
    if python_facts.get("glibc"):
        have += " with glibc %s" % python_facts["glibc"]
    problems = []
    # named by the variable that chose the interpreter (``<node>: wheel_distribute_python="...": ...; valid: ...``)
    where = "%s: wheel_distribute_python=%s" % (node, json.dumps(python_facts.get("executable") or "python"))
    if not any(_python_ok(t, python_facts) for t in tags["python"]):
        problems.append("%s: wheel %s needs python tag %s, this interpreter has %s; valid: an interpreter of "
                        "python tag %s on every node, or a wheel built with this one" % (
                            where, wheel_name, ".".join(tags["python"]), have, ".".join(tags["python"])))
    elif not any(_abi_ok(t, python_facts) for t in tags["abi"]):
        problems.append("%s: wheel %s needs ABI %s, this interpreter has %s; valid: an interpreter of ABI %s on "
                        "every node, or a wheel built with this one" % (
                            where, wheel_name, ".".join(tags["abi"]), have, ".".join(tags["abi"])))
    if not any(_platform_ok(t, python_facts) for t in tags["platform"]):
        problems.append("%s: wheel %s needs platform %s, node has %s; valid: nodes of platform %s, or a wheel "
                        "built on one like this" % (
                            where, wheel_name, ".".join(tags["platform"]), have, ".".join(tags["platform"])))
    return problems


# --------------------------------------------------------------------------- CUDA archs

def _version_tuple(text):
    nums = re.findall(r"\d+", text or "")
    return tuple(int(n) for n in nums[:3])


def parse_arch_list(arch_list):
    """TORCH_CUDA_ARCH_LIST -> list of dicts {arch: (major, minor), suffix, ptx, text}.

    Entries are separated by ';', ',' or spaces; '+PTX' also embeds PTX (a
    'compute_XY' entry is PTX only, 'sm_XY' SASS only); a suffix
    'a' (sm_90a) runs only on that exact architecture, 'f' (family, CUDA 12.9+)
    on the same major with minor >= the entry's.
    """
    entries = []
    for raw in re.split(r"[;,\s]+", (arch_list or "").strip()):
        if not raw:
            continue
        if raw.lower() in ARCH_NAMES:
            entries.extend(parse_arch_list(";".join(ARCH_NAMES[raw.lower()])))
            continue
        text = raw
        ptx = raw.upper().endswith("+PTX")
        if ptx:
            raw = raw[:-4]
        match = re.match(r"^(?:sm_|compute_)?(\d+)\.?(\d)([af]?)$", raw.strip())
        if not match:
            raise ValueError("unrecognised TORCH_CUDA_ARCH_LIST entry %r in %r" % (text, arch_list))
        # '8.6', 'sm_86', '86', '10.0', '9.0a', '10.0f': the last digit is the minor
        major, minor, suffix = int(match.group(1)), int(match.group(2)), match.group(3)
        ptx_only = raw.startswith("compute_")
        entries.append({"arch": (major, minor), "suffix": suffix, "ptx": ptx or ptx_only, "sass": not ptx_only,
                        "text": text})
    return entries


def parse_compute_cap(text):
    """'8.6' -> (8, 6)."""
    major, _sep, minor = str(text).strip().partition(".")
    return int(major), int(minor or 0)


def arch_covers(entries, cap):
    """The arch-list entry whose code runs on a device of compute capability `cap`, or None.

    CUDA binary compatibility: a cubin for sm_XY runs on devices of the same major X
    with minor >= Y (sm_XYa: exactly XY); PTX for compute_XY is JIT-compiled by the
    driver for any device >= XY.
    """
    for entry in entries:
        arch = entry["arch"]
        if not entry.get("sass", True):
            sass = False
        elif entry["suffix"] == "a":
            sass = cap == arch
        else:
            sass = cap[0] == arch[0] and cap[1] >= arch[1]
        if sass:
            return entry["text"] + " (SASS)"
    for entry in entries:
        if entry["ptx"] and cap >= entry["arch"]:
            return entry["text"] + " (PTX JIT)"
    return None


def parse_nvidia_smi(text):
    """`nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader` -> [{index, name, compute_cap}].

    The build's parser (old drivers' name-only output resolved through its name table), numbered.
    """
    lines = [line for line in (text or "").splitlines() if not line.strip().lower().startswith("name")]
    return [dict(gpu, index=i) for i, gpu in enumerate(cuda_arch.parse_nvidia_smi("\n".join(lines)))]


def _gpu_groups(gpus):
    """GPUs grouped by (name, compute_cap), in index order: [(label, gpu)], label 'GPU 0' or 'GPUs 0-7'."""
    groups = {}
    for gpu in gpus:
        groups.setdefault((gpu["name"], gpu["compute_cap"]), []).append(gpu)
    out = []
    for members in sorted(groups.values(), key=lambda m: m[0]["index"]):
        idx = [m["index"] for m in members]
        if len(idx) == 1:
            label = "GPU %s" % idx[0]
        elif idx == list(range(idx[0], idx[0] + len(idx))):
            label = "GPUs %s-%s" % (idx[0], idx[-1])
        else:
            label = "GPUs %s" % ", ".join(str(i) for i in idx)
        out.append((label, members[0]))
    return out


def _has(label):
    return "have" if label.startswith("GPUs") else "has"


def gpu_findings(manifest, gpus, node):
    """(problems, notes) for the node's GPUs against a cuda wheel.

    With per-op coverage in the manifest (ops[].cuda, read from the binaries by the build),
    every GPU must be covered by every op that has GPU code: SASS of the GPU's major with a
    lower or equal minor, or PTX of a lower or equal arch, which the driver JIT-compiles on
    first use (a note, not a refusal). Older manifests fall back to the arch list. A node
    without GPUs is not judged here: a note says the check was skipped.
    """
    if manifest.get("accelerator") != "cuda":
        return [], []
    arch_list = (manifest.get("cuda") or {}).get("arch_list") or ""
    wheel = manifest.get("wheel")
    if not gpus:
        return [], ["%s: no NVIDIA GPU (nvidia-smi absent or lists none): the GPU check of cuda wheel %s "
                    "(arch list %r) is skipped; its CUDA ops need a GPU to run" % (node, wheel, arch_list)]
    gpu_ops = [op for op in manifest.get("ops") or [] if op.get("cuda")]
    entries = None if gpu_ops else parse_arch_list(arch_list)
    problems, notes = [], []
    for label, gpu in _gpu_groups(gpus):
        try:
            cap = parse_compute_cap(gpu["compute_cap"])
        except ValueError:
            problems.append("%s: %s (%s) reports compute capability %r, which cannot be read" % (
                node, label, gpu["name"], gpu["compute_cap"]))
            continue
        if entries is not None:
            if arch_covers(entries, cap) is None:
                problems.append(
                    "%s: wheel's ops are compiled for CUDA arch list %r, %s (%s) %s compute "
                    "capability %d.%d, not covered (no SASS of the same major with a lower or equal "
                    "minor, no +PTX of a lower or equal arch)" % (
                        node, arch_list, label, gpu["name"], _has(label), cap[0], cap[1]))
            continue
        for op in gpu_ops:
            found = fatbin.gpu_covered(op["cuda"], cap)
            if found is None:
                problems.append(
                    "%s: %s (%s) %s compute capability %d.%d, which op %s of wheel %s does not cover: its binary "
                    "has %s (arch list %r); it needs SASS sm_%d<minor <= %d> or PTX of an arch <= %d.%d" % (
                        node, label, gpu["name"], _has(label), cap[0], cap[1], op["name"], wheel,
                        fatbin.describe(op["cuda"]),
                        arch_list, cap[0], cap[1], cap[0], cap[1]))
            elif found[0] == "ptx":
                notes.append(
                    "%s: %s (%s) %s compute capability %d.%d, op %s of wheel %s has no SASS for it and runs "
                    "from PTX compute_%s: the driver JIT-compiles it on first use (slow first start, cached in "
                    "~/.nv/ComputeCache)" % (node, label, gpu["name"], _has(label), cap[0], cap[1], op["name"], wheel,
                                             found[1].replace(".", "")))
    return problems, notes


def gpu_problems(manifest, gpus, node):
    """Each GPU on the node must be covered by the wheel's GPU code (cuda builds only)."""
    return gpu_findings(manifest, gpus, node)[0]


def gpu_notes(manifest, gpus, node):
    """Warnings for an accepted node: PTX-only coverage (JIT on first use), GPU check skipped."""
    return gpu_findings(manifest, gpus, node)[1]


# --------------------------------------------------------------------------- torch, CPU, venv

def parse_dist_info_version(metadata_text):
    """Version field of a dist-info METADATA file."""
    for line in (metadata_text or "").splitlines():
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
        if not line.strip():
            break
    return None


def parse_torch_cuda(version_py_text):
    """torch/version.py -> the CUDA version torch was built with, or None (CPU build)."""
    match = re.search(r"^cuda\s*(?::\s*[^=]+)?=\s*(['\"]([^'\"]*)['\"]|None)", version_py_text or "", re.M)
    if not match or match.group(1) == "None":
        return None
    return match.group(2) or None


def same_torch_version(have, want):
    """The node's torch (from its dist-info) is the one the wheel needs (torch.__version__ at
    build time). PyPI's Linux torch is a CUDA build whose dist-info says '2.13.0' while
    torch.__version__ says '2.13.0+cu130': an unlabelled version matches a +cuXY one (the
    CUDA release is compared separately); it never matches +cpu."""
    if have == want:
        return True
    (h_pub, _s, h_label), (w_pub, _s2, w_label) = (str(have).partition("+"), str(want).partition("+"))
    return h_pub == w_pub and not h_label and w_label.startswith("cu")


def torch_problems(manifest, venv, node):
    """The torch already in the node's venv must be the one the wheel was built against."""
    torch = venv.get("torch")
    if not torch:
        return []
    want = manifest.get("torch") or {}
    problems = []
    where = "%s has torch %s" % (venv.get("path"), torch)
    if not same_torch_version(torch, want.get("version")):
        problems.append(
            "%s: wheel needs torch %s, node's venv %s (wheel_distribute does not replace the torch of "
            "an existing environment: remove it or set wheel_distribute_venv to a new path)" % (
                node, want.get("version"), where))
    if manifest.get("accelerator") == "cuda" and venv.get("torch_cuda") != want.get("cuda"):
        problems.append("%s: wheel needs torch built for CUDA %s, node's venv %s built for CUDA %s" % (
            node, want.get("cuda"), where, venv.get("torch_cuda")))
    return problems


def cpu_problems(manifest, cpuinfo_text, node, cpuinfo_path="/proc/cpuinfo"):
    """The CPU extensions the build assumed (-march=native) must all be on the node."""
    required = sorted((manifest.get("cpu") or {}).get("flags") or [])
    if not required:
        return []
    have = cpuinfo_flags(cpuinfo_text or "")
    if not have:
        return ["%s: wheel's ops assume CPU flags %s, node's %s lists no CPU flags" % (
            node, " ".join(required), cpuinfo_path)]
    missing = sorted(set(required) - have)
    if not missing:
        return []
    return ["%s: wheel's ops were built with -march=%s and need CPU flags %s, node's CPU (%s) lacks %s" % (
        node, (manifest.get("cpu") or {}).get("march", "native"), " ".join(required), cpuinfo_path,
        " ".join(missing))]


def venv_problems(venv, node):
    """The venv path must be absent, a directory or a symlink to one, under a directory."""
    state = venv.get("state")
    path = venv.get("path")
    if state == "file":
        return ["%s: wheel_distribute_venv %s is a file, not a directory: move it away or choose "
                "another path" % (node, path)]
    if state == "other":
        return ["%s: wheel_distribute_venv %s exists but is neither a directory nor a symlink to one "
                "(%s)" % (node, path, venv.get("detail", "unknown type"))]
    if state == "absent" and venv.get("blocked_by"):
        return ["%s: wheel_distribute_venv %s cannot be created: %s is a file, not a directory" % (
            node, path, venv["blocked_by"])]
    return []


def node_problems(manifest, facts, node):
    """Every reason this node cannot take this wheel (empty list: compatible).

    facts: {"python": {...interpreter...}, "venv": {...}, "gpus": [...],
            "cpuinfo": "<text>", "cpuinfo_path": "/proc/cpuinfo"}
    """
    problems = []
    problems.extend(venv_problems(facts.get("venv") or {}, node))
    python = facts.get("python") or {}
    if python.get("error"):
        tag = (manifest.get("python") or {}).get("tag")
        problems.append("%s: wheel_distribute_python=%s: cannot run on this node (%s); valid: an interpreter "
                        "path on every node, python %s for wheel %s" % (
                            node, json.dumps(python.get("executable")), " ".join(str(python["error"]).split()),
                            tag, manifest.get("wheel")))
    else:
        problems.extend(wheel_tag_problems(manifest["wheel"], python, node))
    problems.extend(torch_problems(manifest, facts.get("venv") or {}, node))
    problems.extend(gpu_problems(manifest, facts.get("gpus") or [], node))
    problems.extend(cpu_problems(manifest, facts.get("cpuinfo"), node,
                                 facts.get("cpuinfo_path") or "/proc/cpuinfo"))
    return problems


# --------------------------------------------------------------------------- manifest

REQUIRED_KEYS = _manifest.REQUIRED_KEYS


def manifest_problems(manifest, where):
    """Structural problems of a manifest (where: its path, for the message): _manifest's, plus its arch list."""
    problems = _manifest.problems(manifest, where)
    if not problems and manifest.get("accelerator") == "cuda":
        try:
            parse_arch_list((manifest.get("cuda") or {}).get("arch_list"))
        except ValueError as exc:
            problems.append("manifest %s: %s" % (where, exc))
    return problems


# --------------------------------------------------------------------------- post-install verification

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


# --------------------------------------------------------------------------- node-side gathering

# Runs under the interpreter that will create the venv: what wheels it accepts.
INTERPRETER_SCRIPT = r'''
import json, os, platform, sys, sysconfig
impl = {"cpython": "cp", "pypy": "pp"}.get(sys.implementation.name, sys.implementation.name)
tag = "%s%d%d" % (impl, sys.version_info[0], sys.version_info[1])
abi = tag
if impl == "cp":
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        abi += "t"
    if sysconfig.get_config_var("Py_DEBUG"):
        abi += "d"
try:
    glibc = os.confstr("CS_GNU_LIBC_VERSION").split()[-1]
except (AttributeError, ValueError, OSError, IndexError):
    glibc = None
print(json.dumps({"version": platform.python_version(), "implementation": impl, "tag": tag, "abi": abi,
                  "platform": sysconfig.get_platform().replace("-", "_").replace(".", "_"),
                  "glibc": glibc, "executable": sys.executable}))
'''


def _read(path):
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read()


def venv_facts(path):
    """What is at the venv path: state, marker of a previous install, torch already in it."""
    import glob
    import os

    facts = {"path": path, "state": "absent", "symlink": os.path.islink(path), "marker": None,
             "torch": None, "torch_cuda": None, "target": None}
    if os.path.islink(path):
        facts["target"] = os.path.realpath(path)
    if os.path.isdir(path):
        facts["state"] = "directory"
    elif os.path.isfile(path):
        facts["state"] = "file"
    elif os.path.lexists(path):
        facts["state"] = "other"
        facts["detail"] = "dangling symlink to %s" % os.readlink(path) if os.path.islink(path) else "special file"
    else:
        parent = os.path.dirname(os.path.abspath(path))
        while parent and not os.path.lexists(parent):
            parent = os.path.dirname(parent)
        if parent and not os.path.isdir(parent):
            facts["blocked_by"] = parent
        return facts
    if facts["state"] != "directory":
        return facts
    marker = os.path.join(path, MARKER_NAME)
    if os.path.isfile(marker):
        try:
            facts["marker"] = json.loads(_read(marker))
        except ValueError:
            facts["marker"] = {"error": "unreadable marker %s" % marker}
    for meta in sorted(glob.glob(os.path.join(path, "lib", "python*", "site-packages", "torch-*.dist-info", "METADATA"))):
        facts["torch"] = parse_dist_info_version(_read(meta))
        version_py = os.path.join(os.path.dirname(os.path.dirname(meta)), "torch", "version.py")
        if os.path.isfile(version_py):
            facts["torch_cuda"] = parse_torch_cuda(_read(version_py))
        break
    facts["packages"] = venv_packages(path)
    return facts


def venv_packages(path):
    """Every distribution installed in the venv's site-packages, as sorted name==version (the Name and
    Version headers of each dist-info, read as preflight's environment probe reads them, nothing
    imported): what the wheel_distribute guard compares with the job requirements' lock."""
    import glob
    import os

    packages = set()
    for dist_info in glob.glob(os.path.join(path, "lib", "python*", "site-packages", "*.dist-info")):
        meta = env_probe.headers(dist_info)
        if meta["name"]:
            packages.add("%s==%s" % (meta["name"], meta["version"] or ""))
    return sorted(packages)


def installed(manifest, venv, lock_sha256="", lock_packages=None):
    """True when the venv already holds this exact wheel, verified (the idempotence marker), installed
    with the job requirements' lock of this run (its sha256; empty: no job requirements) and, with a
    lock, holding exactly the lock's packages (lock_packages, name==version): a changed, added or
    removed requirement, or a package changed by hand, makes a new release. The same rules as
    _wheel_dist.current_problems, which also says why."""
    return (venv.get("state") == "directory"
            and _wheel_dist.marker_problem(manifest, venv.get("marker"), lock_sha256) is None
            and not _wheel_dist.package_problems(venv, lock_packages))
