"""An sdist-only requirement built once on the controller (plugins/module_utils/_wheel/sdist.py), on pip's
recorded output (tests/fixtures/sdist/, made by its record.sh with real pip, setuptools, gcc and torch)."""
import pytest

from ansible_collections.multinode.training.plugins.module_utils._wheel import sdist

from tests.unit.conftest import FIXTURES

REC = FIXTURES / "sdist"
X86 = {"arch": "x86_64", "glibc": "2.31", "lowest": ["node2"], "tags": ["manylinux_2_31_x86_64"]}
HOST = {"version": "3.11.7", "platform": "linux_x86_64", "glibc": "2.31", "executable": "/usr/bin/python3.11"}


def read(name):
    return (REC / name).read_text()


def test_the_binary_only_resolution_names_the_requirement_without_a_wheel():
    assert sdist.missing_specs(read("resolve_sdist_only.out")) == ["mt-sdist-only"]
    assert sdist.missing_specs((FIXTURES / "requirements" / "missing_version.out").read_text()) == ["tabulate==99.0"]
    assert sdist.missing_specs((FIXTURES / "requirements" / "ok.out").read_text()) == []


def test_the_verbose_query_says_an_sdist_exists_only_for_the_project_asked():
    """pip -vv skips every sdist of a find-links folder "for" the project asked, whatever its name: only
    the file named after the project counts."""
    found = sdist.sdist_versions(read("query_mt-sdist-only.out"), "mt_sdist_only")
    assert [v for v, _url in found] == ["1.0"] and found[0][1].endswith("/links/mt-sdist-only-1.0.tar.gz")
    assert sdist.sdist_versions(read("query_no-such-package-xyz-42.out"), "no-such-package-xyz-42") == []


@pytest.mark.parametrize("spec, expected", [
    ("flash-attn", "2.8.3"), ("flash-attn<2.8", "2.7.4.post1"), ("flash-attn==2.7.4.post1", "2.7.4.post1"),
    ("flash-attn>3", None), ("flash-attn>=2.9.0a0", "2.9.0b1")])
def test_the_newest_version_the_spec_allows(spec, expected):
    versions = [(v, "u") for v in ("2.7.4.post1", "2.8.3", "2.9.0b1", "not-a-version")]
    assert sdist.pick_version(versions, spec) == expected


def test_the_controller_builds_for_nodes_of_its_python_arch_and_an_older_or_equal_glibc():
    assert sdist.build_host_problems(HOST, X86, "3.11") == []
    newer = dict(HOST, glibc="2.36", version="3.12.1", platform="linux_aarch64")
    assert sdist.build_host_problems(newer, X86, "3.11") == [
        "the controller's python 3.11 (/usr/bin/python3.11) is 3.12, the nodes' is 3.11",
        "the controller is aarch64, the nodes are x86_64",
        "the controller's glibc 2.36 is newer than glibc 2.31 of node2 (a wheel built here would need the newer one)"]
    assert sdist.build_host_problems({"executable": "python3.11", "error": "not found"}, X86, "3.11") == [
        "no python 3.11 on the controller to build it with (not found)"]


@pytest.mark.parametrize("fixture, reason", [
    ("build_compile_error.out", "its build failed: "),
    ("build_no_compiler.out", "its compiler /nonexistent/gcc is missing on the controller; valid: a C/C++ compiler"),
    ("build_torch_undeclared.out", "it imports torch to build and the wheelhouse pins no torch"),
    ("build_cuda_no_nvcc.out", "it compiles CUDA code and the controller has no nvcc")])
def test_why_a_build_failed(fixture, reason):
    said = sdist.build_failure(read(fixture))
    assert said.startswith(reason) and "; valid: " in said, said


def test_a_compile_error_keeps_the_compilers_words():
    said = sdist.build_failure(read("build_compile_error.out"))
    assert "ext.c:1:13: error: expected declaration specifiers" in said and "note: This error" not in said
    assert sdist.build_failure("error: command 'x86_64-linux-gnu-gcc' failed: No such file or directory").startswith(
        "its compiler x86_64-linux-gnu-gcc is missing")


def test_an_undeclared_torch_import_is_built_again_without_isolation_and_only_that():
    assert sdist.needs_torch(read("build_torch_undeclared.out"))
    assert not sdist.needs_torch(read("build_compile_error.out"))
    pinned = {"torch": "2.13.0+cpu", "setuptools": "84.2.1", "numpy": "2.4.6", "accelerate": "1.0"}
    assert sdist.build_env_requirements(pinned) == ["torch==2.13.0+cpu", "setuptools==84.2.1", "numpy==2.4.6"]
    assert sdist.build_constraints(pinned) == "torch==2.13.0+cpu\n" and sdist.build_constraints({}) == ""


def test_the_built_wheel_is_checked_on_every_node():
    nodes = {"n1": {"machine": "x86_64", "glibc": "2.36"}, "n2": {"machine": "aarch64", "glibc": "2.36"}}
    assert sdist.runs_on_nodes("mt_sdist_only-1.0-cp311-cp311-linux_x86_64.whl", nodes, "3.11") == [
        "n2: the built wheel mt_sdist_only-1.0-cp311-cp311-linux_x86_64.whl needs platform linux_x86_64, the node "
        "has python 3.11 on linux_aarch64 with glibc 2.36"]
    assert sdist.runs_on_nodes("x-1.0-cp312-cp312-linux_x86_64.whl", {"n1": nodes["n1"]}, "3.11") == [
        "n1: the built wheel x-1.0-cp312-cp312-linux_x86_64.whl needs python cp312, abi cp312, the node has python "
        "3.11 on linux_x86_64 with glibc 2.36"]


def test_where_names_the_variable_item_a_file_line_or_a_dependency():
    reqs = [{"source": "wheel_distribute_requirements", "line": 2, "text": "flash-attn==2.8.3", "name": "flash-attn"},
            {"source": "/job/requirements.txt", "line": 4, "text": "apex", "name": "apex"}]
    assert sdist.where("flash-attn==2.8.3", reqs) == 'wheel_distribute_requirements[1]="flash-attn==2.8.3"'
    assert sdist.where("apex", reqs) == 'wheel_distribute_requirements (-r /job/requirements.txt line 4)="apex"'
    assert sdist.where("einops>=0.8", reqs) == ("wheel_distribute_requirements: einops>=0.8 (a dependency of the "
                                                "job requirements)")


def test_the_build_key_changes_with_torch_python_and_platform():
    base = sdist.build_key("3.11", {"torch": "2.13.0"}, ["linux_x86_64"])
    assert base == sdist.build_key("3.11", {"torch": "2.13.0"}, ["linux_x86_64"])
    assert len({base, sdist.build_key("3.12", {"torch": "2.13.0"}, ["linux_x86_64"]),
                sdist.build_key("3.11", {"torch": "2.13.1"}, ["linux_x86_64"]),
                sdist.build_key("3.11", {"torch": "2.13.0"}, ["linux_aarch64"])}) == 4
