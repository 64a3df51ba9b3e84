# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the preflight fabric check (see fabric_verdict.yml and fabric_schedule.yml)."""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.multinode.training.plugins.module_utils._fabric.schedule import rounds
from ansible_collections.multinode.training.plugins.module_utils._fabric.verdict import (
    LINE_RATIO,
    RATIO,
    FabricError,
    verdict,
)


def fabric_verdict(result, hosts, mode="warn", ratio=RATIO, min_gbps=None, nnodes="", line_ratio=LINE_RATIO):
    """The probe's result -> flagged nodes, the gate's action, keep/drop, the matrix lines."""
    try:
        return verdict(result, list(hosts), str(mode), ratio, min_gbps, nnodes, line_ratio)
    except FabricError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def fabric_schedule(count):
    """Node count -> rounds of disjoint [low, high] node indexes."""
    try:
        return [[list(pair) for pair in pairs] for pairs in rounds(int(count))]
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("fabric_schedule: %s" % exc) from exc


class FilterModule:
    """multinode.training fabric check filters."""

    def filters(self):
        return {"fabric_verdict": fabric_verdict, "fabric_schedule": fabric_schedule}
