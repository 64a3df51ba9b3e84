# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The DeepSpeed ops a job's DeepSpeed config makes DeepSpeed load, against the ops prebuilt on the nodes.

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

Without train_deepspeed_config, an accelerate config (train_accelerate_config) with a ``deepspeed_config``
section names the DeepSpeed config: its ``deepspeed_config_file`` (on the nodes relative to
train_code_dir, the copy of train_code_src: read from train_code_src on the controller), or its inline
fields (``offload_optimizer_device``, ``offload_param_device``; no optimizer: the script's).
"""
from __future__ import annotations

import json
import os

OFFLOAD_DEVICES = ("cpu", "nvme")


def _zero(config):
    zero = config.get("zero_optimization")
    return zero if isinstance(zero, dict) else {}


def _device(section):
    return str((section or {}).get("device") or "none").lower() if isinstance(section, dict) else "none"


def needed_ops(config):
    """DeepSpeed config (parsed JSON) -> [(op, why)] in the order DeepSpeed would load them."""
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


def accelerate_deepspeed_config(accelerate, accelerate_path, code_src=""):
    """The DeepSpeed config an accelerate config (parsed YAML, at ``accelerate_path`` on the controller) makes
    the job use, for config_ops_problems: {} (none), {text, path, label}, or {problem} when its
    deepspeed_config_file cannot be read on the controller. ``code_src``: train_code_src when it is copied to
    train_code_dir (a relative deepspeed_config_file is there on the nodes), else ""."""
    section = (accelerate or {}).get("deepspeed_config") if isinstance(accelerate, dict) else None
    if not isinstance(section, dict) or not section:
        return {}
    name = section.get("deepspeed_config_file")
    if name and str(name).lower() != "none":
        name = str(name)
        where = name if os.path.isabs(name) else (
            os.path.join(code_src, name) if code_src and os.path.isdir(code_src) else "")
        label = "train_accelerate_config=%s (its deepspeed_config_file %s)" % (accelerate_path, name)
        try:
            with open(where, encoding="utf-8") as handle:
                return {"text": handle.read(), "path": where, "label": label}
        except (IOError, OSError) as exc:
            why = (exc.strerror or str(exc)) if where else "train_code_src is not a directory"
            return {"problem": "%s: cannot be read on the controller (%s); valid: a file of the directory "
                               "train_code_src (copied to train_code_dir, where a relative name is found), an "
                               "absolute path that is the same file on the controller and the nodes, or "
                               "train_deepspeed_config" % (label, why)}
    inline = {"zero_optimization": dict(
        (key, {"device": section.get(field)}) for key, field in (
            ("offload_optimizer", "offload_optimizer_device"), ("offload_param", "offload_param_device"))
        if section.get(field))}
    return {"text": json.dumps(inline), "path": accelerate_path,
            "label": "train_accelerate_config=%s (its deepspeed_config)" % accelerate_path}


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
