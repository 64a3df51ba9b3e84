"""Module wheel_distribute's lock step (plugins/module_utils/_wheel/lock.py), with pip replaced by
its recorded runs (tests/fixtures/requirements/: the report of a resolution adding accelerate, a conflict)."""
import shutil

import pytest

from ansible_collections.multinode.training.plugins.module_utils._wheel import lock

from tests.unit.conftest import FIXTURES
from tests.unit.plugins.module_utils.stand_in import Exit, StandInModule

REC = FIXTURES / "requirements"
DEEPSPEED = "deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl"


class FakeModule(StandInModule):
    def __init__(self, params, pip_rc=0, pip_out="", check_mode=False):
        super().__init__(lock.ARGUMENT_SPEC, check_mode=check_mode, **params)
        self.pip_rc, self.pip_out = pip_rc, pip_out
        self.commands = []

    def run_command(self, argv):
        self.commands.append(argv)
        if "--report" in argv:
            shutil.copy(REC / "ok.report.json", argv[argv.index("--report") + 1])
        return self.pip_rc, self.pip_out, ""

    def sha256(self, path):
        return "0" * 64


def params(tmp_path, requirements):
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    for name in (REC / "wheelhouse.txt").read_text().split():
        if name != DEEPSPEED:
            (wheelhouse / name).write_text("")
    (tmp_path / "dist").mkdir()
    (tmp_path / "dist" / DEEPSPEED).write_text("")
    return dict(requirements=requirements, wheelhouse=str(wheelhouse), deepspeed_wheel=str(tmp_path / "dist" / DEEPSPEED),
                wheel_sha256="ab" * 32, python_version="3.11", dest=str(tmp_path / "dest"),
                lock=str(tmp_path / "requirements.lock"), python="/venv/bin/python")


def run(module):
    with pytest.raises(Exit):
        lock.run_module(module)
    return module.result


def test_check_mode_resolves_against_the_pins_and_writes_nothing(tmp_path):
    module = FakeModule(params(tmp_path, ["accelerate"]), check_mode=True)
    result = run(module)
    assert not result.get("failed")
    assert result["changed"] is True and result["downloaded"] == []
    assert len(module.commands) == 1  # no download in check mode
    cmd = result["cmd"]
    assert cmd[:4] == ["/venv/bin/python", "-m", "pip", "install"] and "--dry-run" in cmd
    assert cmd[-3:] == [str(tmp_path / "dist" / DEEPSPEED), "torch==2.13.0+cpu", "accelerate"]
    by_name = {e["name"]: e for e in result["entries"]}
    assert by_name["accelerate"]["pinned"] is False and by_name["torch"]["pinned"] is True
    assert by_name["torch"]["filename"] == "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    assert not (tmp_path / "requirements.lock").exists() and result["lock_sha256"] == ""


def test_a_pip_conflict_is_refused_naming_package_and_pin(tmp_path):
    out = (REC / "conflict_torch.out").read_text()
    result = run(FakeModule(params(tmp_path, ["torch==2.3.0"]), pip_rc=1, pip_out=out))
    assert result["failed"] is True
    assert result["msg"].startswith("job requirements refused before any node was touched: ")
    assert "torch" in result["msg"]


def test_a_missing_requirements_file_is_refused_naming_the_variable(tmp_path):
    result = run(FakeModule(dict(params(tmp_path, []), requirements_file=str(tmp_path / "nope.txt"))))
    assert result["msg"] == ("wheel_distribute_requirements_file=%s: no such file on the controller; "
                             "valid: a readable requirements file" % (tmp_path / "nope.txt"))


def test_an_included_requirements_file_is_read_and_a_missing_one_refused(tmp_path):
    """``-r <path>`` in the list (train_requirements' former train_requirements_file): its lines join the
    resolution; a missing file is refused naming the item."""
    (tmp_path / "requirements.txt").write_text("# the job's\naccelerate\n")
    module = FakeModule(params(tmp_path, ["-r %s" % (tmp_path / "requirements.txt")]), check_mode=True)
    result = run(module)
    assert not result.get("failed") and result["cmd"][-1] == "accelerate"
    (tmp_path / "again").mkdir()
    base = params(tmp_path / "again", [])
    result = run(FakeModule(dict(base, requirements=["six", "-r %s" % (tmp_path / "nope.txt")])))
    assert result["msg"] == ('wheel_distribute_requirements[1]="-r %s": no such file on the controller; valid: '
                             "-r <path of a readable requirements file>" % (tmp_path / "nope.txt"))
    # the same package in the list and in the file: named at both places
    result = run(FakeModule(dict(base, requirements=["accelerate", "-r %s" % (tmp_path / "requirements.txt")])))
    assert result["msg"] == ("%s line 2: 'accelerate': accelerate is already required at wheel_distribute_requirements "
                             "line 1" % (tmp_path / "requirements.txt"))


def test_a_lock_is_reused_only_with_its_digest_and_every_wheel_present(tmp_path):
    dest, wheelhouse = tmp_path / "dest", tmp_path / "wheelhouse"
    dest.mkdir()
    wheelhouse.mkdir()
    entries = [{"name": "accelerate", "version": "1.15.0", "filename": "accelerate-1.15.0-py3-none-any.whl",
                "sha256": "0" * 64}]
    lock_path = tmp_path / "requirements.lock"
    lock_path.write_text(lock.reqs.lock_text(entries, "digest-1"))
    args = (str(lock_path), "digest-1", str(dest), str(wheelhouse), str(tmp_path))
    assert lock.reusable(lambda path: "0" * 64, *args) is None  # the wheel is nowhere
    (dest / entries[0]["filename"]).write_text("")
    assert [e["name"] for e in lock.reusable(lambda path: "0" * 64, *args)] == ["accelerate"]
    assert lock.reusable(lambda path: "1" * 64, *args) is None  # dest's copy is not the locked one
    assert lock.reusable(lambda path: "0" * 64, str(lock_path), "digest-2", *args[2:]) is None
