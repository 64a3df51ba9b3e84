# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The DeepSpeed config a job uses, read on the controller, for the check of the ops it makes DeepSpeed load
against the ops prebuilt on the nodes (the check itself: _node/preflight.py's needed_ops and
config_ops_problems, shipped to the nodes by the Slurm launcher).

Without train_deepspeed_config, an accelerate config (train_accelerate_config) with a ``deepspeed_config``
section names the DeepSpeed config: its ``deepspeed_config_file`` (on the nodes relative to
train_code_dir, the copy of train_code_src: read from train_code_src on the controller), or its inline
fields (``offload_optimizer_device``, ``offload_param_device``; no optimizer: the script's).
"""
from __future__ import annotations

import json
import os


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


def job_deepspeed_config(config):
    """The role's view of the job's DeepSpeed config -> what _node.preflight.compare checks the ops against:
    ``{text, path}`` (train_deepspeed_config, read by the role) is kept; ``{accelerate, accelerate_path,
    code_src}`` becomes the config the accelerate config names (accelerate_deepspeed_config); {} stays {}."""
    config = dict(config or {})
    if "accelerate" in config:
        return accelerate_deepspeed_config(config["accelerate"], config.get("accelerate_path") or "",
                                           config.get("code_src") or "")
    return config
