# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Preflight of a training job, the module and controller side: the controller's manifest of
train_code_src (filter multinode.training.code_manifest) and module train_node (probe).

The probe and the comparison across the nodes are _node/preflight.py, one implementation for every
launcher (the Slurm launcher ships it to the nodes); filter multinode.training.train_preflight_problems
is the comparison's face in role train.
"""
from __future__ import annotations

import inspect
import os
import stat

from ansible_collections.multinode.training.plugins.module_utils._node import env_probe
from ansible_collections.multinode.training.plugins.module_utils._node import preflight as node_preflight
from ansible_collections.multinode.training.plugins.module_utils._build.manifest import sha256_file
from ansible_collections.multinode.training.plugins.module_utils._node.preflight import CONNECT_TIMEOUT


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


def env_probe_source():
    """Source of env_probe.py, run by the job's python (works from AnsiballZ's zip too)."""
    return inspect.getsource(env_probe)


def probe_node(python, run, script=None, chdir=None, env_files=(), connect=None, code=None):
    """_node.preflight.probe_node from a module: env_probe.py's source from the module's own module_utils."""
    return node_preflight.probe_node(python, run, script, chdir, env_files, connect, code,
                                     probe_source=env_probe_source())


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
    """Module train_node (probe): probe_node with the module's parameters (the probe again after a code copy, roles/train/tasks/sync.yml)."""
    p = module.params
    connect = None
    if p["connect_host"]:
        connect = {"host": p["connect_host"], "port": p["connect_port"], "timeout": p["connect_timeout"]}
    result = probe_node(p["python"], module.run_command, p["script"], p["chdir"], p["env_files"],
                        connect, p["code"])
    module.exit_json(changed=False, **result)
