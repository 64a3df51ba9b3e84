"""Every action that polls a node bounds each call: a frozen node (the call blocks in its connection) fails the
wait naming it, after the poll's window and POLL_SLACK, instead of holding the play for ever (torchrun's own
bound: test_torchrun_action.py)."""
import time

from ansible_collections.multinode.training.plugins.action import data_sync, slurm_job
from tests.unit.conftest import StuckNode


def test_a_data_sync_call_without_an_answer_fails_within_its_bound(monkeypatch):
    monkeypatch.setattr(data_sync, "POLL_SLACK", 1)
    started = time.monotonic()
    out = data_sync.ActionModule._call(StuckNode(), {"state": "status"}, {})
    assert time.monotonic() - started < 5
    assert out == {"failed": True, "msg": "no answer within 1 s (frozen, or the module stuck on the node)"}


def test_a_data_sync_poll_is_bounded_by_its_window_and_the_slack(monkeypatch):
    monkeypatch.setattr(data_sync, "POLL_SLACK", 1)
    started = time.monotonic()
    out = data_sync.ActionModule._call(StuckNode(), {"poll": {"port": 1, "wait": 1.0}}, {}, 1.0)
    assert 1.5 < time.monotonic() - started < 6  # the window (1 s) and the slack (1 s)
    assert out["msg"] == "no answer within 2 s (frozen, or the module stuck on the node)"


def test_a_data_sync_transfer_takes_its_bound_from_poll_slack():
    """O(transfer.poll_slack): the action keeps it for every call of the transfer (start, polls, abort)."""
    module = data_sync.ActionModule.__new__(data_sync.ActionModule)
    module._execute_module = StuckNode()._execute_module
    module._play_context = type("PlayContext", (), {"check_mode": False})()
    started = time.monotonic()
    out = module._transfer({"node": "node2", "plan": {"pull": [[0, "a"]]}, "items": [], "bind": "10.0.0.2",
                            "port": 29402, "token": "t", "poll_slack": 1}, {}, {})
    assert time.monotonic() - started < 5
    assert out["failed"] and out["msg"] == ("node2: data: the transfer did not start: no answer within 1 s (frozen, "
                                            "or the module stuck on the node)")


def test_a_slurm_poll_takes_its_slack_from_poll_slack():
    started = time.monotonic()
    out = slurm_job.ActionModule._poll(StuckNode(), "multinode.training.slurm_job", {"wait": 1, "poll_slack": 1}, {},
                                       "submit1")
    assert 1.5 < time.monotonic() - started < 6
    assert out["msg"].startswith("the submit host submit1 did not answer a poll within 2 s")


def test_a_slurm_poll_without_an_answer_fails_after_its_window_and_the_slack(monkeypatch):
    monkeypatch.setattr(slurm_job, "POLL_SLACK", 1)
    started = time.monotonic()
    out = slurm_job.ActionModule._poll(StuckNode(), "multinode.training.slurm_job", {"wait": 1}, {}, "submit1")
    waited = time.monotonic() - started
    assert 1.5 < waited < 6  # the window (1 s) and the slack (1 s)
    assert out == {"failed": True, "msg": "the submit host submit1 did not answer a poll within 2 s (frozen, or "
                                          "the module stuck on it)"}
