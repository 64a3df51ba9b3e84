# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""DeepSpeed op builders: what a source tree can build, and whether a wheel holds them.

DeepSpeed's setup.py skips a requested op that is "incompatible" with a warning
and the wheel ships without it; the op is then JIT-compiled on every node at run
time. So the build validates requested ops against the builders that the source
really has for the chosen accelerator (read statically with `ast`: no torch, no
import of DeepSpeed), and afterwards checks each op's extension is in the wheel.
"""
from __future__ import annotations

import ast
import os
import re
import zipfile

# Host-side optimizers that the CUDA accelerator takes from op_builder/cpu
# (DeepSpeed >= 0.17 moved them there; older trees have them top-level).
CUDA_SHARED_CPU_OPS = ("cpu_adam", "cpu_adagrad", "cpu_lion")
# Builders that are placeholders, not ops.
_PLACEHOLDERS = ("deepspeed_not_implemented",)


class OpsError(ValueError):
    """Unknown op, or an op missing from the wheel; the message names it."""


def _class_constants(node):
    consts = {}
    for stmt in node.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            value = stmt.value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                consts[stmt.targets[0].id] = value.value
    return consts


def _absolute_name(node, name):
    """The extension's import path from `def absolute_name(self): return f'...{self.NAME}_op'`."""
    for stmt in node.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name == "absolute_name":
            for sub in ast.walk(stmt):
                if isinstance(sub, ast.Return) and sub.value is not None:
                    value = sub.value
                    if isinstance(value, ast.Constant) and isinstance(value.value, str):
                        return value.value
                    if isinstance(value, ast.JoinedStr):
                        out = []
                        for part in value.values:
                            if isinstance(part, ast.Constant):
                                out.append(str(part.value))
                            elif (isinstance(part, ast.FormattedValue) and isinstance(part.value, ast.Attribute)
                                  and part.value.attr == "NAME"):
                                out.append(name)
                            else:
                                return None
                        return "".join(out)
    return None


def _min_cc_major(node):
    """`def filter_ccs(self, ccs): ... if int(cc[0]) >= 8:` -> 8: the op drops older archs."""
    for stmt in node.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name == "filter_ccs":
            for sub in ast.walk(stmt):
                if (isinstance(sub, ast.Compare) and len(sub.ops) == 1 and isinstance(sub.ops[0], ast.GtE)
                        and isinstance(sub.left, ast.Call) and getattr(sub.left.func, "id", None) == "int"
                        and isinstance(sub.comparators[0], ast.Constant)
                        and isinstance(sub.comparators[0].value, int)):
                    return sub.comparators[0].value
    return None


def _imported_builders(tree, op_root):
    """`from op_builder.pin_memory import PinMemoryBuilder` (also inside try/except): the builders a
    per-accelerator module re-exports from the top-level op_builder, as (file, class name)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            parts = node.module.split(".")
            if "op_builder" in parts and parts[-1] not in ("builder", "op_builder"):
                rel = parts[parts.index("op_builder") + 1:]
                path = os.path.join(op_root, *rel) + ".py"
                for alias in node.names:
                    if alias.name.endswith("Builder") and os.path.isfile(path):
                        found.append((path, alias.name))
    return sorted(set(found))


def scan_builder_file(path, op_root=None):
    """Op builders a op_builder/*.py file defines or re-exports: [{name, builder, build_var, module}]."""
    with open(path, "rb") as handle:
        tree = ast.parse(handle.read(), filename=path)
    ops = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name.endswith("Builder"):
            consts = _class_constants(node)
            if "NAME" in consts and "BUILD_VAR" in consts and consts["NAME"] not in _PLACEHOLDERS:
                op = {
                    "name": consts["NAME"],
                    "builder": node.name,
                    "build_var": consts["BUILD_VAR"],
                    "module": _absolute_name(node, consts["NAME"]),
                }
                min_major = _min_cc_major(node)
                if min_major is not None:
                    op["min_cc_major"] = min_major
                ops.append(op)
    if op_root:
        for source, class_name in _imported_builders(tree, op_root):
            ops.extend(op for op in scan_builder_file(source) if op["builder"] == class_name)
    return ops


def _scan_dir(directory, op_root):
    ops = []
    for entry in sorted(os.listdir(directory)):
        if entry.endswith(".py") and entry not in ("__init__.py", "builder.py", "all_ops.py"):
            ops.extend(scan_builder_file(os.path.join(directory, entry), op_root))
    return ops


def available_ops(source_dir, accelerator):
    """Ops the source tree can prebuild for `accelerator` ('cpu' or 'cuda'), sorted by name."""
    op_dir = os.path.join(source_dir, "op_builder")
    if not os.path.isdir(op_dir):
        raise OpsError("%s has no op_builder/ directory: not a DeepSpeed source tree" % source_dir)
    if accelerator == "cpu":
        ops = _scan_dir(os.path.join(op_dir, "cpu"), op_dir)
    elif accelerator == "cuda":
        ops = _scan_dir(op_dir, op_dir)
        have = {op["name"] for op in ops}
        cpu_dir = os.path.join(op_dir, "cpu")
        if os.path.isdir(cpu_dir):
            ops.extend(op for op in _scan_dir(cpu_dir, op_dir) if op["name"] in CUDA_SHARED_CPU_OPS and op["name"] not in have)
    else:
        raise OpsError("accelerator %r: only 'cpu' and 'cuda' builds are supported" % accelerator)
    by_name = {}
    for op in ops:
        by_name.setdefault(op["name"], op)
    return [by_name[n] for n in sorted(by_name)]


def aliases(op):
    """Names a user may write for an op: its NAME and its DS_BUILD_* suffix (shm_comm, aio)."""
    names = {op["name"]}
    if op["build_var"].startswith("DS_BUILD_"):
        names.add(op["build_var"][len("DS_BUILD_"):].lower())
    return names


def select_ops(requested, available, accelerator, variable="deepspeed_build_ops"):
    """Resolve requested names to builders, or OpsError naming every unknown op and the valid ones."""
    index = {}
    for op in available:
        for alias in aliases(op):
            index.setdefault(alias, op)
    unknown = [r for r in requested if r not in index]
    if unknown:
        raise OpsError(
            "%s: %s not %s op of this DeepSpeed source for accelerator %s; valid ops: %s"
            % (variable, ", ".join(repr(u) for u in unknown),
               "an" if len(unknown) == 1 else "ops", accelerator,
               ", ".join(op["name"] for op in available)))
    selected = []
    for r in requested:
        if index[r] not in selected:
            selected.append(index[r])
    return selected


# What an op's builder (is_compatible) needs beyond torch and nvcc, checked before the build:
# DeepSpeed's setup.py would otherwise skip the op with a warning.
NEEDS_LIBAIO = ("async_io", "gds")
NEEDS_CUTLASS = ("evoformer_attn",)


def incompatible_ops(selected, accelerator, arch_list=(), env=None, libaio=True, cufile=True):
    """One message per selected op that this build cannot compile, naming the op, the reason and the fix.

    arch_list: parsed TORCH_CUDA_ARCH_LIST entries ('8.0', '9.0+PTX'); env: the build's
    environment (CUTLASS_PATH); libaio: libaio headers present or about to be installed;
    cufile: CUDA_HOME has libcufile (GPUDirect Storage).
    """
    env = env or {}
    problems = []
    for op in selected:
        name = op["name"]
        if name in NEEDS_LIBAIO and not libaio:
            problems.append("deepspeed_build_ops: %s (%s) is incompatible with this build host: it needs libaio's "
                            "headers and library (/usr/include/libaio.h); install libaio-dev or set "
                            "install_prerequisites=true" % (name, op["builder"]))
        if accelerator != "cuda":
            continue
        if name == "gds" and not cufile:
            problems.append("deepspeed_build_ops: gds (%s) is incompatible with this build host: it needs "
                            "libcufile (GPUDirect Storage) in the CUDA toolkit's lib64; install the toolkit's "
                            "cufile component or drop gds" % op["builder"])
        if name in NEEDS_CUTLASS and not env.get("CUTLASS_PATH"):
            problems.append("deepspeed_build_ops: %s (%s) is incompatible with this build: it needs CUTLASS >= 3.1; "
                            "set deepspeed_build_env: {CUTLASS_PATH: <a CUTLASS checkout>} or drop %s"
                            % (name, op["builder"], name))
        minimum = op.get("min_cc_major")
        if minimum and arch_list:
            low = [a for a in arch_list if int(a.split(".")[0]) < minimum]
            if low:
                problems.append("deepspeed_build_ops: %s (%s) compiles only for compute capability >= %d.0, its "
                                "builder drops %s from deepspeed_build_cuda_arch_list=%r: remove %s from the list "
                                "or drop %s" % (name, op["builder"], minimum, ", ".join(low), ";".join(arch_list),
                                                "it" if len(low) == 1 else "them", name))
    return problems


def build_env(selected):
    """Environment for setup.py: DS_BUILD_OPS=0 (nothing implicit) plus DS_BUILD_<OP>=1 each."""
    env = {"DS_BUILD_OPS": "0"}
    for op in selected:
        env[op["build_var"]] = "1"
    return env


def ops_in_wheel(wheel_path, selected):
    """Map op name -> path of its compiled extension inside the wheel (None when missing)."""
    with zipfile.ZipFile(wheel_path) as wheel:
        names = wheel.namelist()
    found = {}
    for op in selected:
        prefix = (op["module"] or "").replace(".", "/")
        found[op["name"]] = next(
            (n for n in names if prefix and n.startswith(prefix + ".") and n.endswith((".so", ".pyd"))), None)
    return found


def failure_reason(op, build_log):
    """Best line from the build log explaining why an op is missing from the wheel."""
    lines = (build_log or "").splitlines()
    patterns = [
        re.compile(r"Skip pre-compile of incompatible %s\b.*" % re.escape(op["name"])),
        re.compile(r"\b%s\b.*(requires|not compatible|incompatible|missing|not found|unable).*" % re.escape(op["name"]),
                   re.IGNORECASE),
        re.compile(r"error: .*%s" % re.escape((op["module"] or op["name"]).split(".")[-1])),
    ]
    for pattern in patterns:
        for line in lines:
            match = pattern.search(line)
            if match:
                return re.sub(r"\x1b\[[0-9;]*m", "", line).strip()
    errors = [line.strip() for line in lines if re.search(r"\berror\b", line, re.IGNORECASE)]
    if errors:
        return errors[-1]
    return "setup.py did not build it and logged no reason"


def check_wheel(wheel_path, selected, build_log):
    """Raise OpsError naming each requested op missing from the wheel, with the log's reason."""
    found = ops_in_wheel(wheel_path, selected)
    missing = [op for op in selected if not found[op["name"]]]
    if missing:
        raise OpsError("; ".join(
            "op %s (%s=1) is not in %s: %s" % (op["name"], op["build_var"], os.path.basename(wheel_path),
                                               failure_reason(op, build_log))
            for op in missing))
    return found


def wheel_gpu_coverage(wheel_path, found, arch_list):
    """Read the GPU code of each op's extension in the wheel (its `.nv_fatbin`).

    found: op name -> path in the wheel (check_wheel's result); arch_list: the requested
    TORCH_CUDA_ARCH_LIST entries. Returns (coverage, problems): coverage maps op name to
    {'sass': [...], 'ptx': [...]} or None for host-only extensions (cpu_adam: no GPU code);
    problems names each op and each requested arch its binary lacks.
    """
    from ansible_collections.multinode.training.plugins.module_utils._build import fatbin

    coverage = {}
    problems = []
    with zipfile.ZipFile(wheel_path) as wheel:
        for name, member in found.items():
            try:
                coverage[name] = fatbin.read_coverage(wheel.read(member))
            except fatbin.FatbinError as exc:
                problems.append("op %s: cannot read the GPU code of %s: %s" % (name, member, exc))
                continue
            if coverage[name] is None:
                continue
            missing = fatbin.missing_archs(coverage[name], arch_list)
            if missing:
                problems.append("op %s: %s lacks %s requested by deepspeed_build_cuda_arch_list=%r (it has %s)" % (
                    name, member, ", ".join(missing), ";".join(arch_list), fatbin.describe(coverage[name])))
    return coverage, problems
