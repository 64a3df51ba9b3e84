"""The ranks' output streamed to the controller while the job runs (train_stream_ranks): _node.watchlib.stream_lines
and stream_pending on a recorded job directory (tests/fixtures/torchrun/stream/fail_rank1), replayed as if the ranks
were still writing; the long poll that returns when a streamed rank printed (_torchrun.wait.follow_until); the
option (_torchrun.follow.stream_ranks); the Slurm launcher's view of the same logs on shared storage."""
from __future__ import annotations

import glob
import os
import shutil

import pytest

from ansible_collections.multinode.training.plugins.module_utils._launch import slurm_job
from ansible_collections.multinode.training.plugins.module_utils._node import watchlib
from ansible_collections.multinode.training.plugins.module_utils._torchrun import follow as fol
from ansible_collections.multinode.training.plugins.module_utils._torchrun import wait as wait_mod
from tests.unit.conftest import FIXTURES

RECORDED = FIXTURES / "torchrun" / "stream" / "fail_rank1"


def recorded(tmp_path, name="job"):
    target = tmp_path / name
    shutil.copytree(str(RECORDED), str(target))
    return str(target)


def log(job_dir, local, stream):
    return glob.glob(os.path.join(job_dir, "ranks", "*", "attempt_0", str(local), stream + ".log"))[0]


def lines_of(path):
    with open(path, "rb") as handle:
        return handle.read().decode().splitlines()


def test_the_chosen_rank_s_stdout_then_its_stderr_and_where_each_ended(tmp_path):
    job_dir = recorded(tmp_path)
    lines, offsets = watchlib.stream_lines(job_dir, frozenset([0]), {})
    assert lines == [[0, line] for line in lines_of(log(job_dir, 0, "stdout")) + lines_of(log(job_dir, 0, "stderr"))]
    assert lines[0] == [0, "smoke: rank=0 world_size=2 allreduce_sum=1 expected=1 host=vm"]
    assert offsets == {"0/0/stdout": os.path.getsize(log(job_dir, 0, "stdout")),
                       "0/0/stderr": os.path.getsize(log(job_dir, 0, "stderr"))}
    # nothing new since
    assert watchlib.stream_lines(job_dir, frozenset([0]), offsets) == ([], offsets)
    assert not watchlib.stream_pending(job_dir, frozenset([0]), offsets)


def test_all_ranks_bring_the_failing_rank_s_traceback(tmp_path):
    job_dir = recorded(tmp_path)
    lines, offsets = watchlib.stream_lines(job_dir, "all", {})
    assert sorted(offsets) == ["0/0/stderr", "0/0/stdout", "0/1/stderr", "0/1/stdout"]
    assert lines[-1] == [1, "[rank1]: RuntimeError: injected failure on rank 1 at step 2"]
    assert [rank for rank, _text in lines] == [0] * 6 + [1] * 34
    # rank 1 only: the same lines of rank 1
    assert watchlib.stream_lines(job_dir, frozenset([1]), {})[0] == lines[6:]


@pytest.mark.parametrize("chunk", [5, 64, 4096])
def test_replayed_as_written_every_line_arrives_once_whole_and_in_order(tmp_path, chunk):
    """The recorded logs written again in pieces of ``chunk`` bytes (a line cut anywhere), a poll after each
    piece: the lines sent over all polls are the file's lines, none cut, none twice; the last one, without
    its newline, only when the job ended (final)."""
    job_dir = recorded(tmp_path)
    path = log(job_dir, 1, "stderr")
    with open(path, "rb") as handle:
        data = handle.read()[:-1]  # the last line still being written: no newline yet
    open(path, "wb").close()
    sent, offsets = [], {}
    for start in range(0, len(data), chunk):
        with open(path, "ab") as handle:
            handle.write(data[start:start + chunk])
        assert watchlib.stream_pending(job_dir, frozenset([1]), offsets) or offsets.get("0/1/stderr", 0) > 0
        lines, offsets = watchlib.stream_lines(job_dir, frozenset([1]), offsets)
        sent.extend(text for rank, text in lines if rank == 1)
    stdout_lines = lines_of(log(job_dir, 1, "stdout"))
    expected = data.decode().splitlines()
    assert sent == stdout_lines + expected[:-1]
    lines, offsets = watchlib.stream_lines(job_dir, frozenset([1]), offsets, final=True)
    assert lines == [[1, expected[-1]]] and offsets["0/1/stderr"] == len(data)


def test_an_attach_starts_at_the_last_lines(tmp_path):
    job_dir = recorded(tmp_path)
    lines, offsets = watchlib.stream_lines(job_dir, frozenset([1]), {}, tail=3)
    stdout, stderr = lines_of(log(job_dir, 1, "stdout")), lines_of(log(job_dir, 1, "stderr"))
    assert [text for _rank, text in lines] == stdout[-3:] + stderr[-3:]
    assert offsets["0/1/stderr"] == os.path.getsize(log(job_dir, 1, "stderr"))


def test_a_line_is_shown_as_a_terminal_shows_it_and_a_long_one_is_cut(tmp_path):
    job_dir = recorded(tmp_path)
    path = log(job_dir, 0, "stdout")
    size = os.path.getsize(path)
    with open(path, "ab") as handle:
        handle.write(b"epoch 1:  10%\repoch 1:  50%\repoch 1: 100%\r\n" + b"x" * 3000 + b"\n")
    lines, _offsets = watchlib.stream_lines(job_dir, frozenset([0]), {"0/0/stdout": size, "0/0/stderr": 10 ** 6})
    assert lines[0] == [0, "epoch 1: 100%"]
    assert lines[1][1] == "x" * watchlib.STREAM_LINE + " [...]"


def test_a_rank_without_a_start_record_or_a_link_for_a_log_sends_nothing(tmp_path):
    job_dir = recorded(tmp_path)
    os.remove(os.path.join(job_dir, "exits", "0_1.start"))
    assert watchlib.stream_lines(job_dir, "all", {})[1].keys() == {"0/0/stdout", "0/0/stderr"}
    secret = tmp_path / "secret"
    secret.write_text("root's own\n")
    path = log(job_dir, 0, "stdout")
    os.remove(path)
    os.symlink(str(secret), path)
    lines, offsets = watchlib.stream_lines(job_dir, frozenset([0]), {})
    assert all("root's own" not in text for _rank, text in lines) and offsets["0/0/stdout"] == 0
    assert not watchlib.stream_pending(job_dir, frozenset([0]), {"0/0/stderr": 10 ** 6})


def test_pieces_of_a_fast_rank_come_poll_after_poll(tmp_path):
    job_dir = recorded(tmp_path)
    path = log(job_dir, 1, "stderr")
    whole = lines_of(path)
    sent, offsets = [], {"0/1/stdout": 10 ** 6}
    while True:
        lines, offsets = watchlib.stream_lines(job_dir, frozenset([1]), offsets, size=300)
        if not lines:
            break
        sent.extend(text for _rank, text in lines)
    assert sent == whole


@pytest.mark.parametrize("values, expected", [
    ([], None), (["0"], frozenset([0])), (["0", " 8"], frozenset([0, 8])), (["all"], "all"), (["0", "all"], "all"),
])
def test_the_stream_ranks_option(values, expected):
    assert fol.stream_ranks(values) == expected


def test_a_bad_stream_ranks_item_is_named():
    with pytest.raises(ValueError, match=r"stream_ranks=\['0', '-1'\]: '-1' is not a global rank; valid: a list of "
                                         r"global ranks \(integers >= 0\), or all"):
        fol.stream_ranks(["0", "-1"])


class Clock(object):
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += max(seconds, 0.01)


@pytest.mark.parametrize("printed_at", [0.0, 2.5, None])
def test_the_long_poll_returns_a_second_after_a_streamed_rank_printed(monkeypatch, tmp_path, printed_at):
    """Back at the first liveness check (every second) after the output, never before BATCH s; at the end of
    the window when nothing was printed."""
    monkeypatch.setattr(wait_mod, "job_alive", lambda *args, **kwargs: True)
    clock = Clock()
    job = {"job_id": "j", "pid": 1, "start": clock.now}

    def news():
        return printed_at is not None and clock.now - 100.0 >= printed_at

    assert wait_mod.follow_until("j", str(tmp_path), job, 10, 0, 5, 30, clock=clock, sleep=clock.sleep,
                                 news=news) == (False, False, False)
    returned = clock.now - 100.0
    if printed_at is None:
        assert returned == pytest.approx(10.0, abs=0.15)
    else:
        assert max(wait_mod.BATCH, printed_at) <= returned <= max(wait_mod.BATCH, printed_at) + 1.5


def test_slurm_streams_every_node_s_directory_with_the_node_in_each_line(tmp_path):
    recorded(tmp_path / "job", "node1")
    recorded(tmp_path / "job", "node2")
    os.remove(os.path.join(str(tmp_path / "job" / "node2" / "exits"), "0_0.start"))
    job_dir = str(tmp_path / "job")
    ranks = frozenset([0, 1])
    assert slurm_job.stream_news(job_dir, ["node1", "node2", "node3"], ranks, {})
    lines, offsets = slurm_job.stream(job_dir, ["node1", "node2", "node3"], ranks, {})
    assert sorted({(node, rank) for node, rank, _text in lines}) == [("node1", 0), ("node1", 1), ("node2", 1)]
    assert "node1/0/0/stdout" in offsets and "node2/0/1/stderr" in offsets and "node2/0/0/stdout" not in offsets
    assert not slurm_job.stream_news(job_dir, ["node1", "node2"], ranks, offsets)
    assert slurm_job.stream(job_dir, ["node1", "node2"], ranks, offsets) == ([], offsets)
