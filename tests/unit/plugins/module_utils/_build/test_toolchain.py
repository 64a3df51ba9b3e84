"""gcc selection: DeepSpeed's C++ standard from below, nvcc's host_config.h from above."""
import pytest

from ansible_collections.multinode.training.plugins.module_utils._build import toolchain as t
from tests.unit.conftest import FIXTURES


@pytest.mark.parametrize("ds, torch, expected", [
    ("0.19.8", "2.13.0+cpu", "c++20"),
    ("0.19.8", "2.12.0", "c++20"),
    ("0.19.8", "2.11.1", "c++17"),
    ("0.14.0", "2.3.0", "c++17"),
    ("0.9.0", "1.13.1", "c++14"),
    ("0.8.3", "1.12.0", "c++14"),
    ("master", None, "c++20"),  # unknown = newest, the safe lower bound
])
def test_cxx_standard(ds, torch, expected):
    assert t.cxx_standard(ds, torch) == expected


@pytest.mark.parametrize("name, expected", [("host_config-13.0.h", 15), ("host_config-12.4.h", 13)])
def test_nvcc_max_gcc_from_recorded_host_config(name, expected):
    text = (FIXTURES / "cuda" / name).read_text()
    assert t.nvcc_max_gcc_from_host_config(text) == expected
    # The recorded header wins over the table.
    assert t.nvcc_max_gcc("11.0", text) == expected


def test_nvcc_max_gcc_table_and_newer_release():
    assert t.nvcc_max_gcc("12.8") == 14
    assert t.nvcc_max_gcc("11.8") == 11
    assert t.nvcc_max_gcc("14.2") == t.NVCC_MAX_GCC["13.0"]
    assert t.nvcc_max_gcc("10.2") is None


def test_parse_nvcc_release():
    out = "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 13.0, V13.0.88\n"
    assert t.parse_nvcc_release(out) == "13.0"
    assert t.parse_nvcc_release("command not found") is None


def test_parse_available_needs_both_gcc_and_gxx():
    names = "gcc-11\ngcc-12\ngcc-12-base\ngcc-11-aarch64-linux-gnu\ng++-12\ng++-10\n"
    assert t.parse_available(names) == [12]


def test_auto_takes_newest_within_both_bounds():
    assert t.plan_gcc("auto", [9, 10, 11, 12, 13], "c++20", "12.4", 13) == 13
    assert t.plan_gcc("auto", [9, 10, 11, 12, 13], "c++20", "12.2", 12) == 12
    assert t.plan_gcc("auto", [9, 10], "c++20") == 10
    # no nvcc: no upper bound
    assert t.plan_gcc("auto", [11, 12, 14], "c++20") == 14


def test_auto_without_a_fitting_gcc_says_what_would():
    with pytest.raises(t.ToolchainError) as err:
        t.plan_gcc("auto", [7, 8, 9], "c++20", "12.4", 13, deepspeed_version="0.19.8")
    msg = str(err.value)
    assert "toolchain_gcc_version=auto" in msg
    assert "gcc >= 10" in msg and "gcc <= 13" in msg
    assert "7, 8, 9" in msg and "gcc 10..13" in msg


def test_classic_recipe_gcc7_refused_for_deepspeed_019():
    with pytest.raises(t.ToolchainError) as err:
        t.plan_gcc("7", [7, 11, 12], "c++20", "13.0", 15, deepspeed_version="0.19.8")
    msg = str(err.value)
    assert msg.startswith("toolchain_gcc_version=7 cannot work")
    assert "DeepSpeed 0.19.8 compiles its ops with -std=c++20" in msg
    assert "gcc 10..15" in msg and "(in this archive: 11, 12)" in msg


def test_gcc_newer_than_nvcc_accepts_is_refused():
    with pytest.raises(t.ToolchainError) as err:
        t.plan_gcc("14", [12, 13, 14], "c++20", "12.4", 13)
    assert "nvcc 12.4 accepts gcc <= 13" in str(err.value)


def test_explicit_version_honoured_when_it_works():
    assert t.plan_gcc("7", [7, 9], "c++17") == 7
    assert t.plan_gcc(11, [11, 12], "c++20", "13.0", 15) == 11


def test_explicit_version_missing_from_archive():
    with pytest.raises(t.ToolchainError) as err:
        t.plan_gcc("13", [11, 12], "c++20")
    assert "not in this host's package archive" in str(err.value)
    assert "versions that would work here: 11, 12" in str(err.value)
    # Ubuntu: the PPA is added next, so availability is not required yet.
    assert t.plan_gcc("13", [11, 12], "c++20", require_available=False) == 13


@pytest.mark.parametrize("bad", ["seven", "12.2", "", "1000"])
def test_garbage_version(bad):
    with pytest.raises(t.ToolchainError) as err:
        t.plan_gcc(bad, [12], "c++20")
    assert "toolchain_gcc_version" in str(err.value)


# ---------------------------------------------------------------- no-change probe: installed and selected


def test_parse_dpkg_status():
    out = "g++-12 install ok installed\ngcc-12 install ok installed\ngcc-13 deinstall ok config-files\nlibc6:amd64 install ok installed\n"
    assert t.parse_dpkg_status(out) == {"g++-12", "gcc-12", "libc6"}


def test_alternative_selected_on_recorded_query():
    text = (FIXTURES / "gcc" / "update-alternatives-query-gcc12.txt").read_text()
    parsed = t.parse_alternative(text)
    assert parsed["value"] == "/usr/bin/gcc-12"
    assert parsed["alternatives"]["/usr/bin/gcc-12"] == {"priority": 60, "slaves": {"g++": "/usr/bin/g++-12"}}
    assert t.alternative_selected(text, 12, 60)
    assert not t.alternative_selected(text, 12, 50)   # other priority: the role re-registers
    assert not t.alternative_selected(text, 13, 60)   # other version
    assert not t.alternative_selected("", 12, 60)     # no alternative yet


def test_parse_installed_needs_both_gcc_and_gxx():
    paths = ["/usr/bin/gcc-11", "/usr/bin/g++-11", "/usr/bin/gcc-12", "/usr/bin/gcc-ar-12", "/usr/bin/g++-10"]
    assert t.parse_installed(paths) == [11]


def test_keep_installed_prefers_the_default_then_the_newest_that_fits():
    # the default fits: kept even when a newer one is installed
    assert t.keep_installed([11, 12, 13], 12, 10) == 12
    # the default is above nvcc's limit: the newest installed below it
    assert t.keep_installed([10, 11, 12], 12, 10, 11) == 11
    # the default is below the C++ standard's floor
    assert t.keep_installed([9, 12], 9, 10) == 12
    # nothing installed fits, or no default gcc at all
    assert t.keep_installed([8, 9], 9, 10) is None
    assert t.keep_installed([11], None, 10) == 11
    # a default that no gcc-N names (a /usr/local gcc) is not called by name
    assert t.keep_installed([11], 12, 10) == 11


def test_auto_keeps_an_installed_gcc_when_the_default_stays():
    # the archive offers 13, but the default 12 fits and is kept
    assert t.plan_gcc("auto", [11, 12, 13], "c++20", installed=[12], default=12) == 12
    # the default 13 is above nvcc 12.2's limit: the installed 11
    assert t.plan_gcc("auto", [11, 12, 13], "c++20", "12.2", 12, installed=[11, 13], default=13) == 11
    # nothing installed fits: the newest fitting one on offer, to be installed
    assert t.plan_gcc("auto", [11, 12, 13], "c++20", "12.2", 12, installed=[13], default=13) == 12


def test_explicit_version_installed_but_not_on_offer():
    assert t.plan_gcc("11", [12], "c++20", installed=[11, 12], default=12) == 11
    with pytest.raises(t.ToolchainError, match="not in this host's package archive"):
        t.plan_gcc("11", [12], "c++20", installed=[12], default=12)
