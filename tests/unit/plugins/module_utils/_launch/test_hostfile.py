"""DeepSpeed / MPI hostfile parsing (plugins/module_utils/_launch/hostfile.py)."""
import pytest

from ansible_collections.multinode.training.plugins.module_utils._launch.hostfile import HostfileError, parse_hostfile

from tests.unit.conftest import FIXTURES

HOSTFILES = FIXTURES / "hostfile"


def _parse(name):
    path = HOSTFILES / name
    return parse_hostfile(path.read_text(), str(path))


def test_deepspeed_seed_hostfile():
    hosts = _parse("deepspeed_seed.hostfile")
    assert [(h["host"], h["slots"], h["line"]) for h in hosts] == [("huaweiyun1", 8, 2), ("huaweiyun2", 8, 3)]


def test_mpi_hostfile_comments_blank_lines_max_slots_bare_host():
    hosts = _parse("mpi.hostfile")
    assert [(h["host"], h["slots"], h["max_slots"]) for h in hosts] == [
        ("node-a.example.com", 4, 8), ("node-b", 2, None), ("10.0.0.7", None, None)]


def test_bad_lines_all_named_with_file_and_line():
    with pytest.raises(HostfileError) as err:
        _parse("bad.hostfile")
    msg = str(err.value)
    path = str(HOSTFILES / "bad.hostfile")
    assert "%s line 3: 'w2 slots=0': slots=0; valid: a positive integer" % path in msg
    assert "%s line 4: 'w1 slots=4': duplicate host w1 (first at line 2)" % path in msg
    assert "%s line 5: 'w3 gpus=2': unknown field 'gpus=2'" % path in msg
    assert "%s line 6: 'w4 slots=x': slots=x" % path in msg
    assert "%s line 7: 'slots=2': 'slots=2' is not a host name" % path in msg
    assert "line 2" not in msg.replace("first at line 2", "")


@pytest.mark.parametrize("text, needle", [
    ("", "no hosts"),
    ("# only a comment\n\n", "no hosts"),
    ("a slots=2 slots=3\n", "slots given twice"),
    ("a slots=4 max_slots=2\n", "max_slots=2 < slots=4"),
    ("a b\n", "unknown field 'b'"),
])
def test_more_bad_input(text, needle):
    with pytest.raises(HostfileError, match=needle):
        parse_hostfile(text, "hf")
