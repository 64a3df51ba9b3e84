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
"""
from __future__ import annotations

import json

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


def config_ops_problems(text, path, node, node_ops, allow_jit=False):
    """The DeepSpeed config ``text`` (train_deepspeed_config at ``path``) against the ops prebuilt in ``node``'s
    environment (``node_ops``: the probe's binaries) -> problem lines (empty with ``allow_jit``: DeepSpeed then
    JIT-compiles what is missing on every node, as the user asked)."""
    try:
        config = json.loads(text)
    except ValueError as exc:
        return ["train_deepspeed_config=%s: not JSON (%s); valid: a DeepSpeed JSON config" % (path, exc)]
    if not isinstance(config, dict):
        return ["train_deepspeed_config=%s: not a JSON object; valid: a DeepSpeed JSON config" % path]
    have = sorted(set(op_name(op) for op in node_ops or []))
    problems = []
    for op, why in needed_ops(config):
        if op in have or allow_jit:
            continue
        problems.append(
            "train_deepspeed_config=%s: %s makes DeepSpeed load op %s, which the DeepSpeed on %s does not have "
            "prebuilt (it has: %s): every rank would JIT-compile it at the first step; valid: a wheel with it - "
            "add %s to deepspeed_build_ops and build again (build_deepspeed.yml) - or train_allow_jit=true"
            % (path, why, op, node, ", ".join(have) or "none", op))
    return problems
