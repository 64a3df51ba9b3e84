# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter: the controller's train_code_src as paths, sha256 and modes (see code_manifest.yml)."""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.multinode.training.plugins.module_utils._train.preflight import CodeError, code_manifest as _manifest


def code_manifest(src):
    """train_code_src -> {relative path: {sha256, mode}}."""
    try:
        return _manifest(src)
    except (CodeError, OSError) as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule:
    """multinode.training code manifest filter."""

    def filters(self):
        return {"code_manifest": code_manifest}
