# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Role deepspeed_build's decisions: where the source is, the build key, whether the wheel exists.

Pure functions over paths and plain data (stdlib only), used by module deepspeed_build_probe
on the build host and unit-tested on temporary trees and recorded manifests.
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
import re

from ansible_collections.multinode.training.plugins.module_utils import _manifest

# What a DeepSpeed build needs to know about an interpreter (run with it; reads only).
PYTHON_PROBE = r'''
import importlib.util, json, os, sys, sysconfig
print(json.dumps({
    "version": "%d.%d.%d" % sys.version_info[:3],
    "tag": "cp%d%d" % sys.version_info[:2],
    "platform": sysconfig.get_platform().replace("-", "_").replace(".", "_"),
    "pip": importlib.util.find_spec("pip") is not None,
    "venv": importlib.util.find_spec("venv") is not None and importlib.util.find_spec("ensurepip") is not None,
    "headers": os.path.exists(os.path.join(sysconfig.get_paths().get("include") or "", "Python.h")),
}))
'''

AIO_OPS = ("async_io", "aio", "gds")
_SKIP_DIRS = {".git", "build", "dist", "__pycache__"}


def source_digest(root):
    """sha256 over a source tree (relative paths and contents), ignoring build output and .git."""
    digest = hashlib.sha256()
    for base, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.endswith(".egg-info"))
        for name in sorted(files):
            path = os.path.join(base, name)
            rel = os.path.relpath(path, root)
            # setup.py rewrites this file during every build.
            if rel == os.path.join("deepspeed", "git_version_info_installed.py") or name.endswith(".pyc"):
                continue
            digest.update(rel.encode() + b"\0")
            with open(path, "rb") as handle:
                digest.update(hashlib.sha256(handle.read()).digest())
    return digest.hexdigest()


def tree_for_archive(src_cache, archive_sha256):
    """Where an archive with this sha256 is unpacked in the source cache."""
    return os.path.join(src_cache, "tree-" + archive_sha256[:16])


def find_source(kind, src_cache, version, local_path):
    """The cached source tree for a request, or why there is none yet (then the role fetches it).

    Returns {ready, tree, archive, sha256, spec, reason}. git is never ready here: a ref may move.
    """
    found = {"ready": False, "tree": "", "archive": "", "sha256": None, "spec": "", "commit": None, "reason": ""}
    if kind == "pypi":
        found["spec"] = "deepspeed==%s" % version
        archives = sorted(glob.glob(os.path.join(src_cache, "pypi-%s" % version, "deepspeed-*.tar.gz")))
        if not archives:
            found["reason"] = "sdist not downloaded yet"
            return found
        found["archive"] = archives[0]
    elif kind == "local":
        found["spec"] = local_path
        if os.path.isdir(local_path):
            found.update(ready=True, tree=local_path)
            return found
        if not os.path.isfile(local_path):
            found["reason"] = "%s missing" % local_path
            return found
        found["archive"] = local_path
    else:
        found["reason"] = "git checkouts are updated on every run"
        return found
    found["sha256"] = _manifest.sha256_file(found["archive"])
    tree = tree_for_archive(src_cache, found["sha256"])
    if not os.path.isfile(os.path.join(tree, "setup.py")):
        found["reason"] = "archive not unpacked yet"
        return found
    found.update(ready=True, tree=tree)
    return found


def read_version(tree):
    with open(os.path.join(tree, "version.txt")) as handle:
        return handle.read().strip()


def torch_key_version(torch):
    """torch's version without a +cuXY label matching its CUDA (pip says 2.13.0, the venv 2.13.0+cu130)."""
    label = "+cu" + (torch.get("cuda") or "none").replace(".", "")
    version = torch.get("version") or ""
    return version[:-len(label)] if version.endswith(label) else version


def build_key(source_digest_hex, torch, plan, python, env):
    """sha256 of every input that changes the wheel: the same key means the same wheel."""
    inputs = {
        "source": source_digest_hex,
        "torch": {"version": torch_key_version(torch), "cuda": torch.get("cuda")},
        "accelerator": plan["accelerator"],
        "arch_list": plan["arch_list"],
        "nvcc": (plan.get("nvcc") or {}).get("release") if plan["accelerator"] == "cuda" else None,
        "ops": [op["name"] for op in plan["ops"]],
        "gcc": plan["compiler"]["gcc"],
        "cpu": [plan["cpu"]["march"], plan["cpu"]["flags"]],
        "python": [python["tag"], python["platform"]],
        "env": env,
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode("utf-8")).hexdigest()


def wheelhouse_key(manifest_name, key, torch_requirement, pip_args):
    """The wheelhouse is redone when the wheel, the torch requirement or the pip arguments change."""
    return hashlib.sha256(json.dumps([manifest_name, key, torch_requirement, list(pip_args)]).encode("utf-8")).hexdigest()


def existing_wheel(out_dir, key):
    """Is the wheel for this build key in out_dir, whole? {up_to_date, reason, manifest, manifest_path, manifest_sha256}."""
    result = {"up_to_date": False, "manifest": None, "manifest_path": None, "manifest_sha256": None, "reason": ""}
    path = _manifest.newest(out_dir)
    if path is None:
        result["reason"] = "no manifest in %s" % out_dir
        return result
    try:
        text, digest = _manifest.read_text(path)
        manifest = _manifest.loads(text, path)
    except _manifest.ManifestError as exc:
        result["reason"] = str(exc)
        return result
    result.update(manifest=manifest, manifest_path=path, manifest_sha256=digest)
    problems = _manifest.problems(manifest, path)
    if problems:
        result["reason"] = "; ".join(problems)
    elif (manifest.get("build") or {}).get("key") != key:
        result["reason"] = "the manifest's build key differs (inputs changed)"
    elif not os.path.isfile(_manifest.wheel_path(path, manifest)):
        result["reason"] = "the wheel named by %s is missing" % path
    elif _manifest.sha256_file(_manifest.wheel_path(path, manifest)) != manifest["wheel_sha256"]:
        result["reason"] = "the wheel's sha256 differs from its manifest"
    else:
        result["up_to_date"] = True
    return result


def read_stamp(path):
    try:
        with open(path) as handle:
            return handle.read().strip()
    except (IOError, OSError):
        return None


def installed_torch(venv_python):
    """{version, cuda} of the torch in the venv of venv_python from its dist-info (no import), or None."""
    venv = os.path.dirname(os.path.dirname(venv_python))
    for meta in sorted(glob.glob(os.path.join(venv, "lib", "python*", "site-packages", "torch-*.dist-info", "METADATA"))):
        with open(meta, errors="replace") as handle:
            version = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("Version:")), None)
        version_py = os.path.join(os.path.dirname(os.path.dirname(meta)), "torch", "version.py")
        if not version or not os.path.isfile(version_py):
            return None
        with open(version_py, errors="replace") as handle:
            match = re.search(r"^cuda\s*(?::\s*[^=]+)?=\s*(['\"]([^'\"]*)['\"]|None)", handle.read(), re.M)
        if not match:
            return None
        return {"version": version, "cuda": None if match.group(1) == "None" else (match.group(2) or None)}
    return None


def missing_packages(python, source, ops):
    """Distribution packages the build host lacks for this build."""
    return (([] if python.get("venv") else ["python3-venv"]) + ([] if python.get("headers") else ["python3-dev"])
            + (["git"] if source == "git" else []) + (["libaio-dev"] if set(ops or []) & set(AIO_OPS) else []))


def dist_state(dist_dir, manifest, manifest_sha256, stamp):
    """What the controller's dist/ lacks of the build host's output: {wheel, manifest, wheelhouse: needs fetch}."""
    wheel = os.path.join(dist_dir, manifest["wheel"])
    local_manifest = _manifest.path_for(wheel)
    need = {
        "wheel": not os.path.isfile(wheel) or _manifest.sha256_file(wheel) != manifest["wheel_sha256"],
        "manifest": not os.path.isfile(local_manifest) or _manifest.read_text(local_manifest)[1] != manifest_sha256,
        "wheelhouse": stamp is not None and read_stamp(os.path.join(dist_dir, "wheelhouse", ".stamp")) != stamp,
    }
    need["wheel"] = need["wheel"] or need["manifest"]  # fetched as a pair: wheel first, manifest last
    need["manifest"] = need["wheel"]
    return need
