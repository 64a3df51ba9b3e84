"""Filters fabric_verdict and fabric_schedule: what the tasks call, errors as AnsibleFilterError."""
import json

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.multinode.training.plugins.filter.fabric_verdict import FilterModule

from ...conftest import FIXTURES

FILTERS = FilterModule().filters()


def test_verdict_through_the_filter():
    result = json.loads((FIXTURES / "fabric" / "delay1.json").read_text())
    out = FILTERS["fabric_verdict"](result, ("node1", "node2", "node3"), "gate", "0.5", "", "2:3")
    assert (out["action"], out["drop"]) == ("drop", ["node1"])


def test_schedule_is_json_lists():
    assert FILTERS["fabric_schedule"]("4") == [[[0, 3], [1, 2]], [[0, 2], [1, 3]], [[0, 1], [2, 3]]]


@pytest.mark.parametrize("call", [
    lambda: FILTERS["fabric_verdict"]({"nodes": []}, [], "loud"),
    lambda: FILTERS["fabric_verdict"]({"nodes": []}, [], "warn", 2),
    lambda: FILTERS["fabric_schedule"]("many"),
])
def test_errors(call):
    with pytest.raises(AnsibleFilterError):
        call()
