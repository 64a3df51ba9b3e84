# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Module deepspeed_build's steps stage, dist_check and dist_commit: the build's staging
directory, and the fetch of its wheel into the controller's dist directory (check, then commit).
The work itself is _build/deepspeed.py's; plugins/modules/deepspeed_build.py documents each step and calls here."""
from __future__ import annotations

import inspect
import os

from ansible_collections.multinode.training.plugins.module_utils._build import deepspeed
from ansible_collections.multinode.training.plugins.module_utils._node import run_logged

STAGE_SPEC = dict(
    workdir=dict(type="path", required=True),
    source_tree=dict(type="path", required=True),
    venv=dict(type="path"),
)
DIST_CHECK_SPEC = dict(
    dist_dir=dict(type="path", required=True),
    manifest=dict(type="dict", required=True),
    manifest_sha256=dict(type="str", required=True),
    wheelhouse_stamp=dict(type="str"),
)
DIST_COMMIT_SPEC = dict(
    dist_dir=dict(type="path", required=True),
    names=dict(type="list", elements="str", required=True),
)


def run_stage(module):
    """deepspeed_build (stage): the build venv has torch and the tree a setup.py, then the staging dir."""
    p = module.params
    venv_python = os.path.join(p["venv"] or os.path.join(p["workdir"], "venv"), "bin", "python")
    torch = deepspeed.runtime_torch(venv_python)
    if torch is None:
        module.fail_json(msg="no torch in the build venv %s: its install step did not put one there"
                             % os.path.dirname(os.path.dirname(venv_python)))
    if not os.path.isfile(os.path.join(p["source_tree"], "setup.py")):
        module.fail_json(msg="source tree %s has no setup.py" % p["source_tree"])
    staging = os.path.join(p["workdir"], "staging")
    if not module.check_mode:
        deepspeed.stage(p["workdir"], p["source_tree"], inspect.getsource(run_logged))
    site_packages = torch.pop("site_packages")
    module.exit_json(changed=True, torch=torch, site_packages=site_packages, staging=staging,
                     helper=os.path.join(p["workdir"], "run_logged.py"))


def run_dist_check(module):
    """deepspeed_build (dist_check): which of the wheel, its manifest and the wheelhouse stamp need a fetch."""
    p = module.params
    need = deepspeed.dist_state(p["dist_dir"], p["manifest"], p["manifest_sha256"], p["wheelhouse_stamp"])
    module.exit_json(changed=False, fetch=need, current=not any(need.values()))


def run_dist_commit(module):
    """deepspeed_build (dist_commit): the fetched files moved into place (nothing in check mode)."""
    p = module.params
    if module.check_mode:
        module.exit_json(changed=True, moved=[])
    try:
        moved = deepspeed.commit_incoming(p["dist_dir"], p["names"])
    except (IOError, OSError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=True, moved=moved)
