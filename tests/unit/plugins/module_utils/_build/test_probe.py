"""deepspeed_build (probe)'s steps (plugins/module_utils/_build/probe.py) on a stand-in module."""
import pytest

from ansible_collections.multinode.training.plugins.module_utils._build import probe
from tests.unit.plugins.module_utils.stand_in import Exit, StandInModule


def stand_in(**params):
    return StandInModule(probe.ARGUMENT_SPEC, **params)


def test_a_source_tree_from_an_earlier_step_is_used_as_given(tmp_path):
    tree = tmp_path / "DeepSpeed-0.19.8"
    tree.mkdir()
    (tree / "version.txt").write_text("0.19.8\n")
    module = stand_in(source_tree=str(tree), source_spec="deepspeed==0.19.8", source_sha256="ab" * 32,
                      version="0.19.8", workdir=str(tmp_path), torch_requirement="torch")
    result = {}
    source = probe.probe_source(module, "build1", result)
    assert result["source"] is source and "changed" not in result
    assert source["ready"] and source["tree"] == str(tree) and source["spec"] == "deepspeed==0.19.8"
    assert source["version"] == "0.19.8" and source["digest"]


def test_a_missing_local_source_is_refused_naming_host_and_variable(tmp_path):
    module = stand_in(source="local", local_path=str(tmp_path / "ds.tar.gz"), version="0.19.8",
                      workdir=str(tmp_path), torch_requirement="torch")
    with pytest.raises(Exit):
        probe.probe_source(module, "build1", {})
    assert module.result["msg"] == (
        'build1: deepspeed_build_local_path="%s": missing on the build host; valid: a DeepSpeed source '
        "tarball or directory there" % (tmp_path / "ds.tar.gz"))


class Bins(StandInModule):
    """A build host with these compilers on PATH."""

    def __init__(self, bins, **params):
        super().__init__(probe.ARGUMENT_SPEC, **params)
        self.bins = bins

    def get_bin_path(self, name, required=False):
        return self.bins.get(name)


@pytest.mark.parametrize("gcc, bins, cc, cxx, missing", [
    ("", {"gcc": "/usr/bin/gcc", "g++": "/usr/bin/g++"}, "gcc", "g++", None),
    ("11", {"gcc-11": "/usr/bin/gcc-11", "g++-11": "/usr/bin/g++-11"}, "gcc-11", "g++-11", None),
    # gcc-11 named, only the default gcc there: no compiler yet, not a plan for the default
    ("11", {"gcc": "/usr/bin/gcc", "g++": "/usr/bin/g++"}, "gcc-11", "g++-11", "gcc-11 or g++-11"),
    # the toolchain installed gcc-12 without making it the default, the role run on its own: named
    ("", {"gcc-12": "/usr/bin/gcc-12", "g++-12": "/usr/bin/g++-12"}, "gcc", "g++", "gcc or g++"),
    ("", {"gcc": "/usr/bin/gcc"}, "gcc", "g++", "g++"),
])
def test_the_plan_is_for_the_compilers_deepspeed_build_gcc_names(monkeypatch, tmp_path, gcc, bins, cc, cxx, missing):
    full = missing is None
    planned = []
    monkeypatch.setattr(probe._build_plan, "plan", lambda module, p: planned.append(p) or {"cc": p["cc"]})
    module = Bins(bins, gcc=gcc, version="0.19.8", workdir=str(tmp_path), torch_requirement="torch")
    result = {"torch": {"version": "2.13.0+cpu", "cuda": None}, "torch_reason": "",
              "torch_choice": {"requirement": "torch", "pip_args": []}}
    assert probe.probe_plan(module, {"ready": True, "tree": str(tmp_path), "version": "0.19.8"}, result) is full
    assert (planned[0]["cc"], planned[0]["cxx"]) == (cc, cxx)
    assert planned[0]["phase"] == ("full" if full else "inputs")
    assert result.get("reason") == (None if full else (
        "no %s on PATH (deepspeed_build_gcc=%s); install it (the toolchain role, as build_deepspeed.yml does) or set "
        "deepspeed_build_gcc to the major of an installed gcc-N" % (missing, gcc or "''")))
