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


NODES = {"n1": {"machine": "x86_64", "glibc": "2.36"}, "n2": {"machine": "x86_64", "glibc": "2.31"}}


def test_the_nodes_platform_goes_to_pip_and_into_the_digest(tmp_path):
    """--platform for the lowest glibc's every tag; the digest changes with it, and without nodes it stays
    what it was (a lock of the module without node facts is reused)."""
    module = FakeModule(dict(params(tmp_path, ["accelerate"]), nodes=NODES), check_mode=True)
    result = run(module)
    cmd = result["cmd"]
    platforms = [cmd[i + 1] for i, arg in enumerate(cmd) if arg == "--platform"]
    assert platforms == result["platform"] and platforms[0] == "manylinux_2_31_x86_64"
    assert platforms[-1] == "linux_x86_64" and "manylinux2014_x86_64" in platforms
    digest = lock.reqs.input_digest
    reqs = [{"text": "accelerate"}]
    assert digest(reqs, {}, "3.11", [], "ab", platforms) != digest(reqs, {}, "3.11", [], "ab")
    assert digest(reqs, {}, "3.11", [], "ab", []) == digest(reqs, {}, "3.11", [], "ab")
    assert digest(reqs, {}, "3.11", [], "ab", platforms) != digest(reqs, {}, "3.11", [], "ab", platforms[1:])


def test_nodes_of_two_archs_are_refused_before_pip_runs(tmp_path):
    nodes = dict(NODES, n3={"machine": "aarch64", "glibc": "2.36"})
    module = FakeModule(dict(params(tmp_path, ["accelerate"]), nodes=nodes))
    result = run(module)
    assert result["msg"].startswith("job requirements refused before any node was touched: wheel_distribute (the "
                                    "nodes' platform): nodes of 2 machine archs: aarch64 on n3; x86_64 on n1, n2")
    assert module.commands == []


class BuildingModule(FakeModule):
    """pip as recorded: the first resolution finds no wheel of mt-sdist-only, the -vv query finds its sdist,
    the controller's python is asked, pip wheel builds (or fails as recorded), the next resolution passes."""

    def __init__(self, params, host=None, wheel_out=None):
        super().__init__(params)
        self.host, self.wheel_out, self.resolutions = host or {}, wheel_out, 0
        report = lock.json.loads((REC / "ok.report.json").read_text())["install"]
        self.sha = {i["download_info"]["url"].rsplit("/", 1)[-1]: i["download_info"]["archive_info"]["hashes"]["sha256"]
                    for i in report}

    def sha256(self, path):
        return self.sha.get(lock.os.path.basename(path), "0" * 64)

    def run_command(self, argv, environ_update=None):
        self.commands.append(argv)
        if "-vv" in argv:
            return 1, "", (REC.parent / "sdist" / "query_mt-sdist-only.out").read_text()
        if "--report" in argv:
            self.resolutions += 1
            if self.resolutions == 1:
                return 1, "", (REC.parent / "sdist" / "resolve_sdist_only.out").read_text()
            shutil.copy(REC / "ok.report.json", argv[argv.index("--report") + 1])
            return 0, "", ""
        if argv[1] == "-c":
            host = dict({"version": "3.11.7", "platform": "linux_x86_64", "glibc": "2.31"}, **self.host)
            return 0, lock.json.dumps(host), ""
        if argv[1:4] == ["-m", "pip", "download"]:  # the added wheels, as the report names them
            out = argv[argv.index("-d") + 1]
            lock.os.makedirs(out)
            for item in lock.json.loads((REC / "ok.report.json").read_text())["install"]:
                open(lock.os.path.join(out, item["download_info"]["url"].rsplit("/", 1)[-1]), "w").close()
            return 0, "", ""
        if argv[1:4] == ["-m", "pip", "wheel"]:
            if self.wheel_out:
                return 1, "", (REC.parent / "sdist" / self.wheel_out).read_text()
            out = argv[argv.index("-w") + 1]
            lock.os.makedirs(out)
            (tmp := lock.os.path.join(out, "mt_sdist_only-1.0-cp311-cp311-linux_x86_64.whl")) and open(tmp, "w").close()
            return 0, "", ""
        return 0, "", ""


def test_an_sdist_only_requirement_is_built_once_checked_and_resolved_again(tmp_path):
    module = BuildingModule(dict(params(tmp_path, ["mt-sdist-only", "accelerate"]), nodes=NODES,
                                 build_dir=str(tmp_path / "build")))
    result = run(module)
    assert not result.get("failed"), result["msg"]
    assert result["built"] == ["mt_sdist_only-1.0-cp311-cp311-linux_x86_64.whl"] and module.resolutions == 2
    wheel = [c for c in module.commands if c[1:4] == ["-m", "pip", "wheel"]][0]
    assert wheel[-1] == "mt-sdist-only==1.0" and "--no-deps" in wheel and wheel[wheel.index("--no-binary") + 1] == \
        "mt-sdist-only"
    # the built folder is a find-links of the second resolution
    built = result["cmd"][result["cmd"].index("--find-links", result["cmd"].index("--find-links") + 3) + 1]
    assert built.startswith(str(tmp_path / "build")) and lock.os.listdir(built) == result["built"]


@pytest.mark.parametrize("host, wheel_out, says", [
    ({"glibc": "2.36"}, None, "the controller's glibc 2.36 is newer than glibc 2.31 of n2"),
    ({}, "build_no_compiler.out", "its compiler /nonexistent/gcc is missing on the controller"),
    ({}, "build_compile_error.out", "its build failed: ")])
def test_an_sdist_that_cannot_be_built_here_is_refused_naming_it_and_why(tmp_path, host, wheel_out, says):
    module = BuildingModule(dict(params(tmp_path, ["mt-sdist-only"]), nodes=NODES, build_dir=str(tmp_path / "b")),
                            host=host, wheel_out=wheel_out)
    result = run(module)
    assert result["msg"].startswith(
        'job requirements refused before any node was touched: wheel_distribute_requirements[0]="mt-sdist-only": '
        "mt-sdist-only==1.0 has no wheel for the nodes (python 3.11, manylinux_2_31_x86_64) and its sdist cannot be "
        "built on the controller: "), result["msg"]
    assert says in result["msg"] and "; valid: " in result["msg"]


def test_check_mode_says_what_it_would_build_and_builds_nothing(tmp_path):
    module = BuildingModule(dict(params(tmp_path, ["mt-sdist-only"]), nodes=NODES, build_dir=str(tmp_path / "b")))
    module.check_mode = True
    result = run(module)
    assert not result.get("failed") and result["changed"] is True
    assert result["would_build"] == ["mt-sdist-only==1.0"] and result["built"] == []
    assert not [c for c in module.commands if c[1:4] == ["-m", "pip", "wheel"]]
    assert not (tmp_path / "b").exists() and not (tmp_path / "requirements.lock").exists()


def test_a_pinned_package_without_a_wheel_for_the_nodes_is_never_built(tmp_path):
    """torch's wheelhouse wheel needs a newer glibc than the nodes have: pip's failure stands, nothing is
    asked or built (the pins come from the wheelhouse as built)."""
    out = ("ERROR: Could not find a version that satisfies the requirement torch==2.13.0+cpu (from versions: none)\n"
           "ERROR: No matching distribution found for torch==2.13.0+cpu\n")
    module = FakeModule(dict(params(tmp_path, ["accelerate"]), nodes=NODES), pip_rc=1, pip_out=out)
    result = run(module)
    assert result["msg"].startswith("job requirements refused before any node was touched: torch: the index has no "
                                    "wheel of torch==2.13.0+cpu"), result["msg"]
    assert len(module.commands) == 1 and "-vv" not in module.commands[0]
