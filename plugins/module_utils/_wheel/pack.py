# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Role wheel_distribute's copy in one transfer: the files a node lacks, as one tar on the controller.

Copying the wheelhouse file by file costs a module round trip per file and node (25 files: 292 s per
3-node cluster in a loaded CI run, against 162 s for the pip install itself); one archive is one
transfer and one unpack per node. The archive's name is a digest of the set it holds (names and sha256),
so nodes that lack the same files share one archive, built once under a lock while the others wait for
it. Entries are ``dist/<name>`` and ``wheelhouse/<name>``, root-owned, mode 0644; wheels are already
compressed, so the tar is not. Nothing is hashed again here: the copy is checked on the node against
the sha256 of step source afterwards, which also catches a file changed on the controller meanwhile.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import tarfile

ARGUMENT_SPEC = dict(
    files=dict(type="dict", required=True),
    send=dict(type="list", elements="str", required=True),
    dir=dict(type="path", required=True),
)


class PackError(ValueError):
    """The archive cannot be made; str() names the file and why."""


def archive_name(files, send):
    """The archive's file name for the set ``send`` (names of ``files``): the same set, the same name."""
    digest = hashlib.sha256()
    for name in sorted(set(send)):
        digest.update(("%s %s\n" % (name, files[name]["sha256"])).encode())
    return "send-%s.tar" % digest.hexdigest()[:20]


def _root_owned(info):
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mode = 0o644
    return info


def pack(files, send, directory):
    """Path of the tar holding ``send`` (keys of ``files``, each {src, sha256, ...}) and whether it
    was written now (False: another node's call had made it). Raises PackError."""
    unknown = sorted(set(send) - set(files))
    if unknown:
        raise PackError("not among the files to distribute: %s" % ", ".join(unknown))
    os.makedirs(directory, mode=0o700, exist_ok=True)
    path = os.path.join(directory, archive_name(files, send))
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(path):
            return path, False
        partial = "%s.%d.partial" % (path, os.getpid())
        try:
            with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as tar:
                for name in sorted(set(send)):
                    src = files[name]["src"]
                    try:
                        tar.add(src, arcname=name, recursive=False, filter=_root_owned)
                    except OSError as exc:
                        raise PackError("%s: cannot be read on the controller: %s" % (src, exc.strerror or exc))
            os.replace(partial, path)
        finally:
            if os.path.exists(partial):
                os.unlink(partial)
    return path, True


def run_module(module):
    p = module.params
    try:
        path, made = pack(p["files"], p["send"], p["dir"])
    except (PackError, OSError) as exc:
        module.fail_json(msg="wheel_distribute pack: %s" % exc)
    module.exit_json(changed=False, archive=path, made=made, bytes=os.path.getsize(path),
                     count=len(set(p["send"])))
