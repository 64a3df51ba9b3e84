# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The overlay through which the job uses an existing environment (wheel_distribute_venv_existing).

Nothing is installed into the user's environment (a venv, a conda env, an NGC container's /usr): the
DeepSpeed wheel and the dependencies the environment lacks go into an overlay on the node's own disk,
a venv made by the environment's python (``--without-pip``) whose site-packages holds a .pth that adds
every site directory of the environment after its own (``pth_text``). The overlay's python therefore
imports what the environment has (its torch) and, first, what the overlay adds (this DeepSpeed, even
where the environment has another); pip run by it installs into the overlay, sees the environment's
packages as installed, and never uninstalls one of them ("outside environment"). The environment
itself, maybe on shared storage, is never written: no concurrent installs from many nodes into one
directory, and the user's own DeepSpeed and other packages stay as they were.

Why a .pth and not ``--system-site-packages``: a venv made by a venv's python has the base interpreter
as its home, and ``--system-site-packages`` would add the base's site-packages, not the environment's
(tried: six 1.16.0 in a venv, an overlay from its python saw the base interpreter's six instead).
"""
from __future__ import annotations

import json
import posixpath
import re

OVERLAY_ROOT = "/opt/multinode-training/envs"
PTH_NAME = "_multinode_training_env.pth"


def overlay_path(env):
    """The overlay of environment ``env`` (its prefix): OVERLAY_ROOT/<the path, '/' as '-'>."""
    slug = re.sub(r"[^A-Za-z0-9._]+", "-", posixpath.normpath(str(env)).strip("/")).strip("-")
    return posixpath.join(OVERLAY_ROOT, slug or "root")


def pth_text(sites):
    """The .pth line that adds the environment's site directories (each one's own .pth files processed,
    as in the environment) after the overlay's."""
    # one line (site.py runs a .pth line that starts with "import"); no comprehension: site.py execs the
    # line in a function's namespace, which a comprehension's own scope cannot see (NameError: site)
    return "import site; list(map(site.addsitedir, %s))\n" % json.dumps([str(s) for s in sites])


def pth_sites(overlay_sites):
    """The environment's site directories, read back from the .pth in the overlay's site directories
    (``overlay_sites``); [] where there is none."""
    for where in overlay_sites:
        try:
            with open(posixpath.join(where, PTH_NAME)) as handle:
                text = handle.read()
        except (IOError, OSError):
            continue
        match = re.search(r"addsitedir, (\[.*\])\)\)", text)
        if match:
            try:
                return [str(p) for p in json.loads(match.group(1))]
            except ValueError:
                return []
    return []


def plan(overlay, python_version, sites):
    """What the install writes for the overlay: {path, pth (the .pth file's path), pth_text}; the overlay's
    site-packages is lib/pythonX.Y/site-packages as ``python -m venv`` makes it on Linux."""
    major_minor = ".".join(str(python_version or "").split(".")[:2])
    return {"path": overlay, "pth": posixpath.join(overlay, "lib", "python" + major_minor, "site-packages", PTH_NAME),
            "pth_text": pth_text(sites)}
