# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Module wheel_distribute's seed step: a new release venv starts with the packages it shares with the
active release, as hard links, so that a change of the job requirements installs only what changed.

A release is otherwise a fresh venv into which pip installs the whole lock (torch included: 3 to 4 GB
with the CUDA libraries); adding one small package then re-installs everything on every node. Here a
distribution is carried over only when both releases' locks pin it to the same wheel (name, version and
sha256 equal), the two venvs were made by the same interpreter, and every file its dist-info RECORD
lists is present with the hash RECORD gives. Its files are hard-linked (copied where linking fails);
console scripts get the new release's interpreter in their first lines (and their RECORD line its new
hash). Then pip installs the lock as before: what was carried over is already satisfied, the rest comes
from the wheelhouse with its hash checked. Nothing of a package dropped or changed is carried over, so
the release holds what a fresh install would.

pip and the interpreter never change an installed file in place (an upgrade or ``.pyc`` write makes a
new file and renames it), so a file shared between two releases stays the same in both. A release
without a recorded lock (made before, or without job requirements) seeds nothing.
"""
from __future__ import annotations

import base64
import csv
import glob
import hashlib
import io
import os
import shutil

from ansible_collections.multinode.training.plugins.module_utils._data.worker import sha256_file
from ansible_collections.multinode.training.plugins.module_utils._node import env_probe
from ansible_collections.multinode.training.plugins.module_utils._wheel import requirements as reqs

ARGUMENT_SPEC = dict(
    venv=dict(type="path", required=True),
    release=dict(type="path", required=True),
    lock=dict(type="path", required=True),
)
# The lock a release was installed from, kept in the release (role wheel_distribute copies it there).
LOCK_NAME = ".multinode-training.requirements.lock"
_HEAD = 1024  # bytes of a script in which its interpreter line is rewritten


def kept_packages(old_entries, new_entries):
    """{canonical name: version} pinned to the same wheel (name, version, sha256) by both locks."""
    name = reqs.canonicalize_name
    old = {(name(e["name"]), e["version"], e["sha256"]) for e in old_entries}
    return {name(e["name"]): e["version"] for e in new_entries if (name(e["name"]), e["version"], e["sha256"]) in old}


def site_packages(venv):
    """The venv's one lib/python*/site-packages, or None."""
    found = glob.glob(os.path.join(venv, "lib", "python*", "site-packages"))
    return found[0] if len(found) == 1 else None


def _pyvenv(venv):
    """pyvenv.cfg's home and version: the interpreter that made the venv."""
    values = {}
    try:
        with open(os.path.join(venv, "pyvenv.cfg")) as handle:
            for line in handle:
                key, sep, value = line.partition("=")
                if sep:
                    values[key.strip()] = value.strip()
    except OSError:
        return None
    return values.get("home"), values.get("version") or values.get("version_info")


def _record_field(digest):
    """RECORD's hash field for a sha256 ``digest`` (bytes)."""
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def record_hash(data):
    """RECORD's hash field for ``data``."""
    return _record_field(hashlib.sha256(data).digest())


def _file_hash(path):
    """RECORD's hash field for the file at ``path``."""
    return _record_field(bytes.fromhex(sha256_file(path)))


def _dist_name_version(dist_info):
    """A dist-info's (canonical name, version), from its METADATA (the directory's name where it has none)."""
    found = env_probe.headers(dist_info)
    dir_name, _sep, dir_version = os.path.basename(dist_info)[:-len(".dist-info")].partition("-")
    return reqs.canonicalize_name(found["name"] or dir_name), found["version"] or dir_version


def _record_rows(dist_info):
    with open(os.path.join(dist_info, "RECORD"), newline="", encoding="utf-8") as handle:
        return [row for row in csv.reader(handle) if row]


def plan_distribution(old_root, old_site, dist_info):
    """[(row, source path)] for a distribution whose files are all present and match RECORD, else
    (None, why)."""
    try:
        rows = _record_rows(dist_info)
    except (OSError, csv.Error) as exc:
        return None, "RECORD unreadable: %s" % exc
    planned = []
    for row in rows:
        src = os.path.normpath(os.path.join(old_site, row[0]))
        if os.path.commonpath([old_root, src]) != old_root:
            return None, "RECORD names %s, outside the venv" % row[0]
        if not os.path.lexists(src):
            if row[0].endswith(".pyc"):
                continue  # a .pyc removed since: the new release compiles it again when needed
            return None, "%s is missing" % row[0]
        if len(row) > 1 and row[1] and not os.path.islink(src) and _file_hash(src) != row[1]:
            return None, "%s differs from its RECORD hash" % row[0]
        planned.append((row, src))
    return planned, None


def _same_file(src, dst):
    """One file linked at both paths (a dangling link, or one that cannot be read, is not)."""
    try:
        return os.path.samefile(src, dst)
    except OSError:
        return False


def _place(src, dst, old_root, new_root):
    """Link (or copy) ``src`` to ``dst``; a script naming the old interpreter gets the new one.
    Returns the new RECORD hash and size when the content changed, else None."""
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    if os.path.islink(src):
        os.symlink(os.readlink(src), dst)
        return None
    old_bin = (old_root + "/bin/").encode()
    if os.path.basename(os.path.dirname(src)) == "bin" and os.path.dirname(os.path.dirname(src)) == old_root:
        with open(src, "rb") as handle:
            data = handle.read()
        head = data[:_HEAD]
        if head.startswith(b"#!") and old_bin in head:
            data = head.replace(old_bin, (new_root + "/bin/").encode()) + data[_HEAD:]
            with open(dst, "wb") as handle:
                handle.write(data)
            shutil.copymode(src, dst)
            return record_hash(data), str(len(data))
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
    return None


def seed(old_root, new_root, kept):
    """Carry the distributions of ``kept`` ({canonical name: version}) from ``old_root`` into ``new_root``.

    Returns (carried ['name==version'], skipped ['name: why']). A distribution the new venv already holds
    (the venv's own pip) or with any file already present there is skipped, as is one whose files do not
    match its RECORD: pip installs those from the wheelhouse.
    """
    old_site, new_site = site_packages(old_root), site_packages(new_root)
    carried, skipped = [], []
    if not old_site or not new_site:
        return carried, ["no single site-packages in %s" % (new_root if old_site else old_root)]
    present = {_dist_name_version(d)[0] for d in glob.glob(os.path.join(new_site, "*.dist-info"))}
    for dist_info in sorted(glob.glob(os.path.join(old_site, "*.dist-info"))):
        name, version = _dist_name_version(dist_info)
        if kept.get(name) != version:
            continue
        if name in present:
            skipped.append("%s: the new venv has its own" % name)
            continue
        planned, why = plan_distribution(old_root, old_site, dist_info)
        if planned is None:
            skipped.append("%s: %s" % (name, why))
            continue
        targets = [os.path.join(new_root, os.path.relpath(src, old_root)) for _row, src in planned]
        # a file two distributions share (nvidia/__init__.py of each nvidia-* wheel) is placed once
        if any(os.path.lexists(dst) and not _same_file(src, dst) for (_row, src), dst in zip(planned, targets)):
            skipped.append("%s: a file of it is in the new venv already" % name)
            continue
        record_path = os.path.join(dist_info, "RECORD")
        rows, record_changed = [], False
        for (row, src), dst in zip(planned, targets):
            if src == record_path or os.path.lexists(dst):
                rows.append(row)
                continue
            changed = _place(src, dst, old_root, new_root)
            if changed:
                row = [row[0], changed[0], changed[1]]
                record_changed = True
            rows.append(row)
        new_record = os.path.join(new_root, os.path.relpath(record_path, old_root))
        os.makedirs(os.path.dirname(new_record), exist_ok=True)
        if record_changed:
            text = io.StringIO()
            csv.writer(text, lineterminator="\n").writerows(rows)
            with open(new_record, "w", encoding="utf-8") as handle:
                handle.write(text.getvalue())
        else:
            _place(record_path, new_record, old_root, new_root)
        carried.append("%s==%s" % (name, version))
    return carried, skipped


def _read_lock(path):
    try:
        with open(path) as handle:
            return reqs.read_lock(handle.read())[1]
    except OSError:
        return None


def why_not(venv, release, lock):
    """Why the release cannot be seeded from the active one (None: it can), and the active release."""
    if not os.path.islink(venv) or not os.path.isdir(venv):
        return "%s is not a release made by this role" % venv, None
    active = os.path.realpath(venv)
    if active == os.path.realpath(release):
        return "the release is the active one", None
    if not os.path.isfile(os.path.join(active, LOCK_NAME)):
        return "the active release %s has no recorded lock" % active, None
    if not os.path.isfile(lock):
        return "no lock %s for the new release" % lock, None
    if _pyvenv(active) != _pyvenv(release) or _pyvenv(active) is None:
        return "the active release was made by another interpreter", None
    return None, active


def run_module(module):
    p = module.params
    release = os.path.realpath(p["release"])
    why, active = why_not(p["venv"], release, p["lock"])
    if why:
        module.exit_json(changed=False, carried=[], skipped=[], reason=why)
    old_entries, new_entries = _read_lock(os.path.join(active, LOCK_NAME)), _read_lock(p["lock"])
    kept = kept_packages(old_entries or [], new_entries or [])
    if module.check_mode:
        module.exit_json(changed=bool(kept), carried=sorted("%s==%s" % kv for kv in kept.items()), skipped=[],
                         reason=None, source=active)
    carried, skipped = seed(active, release, kept)
    module.exit_json(changed=bool(carried), carried=carried, skipped=skipped, reason=None, source=active)
