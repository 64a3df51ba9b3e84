# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fabric check's pairing: rounds of disjoint pairs that cover every pair of nodes once.

The circle method (a round-robin tournament): rank 0 stays, the others rotate one
place a round. N nodes take N-1 rounds of N/2 pairs when N is even, N rounds of
(N-1)/2 pairs when N is odd (one node sits out each round, each node once), so every
link is measured once in about N rounds instead of N^2 one-pair runs, and no node
is in two measurements at the same time. Standard library only: under Slurm the
batch host runs it beside slurm_node.py (as ``_fabric_schedule.py``); the probe
(module_utils/_node/fabric_probe.py) gets the rounds as ``--schedule``.
"""
from __future__ import annotations

# Seconds each measurement of the probe runs, when the caller gives none: _train_fabric_seconds in
# roles/train/vars/main.yml and the probe's own --seconds (a file that imports nothing) mirror it.
SECONDS = 0.5
# The probe's shortest time limit: a node starved of CPU (a tenth of a core in the molecule fault, an
# overloaded node in a cluster) needs over a minute to import torch and must be measured, not timed out.
# roles/train/tasks/fabric.yml's limit mirrors it.
TIMEOUT_FLOOR = 240


def rounds(count):
    """``count`` nodes (ranks 0..count-1) -> a list of rounds, each a list of pairs ``(low, high)``."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError("count=%r: expected a node count, 0 or more" % (count,))
    if count < 2:
        return []
    ring = list(range(count)) + ([None] if count % 2 else [])
    size = len(ring)
    out = []
    for _round in range(size - 1):
        pairs = []
        for i in range(size // 2):
            a, b = ring[i], ring[size - 1 - i]
            if a is not None and b is not None:
                pairs.append((min(a, b), max(a, b)))
        out.append(sorted(pairs))
        ring = [ring[0], ring[-1]] + ring[1:-1]
    return out


def peer(schedule, rank, index):
    """The rank ``rank`` meets in round ``index`` (None: it sits out) and whether it leads (the lower rank)."""
    for low, high in schedule[index]:
        if rank == low:
            return high, True
        if rank == high:
            return low, False
    return None, False
