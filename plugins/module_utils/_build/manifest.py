# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The wheel manifest (docs/manifest.md): schema, read, validate, write. One place.

Written by the build (module deepspeed_build (manifest)), read by the build's own
no-change probe and fetch check (deepspeed_build (probe), deepspeed_build (dist_check)), by
wheel_distribute (wheel_distribute (source)) and by the validator (_validate.rules).
Pure Python, stdlib only: runs on the controller and on the build host.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile

# The one sha256 of a file (hex) is the data-sync worker's: that file runs alone on the nodes, from its
# source, so it keeps its own, and the module side takes it from there rather than hold a second one.
from ansible_collections.multinode.training.plugins.module_utils._data.worker import sha256_file

SCHEMA = 1
SUFFIX = ".manifest.json"
# The keys every consumer relies on; listed here only.
REQUIRED_KEYS = ("schema", "wheel", "wheel_sha256", "deepspeed", "accelerator", "python", "torch", "ops")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class ManifestError(ValueError):
    """A manifest that cannot be used; str() is the reason, naming the file."""


def sha256_text(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def path_for(wheel_path):
    """The manifest path beside a wheel."""
    return wheel_path + SUFFIX


def wheel_path(manifest_path, manifest):
    """The wheel a manifest describes, in the manifest's folder."""
    return os.path.join(os.path.dirname(manifest_path), manifest["wheel"])


def dumps(manifest):
    """The manifest's file text (stable: sorted keys, 2-space indent, final newline)."""
    return json.dumps(manifest, indent=2, sort_keys=True) + "\n"


def loads(text, where):
    """Parse manifest text; ManifestError naming `where` when it is not a JSON object."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ManifestError("manifest %s is not valid JSON (%s; truncated?)" % (where, getattr(exc, "msg", None) or exc))
    if not isinstance(data, dict):
        raise ManifestError("manifest %s holds JSON %s, not an object" % (where, type(data).__name__))
    return data


def read_text(path):
    """(text, sha256 of the bytes); ManifestError when unreadable."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except (IOError, OSError) as exc:
        raise ManifestError("manifest %s cannot be read (%s)" % (path, exc.strerror or exc))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ManifestError("manifest %s is not UTF-8 text" % path)
    return text, hashlib.sha256(raw).hexdigest()


def read(path):
    """The manifest at path as a dict (parsed, not validated)."""
    return loads(read_text(path)[0], path)


def missing_keys(manifest):
    return [key for key in REQUIRED_KEYS if key not in manifest]


def problems(manifest, where):
    """Everything wrong with a manifest's structure, each naming `where` (its path)."""
    if not isinstance(manifest, dict):
        return ["manifest %s is not a JSON object" % where]
    found = ["manifest %s lacks key %r" % (where, key) for key in missing_keys(manifest)]
    if found:
        return found
    if manifest["schema"] != SCHEMA:
        found.append("manifest %s has schema %r, this role reads schema %d" % (where, manifest["schema"], SCHEMA))
    if not _SHA256.match(str(manifest["wheel_sha256"])):
        found.append("manifest %s: wheel_sha256 %r is not a sha256 hex digest" % (where, manifest["wheel_sha256"]))
    name = str(manifest["wheel"])
    if not name.endswith(".whl") or len(name[:-4].split("-")) < 5 or "/" in name:
        found.append("manifest %s: %r is not a wheel file name (name-version-python-abi-platform.whl)" % (where, name))
    if not isinstance(manifest["ops"], list):
        found.append("manifest %s: ops is %s, not a list" % (where, type(manifest["ops"]).__name__))
    else:
        for index, op in enumerate(manifest["ops"]):
            for key in ("name", "builder", "module"):
                if not isinstance(op, dict) or not op.get(key):
                    found.append("manifest %s: ops[%d] lacks %r" % (where, index, key))
    return found


def newest(directory):
    """Path of the newest *.whl.manifest.json in directory (mtime, then name), or None."""
    try:
        names = [n for n in os.listdir(directory) if n.endswith(".whl" + SUFFIX)]
    except OSError:
        return None
    paths = [os.path.join(directory, n) for n in names]
    return max(paths, key=lambda p: (os.path.getmtime(p), p)) if paths else None


def wheel_problem(manifest, wheel, where):
    """None when `wheel` exists and has the manifest's sha256 and name; else what is wrong."""
    if not os.path.isfile(wheel):
        return "wheel %s not found on the controller (named by manifest %s)" % (wheel, where)
    have = sha256_file(wheel)
    if have != manifest["wheel_sha256"]:
        return ("wheel %s has sha256 %s, manifest %s says %s: the wheel is not the one the manifest describes "
                "(rebuild, or pass the matching pair)" % (wheel, have, where, manifest["wheel_sha256"]))
    if os.path.basename(wheel) != manifest["wheel"]:
        return "wheel %s is not the manifest's wheel %s" % (wheel, manifest["wheel"])
    return None


def write(path, manifest, check_mode=False):
    """Write atomically (temp file + rename) when the text differs; returns whether it changed."""
    text = dumps(manifest)
    try:
        with open(path) as handle:
            old = handle.read()
    except (IOError, OSError):
        old = None
    if old == text:
        return False
    if not check_mode:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=".manifest.")
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.rename(tmp, path)
    return True
