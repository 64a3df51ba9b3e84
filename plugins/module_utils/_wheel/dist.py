# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Role wheel_distribute's no-change decisions: what the controller distributes, and is a node current?

Controller side (module wheel_distribute (source)): the manifest (read by _manifest, validated by compat), its
wheel, the wheelhouse, each file with sha256 and size. Node side (module wheel_distribute (compat)): the
record of what was copied and verified (RECORD_NAME in the node folder), the venv's marker, and the
installed op binaries against the sha256 that DeepSpeed's dist-info RECORD holds for them. A node
whose answers all agree gets no copy, no install and no verification run: the role reports it.
"""
from __future__ import annotations

import base64
import glob
import json
import os

from ansible_collections.multinode.training.plugins.module_utils._build import manifest as _manifest
from ansible_collections.multinode.training.plugins.module_utils._wheel import compat
from ansible_collections.multinode.training.plugins.module_utils._wheel import space as _space
from ansible_collections.multinode.training.plugins.module_utils._node.preflight import lock_differences

RECORD_NAME = ".distributed.json"


class DistError(ValueError):
    """The controller's files cannot be distributed; str() says which and why."""


def choose_manifest(dist_dir, manifest, wheel):
    """The manifest path: explicit, beside an explicit wheel, or the newest in dist_dir."""
    if manifest:
        return manifest
    if wheel:
        return _manifest.path_for(wheel)
    return _manifest.newest(dist_dir) or os.path.join(dist_dir, "*.whl" + _manifest.SUFFIX)


def file_entry(path, cache=None):
    """{sha256, size} of a controller file, and for a wheel its installed size (unpacked, _wheel.space).
    cache ({path: [size, mtime_ns, sha256, unpacked]}) skips re-reading a file whose size and
    modification time are unchanged since it was hashed, and is updated in place."""
    st = os.stat(path)
    wheel = path.endswith(".whl")
    known = (cache or {}).get(path)
    if known and known[0] == st.st_size and known[1] == st.st_mtime_ns and (len(known) > 3 or not wheel):
        digest, unpacked = known[2], known[3] if len(known) > 3 else None
    else:
        digest = known[2] if known and known[0] == st.st_size and known[1] == st.st_mtime_ns else \
            _manifest.sha256_file(path)
        unpacked = _space.unpacked_size(path) if wheel else None
        if cache is not None:
            cache[path] = [st.st_size, st.st_mtime_ns, digest, unpacked]
    entry = {"sha256": digest, "size": st.st_size}
    if unpacked is not None:
        entry["unpacked"] = unpacked
    return entry


def source(dist_dir, manifest_path, wheel, wheelhouse, index_url, lock="", requirement_wheels=(), cache=None,
           existing=False):
    """What goes to every node. Raises DistError with the message the role prints.

    lock and requirement_wheels: the job requirements' lock (to dist/) and the wheels it adds (to wheelhouse/).
    existing: the nodes' own environment brings torch (wheel_distribute_venv_existing): the wheelhouse's torch
    wheels are not sent and none is required.
    """
    if not os.path.isfile(manifest_path):
        raise DistError("wheel manifest %s not found on the controller" % manifest_path)
    try:
        manifest = _manifest.read(manifest_path)
    except _manifest.ManifestError as exc:
        raise DistError("%s (see docs/manifest.md)" % exc)
    # Its arch list too: the nodes' GPU check reads it, and would fail there on every node instead.
    problems = compat.manifest_problems(manifest, manifest_path)
    if problems:
        raise DistError("%s (see docs/manifest.md)" % "; ".join(problems))
    wheel_path = wheel or _manifest.wheel_path(manifest_path, manifest)
    problem = _manifest.wheel_problem(manifest, wheel_path, manifest_path)
    if problem:
        raise DistError(problem)
    files = {"dist/" + os.path.basename(wheel_path): dict(file_entry(wheel_path, cache), src=wheel_path),
             "dist/" + os.path.basename(manifest_path): dict(file_entry(manifest_path, cache), src=manifest_path)}
    wheels = sorted(glob.glob(os.path.join(wheelhouse, "*.whl"))) if wheelhouse else []
    if existing:
        wheels = [path for path in wheels if not os.path.basename(path).startswith("torch-")]
    for path in wheels:
        files["wheelhouse/" + os.path.basename(path)] = dict(file_entry(path, cache), src=path)
    if lock:
        files["dist/" + os.path.basename(lock)] = dict(file_entry(lock, cache), src=lock)
    for path in requirement_wheels:
        files["wheelhouse/" + os.path.basename(path)] = dict(file_entry(path, cache), src=path)
    torch = manifest["torch"]["version"]
    if not existing and not index_url and not any(os.path.basename(p).startswith("torch-%s-" % torch) for p in wheels):
        raise DistError("wheelhouse %s on the controller has no torch-%s-*.whl, which the wheel needs (manifest %s); "
                        "it holds %d wheels. Nodes install with --no-index unless wheel_distribute_index_url is set."
                        % (wheelhouse or "(none)", torch, manifest_path, len(wheels)))
    return {"manifest": manifest, "manifest_path": manifest_path, "wheel_path": wheel_path, "files": files}


def load_cache(path):
    try:
        with open(path) as handle:
            cache = json.load(handle)
        return cache if isinstance(cache, dict) else {}
    except (IOError, OSError, ValueError):
        return {}


def save_cache(path, cache):
    """Write the checksum cache atomically; a cache that cannot be written is only a slower next run."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = "%s.%d" % (path, os.getpid())
        with open(tmp, "w") as handle:
            json.dump(cache, handle)
        os.rename(tmp, path)
    except (IOError, OSError):
        pass


def expected_record(files):
    """The node record for these files: {relative path: {sha256, size}}."""
    return {name: {"sha256": entry["sha256"], "size": entry["size"]} for name, entry in sorted(files.items())}


def record_problems(node_dir, expected, record_text):
    """Why the node's copies are not the expected ones (empty: current)."""
    if record_text is None:
        return ["no record of a verified copy in %s" % node_dir]
    try:
        record = json.loads(record_text)
    except ValueError:
        return ["unreadable %s" % os.path.join(node_dir, RECORD_NAME)]
    problems = []
    if (record or {}).get("files") != expected:
        problems.append("the files recorded in %s differ from the controller's" % node_dir)
    for name, entry in sorted(expected.items()):
        path = os.path.join(node_dir, name)
        try:
            size = os.path.getsize(path)
        except OSError:
            problems.append("%s is missing" % path)
            continue
        if size != entry["size"]:
            problems.append("%s has %d bytes, expected %d" % (path, size, entry["size"]))
    return problems


def _record_hash(value):
    """A dist-info RECORD hash ('sha256=<urlsafe b64, no padding>') as hex, or None."""
    algo, _sep, digest = (value or "").partition("=")
    if algo != "sha256" or not digest:
        return None
    return base64.urlsafe_b64decode(digest + "=" * (-len(digest) % 4)).hex()


def installed_op_problems(venv, manifest, site=None):
    """Each op binary of the manifest, installed in the venv, against the sha256 its dist-info RECORD holds.
    site: the directory DeepSpeed is installed in, where the environment's own python said (an existing
    environment: a conda env, an NGC container's dist-packages); None: the venv's lib/python*/site-packages."""
    if site is None:
        sites = sorted(glob.glob(os.path.join(venv, "lib", "python*", "site-packages")))
        if not sites:
            return ["%s has no site-packages" % venv]
        site = sites[0]
    version = (manifest.get("deepspeed") or {}).get("version") or "*"
    records = glob.glob(os.path.join(site, "deepspeed-%s.dist-info" % version, "RECORD"))
    if not records:
        return ["%s has no deepspeed-%s.dist-info" % (site, version)]
    hashes = {}
    with open(records[0], errors="replace") as handle:
        for line in handle:
            parts = line.rstrip("\n").rsplit(",", 2)
            if len(parts) == 3:
                hashes[parts[0]] = _record_hash(parts[1])
    problems = []
    for op in manifest.get("ops") or []:
        rel = op.get("file")
        if not rel:
            continue
        path = os.path.join(site, rel)
        if not os.path.isfile(path):
            problems.append("op %s: %s is missing" % (op.get("name"), path))
        elif hashes.get(rel) is None or _manifest.sha256_file(path) != hashes[rel]:
            problems.append("op %s: %s differs from the installed wheel's RECORD" % (op.get("name"), path))
    return problems


def marker_problem(manifest, marker, lock_sha256):
    """Why the venv's marker is not this wheel's verified install with this run's job requirements lock
    (its sha256; empty: no job requirements), or None."""
    marker = marker or {}
    if not (marker.get("verified") is True and marker.get("wheel_sha256") == manifest.get("wheel_sha256")
            and marker.get("torch") == (manifest.get("torch") or {}).get("version")):
        return "the venv's marker is not this wheel's verified install"
    if (marker.get("requirements_sha256") or "") != (lock_sha256 or ""):
        return ("the venv was installed with another job requirements lock (%s, this run's: %s)"
                % (marker.get("requirements_sha256") or "none", lock_sha256 or "none"))
    return None


def package_problems(venv_facts, lock_packages):
    """How the venv's packages differ from the job requirements' lock (name==version; None or empty: no
    job requirements, nothing compared)."""
    if not lock_packages:
        return []
    return ["the venv differs from the job requirements' lock: %s" % line
            for line in lock_differences(venv_facts.get("packages") or [], lock_packages)]


def current_problems(manifest, venv_facts, lock_sha256, node_dir, expected, record_text, lock_packages=None):
    """Why this node needs the copy, install or verification steps; empty when it is current.

    venv_facts: _wheel.node_probe.venv_facts() of the venv path (its marker, state, symlink target, packages),
    or existing_env_facts() of an existing environment (no release symlink: its marker is kept in the node
    directory, its DeepSpeed found where its python says);
    lock_packages: the job requirements' lock as name==version (None: no job requirements).
    """
    problems = []
    marker = marker_problem(manifest, venv_facts.get("marker"), lock_sha256)
    existing = venv_facts.get("existing")
    if venv_facts.get("state") != "directory" or not (existing or venv_facts.get("symlink")):
        problems.append("%s is not %s" % (venv_facts.get("path"),
                                          "a directory" if existing else "a release symlink"))
    elif marker:
        problems.append(marker)
    else:
        problems.extend(package_problems(venv_facts, lock_packages))
        problems.extend(installed_op_problems(venv_facts["target"], manifest,
                                              venv_facts.get("site") if existing else None))
    problems.extend(record_problems(node_dir, expected, record_text))
    return problems


ENV_FIELDS = ("venv", "python", "python_version", "torch", "torch_cuda", "deepspeed", "accelerator", "ops",
              "wheel", "wheel_sha256")


def env_from_marker(marker):
    """The environment fact of a current node: what its verified install recorded."""
    return dict((key, marker.get(key)) for key in ENV_FIELDS)


# --------------------------------------------------------------------------- the wheel_distribute (source) module

ARGUMENT_SPEC = dict(
    dist_dir=dict(type="path", required=True),
    manifest=dict(type="str", default=""),
    wheel=dict(type="str", default=""),
    wheelhouse=dict(type="str", default=""),
    index_url=dict(type="str", default=""),
    requirements_lock=dict(type="str", default=""),
    requirement_wheels=dict(type="list", elements="str", default=[]),
    checksum_cache=dict(type="path", default="~/.cache/multinode-training/wheel-sha256.json"),
    node=dict(type="str", default=""),
    existing=dict(type="bool", default=False),
)


def run_module(module):
    """The files to distribute (source()), with the controller's checksum cache read and, when it grew, saved."""
    p = module.params
    path = choose_manifest(p["dist_dir"], p["manifest"], p["wheel"])
    cache_path = p["checksum_cache"] or ""
    cache = load_cache(cache_path) if cache_path else None
    before = dict(cache or {})
    try:
        found = source(p["dist_dir"], path, p["wheel"], p["wheelhouse"], p["index_url"],
                       p["requirements_lock"], p["requirement_wheels"], cache, p["existing"])
    except DistError as exc:
        module.fail_json(msg="%s%s" % (p["node"] + ": " if p["node"] else "", exc), manifest_path=path)
    if cache_path and cache != before and not module.check_mode:
        save_cache(cache_path, cache)
    unpacked = dict((name, entry["unpacked"]) for name, entry in found["files"].items() if entry.get("unpacked"))
    module.exit_json(changed=False, record=expected_record(found["files"]), unpacked=unpacked, **found)
