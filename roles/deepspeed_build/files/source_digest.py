"""sha256 over a DeepSpeed source tree (paths and contents), ignoring build output.

The digest is part of the build key: the same tree, with the same torch, ops,
arch list and compiler, gives the same wheel, so a re-run can skip the build.
Usage: python source_digest.py <dir>
"""
import hashlib
import os
import sys

SKIP_DIRS = {".git", "build", "dist", "__pycache__"}
root = sys.argv[1]
digest = hashlib.sha256()
for base, dirs, files in os.walk(root):
    dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info"))
    for name in sorted(files):
        path = os.path.join(base, name)
        rel = os.path.relpath(path, root)
        # setup.py rewrites this file during every build.
        if rel == os.path.join("deepspeed", "git_version_info_installed.py") or name.endswith(".pyc"):
            continue
        digest.update(rel.encode() + b"\0")
        with open(path, "rb") as handle:
            digest.update(hashlib.sha256(handle.read()).digest())
print(digest.hexdigest())
