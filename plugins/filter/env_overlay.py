# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter: the overlay through which the job uses an existing environment (see env_overlay.yml)."""
from __future__ import annotations

from ansible_collections.multinode.training.plugins.module_utils._wheel.overlay import overlay_path


def env_overlay(env):
    """An existing environment's prefix -> its overlay's path on the nodes (_wheel.overlay.overlay_path)."""
    return overlay_path(env)


class FilterModule:
    """multinode.training existing-environment filter."""

    def filters(self):
        return {"env_overlay": env_overlay}
