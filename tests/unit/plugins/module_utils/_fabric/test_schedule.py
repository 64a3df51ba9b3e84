"""The fabric check's pairing schedule: disjoint pairs, every pair once, N-1 rounds (N even) or N (N odd)."""
import itertools

import pytest

from ansible_collections.multinode.training.plugins.module_utils._fabric.schedule import peer, rounds


@pytest.mark.parametrize("count", range(0, 17))
def test_every_pair_once_in_disjoint_rounds(count):
    schedule = rounds(count)
    expected_rounds = 0 if count < 2 else (count - 1 if count % 2 == 0 else count)
    assert len(schedule) == expected_rounds
    seen = [pair for pairs in schedule for pair in pairs]
    assert sorted(seen) == list(itertools.combinations(range(count), 2))
    for pairs in schedule:
        nodes = [n for pair in pairs for n in pair]
        assert len(nodes) == len(set(nodes)), pairs  # no node twice in a round
        assert len(pairs) == count // 2


def test_odd_count_sits_out_each_node_once():
    schedule = rounds(5)
    idle = [set(range(5)) - {n for pair in pairs for n in pair} for pairs in schedule]
    assert sorted(n for s in idle for n in s) == [0, 1, 2, 3, 4]


def test_peer_and_leader():
    schedule = rounds(3)
    assert schedule == [[(1, 2)], [(0, 2)], [(0, 1)]]
    assert peer(schedule, 0, 0) == (None, False)
    assert peer(schedule, 1, 0) == (2, True)
    assert peer(schedule, 2, 0) == (1, False)


@pytest.mark.parametrize("bad", [-1, "3", 2.0, True, None])
def test_bad_count(bad):
    with pytest.raises(ValueError, match="count="):
        rounds(bad)
