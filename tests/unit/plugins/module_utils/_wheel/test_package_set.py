"""Package set comparison across nodes and against the job requirements' lock (plugins/module_utils/_node/preflight.py,
_wheel/requirements.py's lock_problems)."""
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.multinode.training.plugins.filter.package_set_diff import package_lock_problems
from ansible_collections.multinode.training.plugins.module_utils._node.preflight import differences, lock_differences
from ansible_collections.multinode.training.plugins.module_utils._wheel.requirements import lock_problems, unmet_requirements

BASE = ["torch==2.13.0+cpu", "deepspeed==0.19.8", "accelerate==1.15.0", "tabulate==0.9.0"]


def test_same_sets_no_difference():
    assert differences({"n1": BASE, "n2": list(reversed(BASE))}) == []


def test_hand_installed_package_names_node_and_package():
    assert differences({"n1": BASE, "n2": BASE + ["six==1.17.0"]}) == [
        "six: six==1.17.0 on n2; not installed on n1"]


def test_other_version_on_one_of_three_nodes_comes_first():
    other = [s if not s.startswith("tabulate") else "tabulate==0.8.10" for s in BASE]
    assert differences({"n1": BASE, "n2": other, "n3": BASE}) == [
        "tabulate: tabulate==0.8.10 on n2; tabulate==0.9.0 on n1, n3"]


def test_names_compared_canonically():
    assert differences({"n1": ["Typing_Extensions==4.16.0"], "n2": ["typing-extensions==4.16.0"]}) == []


# ------------------------------------------------ a node against the job requirements' lock

def test_lock_differences_missing_other_version_extra():
    lock = BASE + ["six==1.17.0"]
    installed = ["torch==2.13.0+cpu", "DeepSpeed==0.19.8", "accelerate==1.14.0", "tabulate==0.9.0",
                 "pip==24.0", "setuptools==66.1.1", "wheel==0.45.0", "rich==14.0.0"]
    assert lock_differences(installed, lock) == [
        "accelerate: the lock has 1.15.0, installed 1.14.0",
        "rich==14.0.0 installed, not in the lock",
        "six: the lock has 1.17.0, not installed",
        "wheel==0.45.0 installed, not in the lock",  # a venv of Python 3.11 is seeded with pip and setuptools only
    ]
    assert lock_differences(BASE + ["pip==24.0"], BASE) == []
    # a seed package the lock pins is compared like any other
    assert lock_differences(BASE + ["pip==24.0"], BASE + ["pip==25.0"]) == ["pip: the lock has 25.0, installed 24.0"]


def test_unmet_requirements_names_missing_and_outside_the_specifier():
    assert unmet_requirements(BASE, ["accelerate>=1.0", "tabulate==0.9.0", "Tabulate  # comment", "",
                                     "# a comment", "-r other.txt"]) == []
    assert unmet_requirements(BASE, ["six", "tabulate==0.8.10", "accelerate<1", 'rich; python_version < "3"']) == [
        "six: not installed", "tabulate==0.8.10: installed 0.9.0", "accelerate<1: installed 1.15.0"]


def test_lock_problems_name_node_venv_and_package():
    lock = BASE + ["six==1.17.0"]
    assert lock_problems({"n1": lock, "n2": BASE}, "/v", lock) == [
        "n2: the venv /v does not hold the job requirements' lock: six: the lock has 1.17.0, not installed; "
        "valid: the venv that multinode.training.wheel_distribute installs from train_requirements "
        "(run with tag prepare)"]
    # no lock in this run (the prepare tag skipped): the requirements themselves
    assert lock_problems({"n1": BASE, "n2": BASE}, "/v", [], ["six==1.17.0"])[1].startswith(
        "n2: the venv /v does not hold the job requirements: six==1.17.0: not installed;")
    assert lock_problems({"n1": BASE}, "/v", [], []) == []


def test_filter_reads_the_probes():
    probes = {"n1": {"environment": {"packages": BASE}}, "n2": {"environment": None}, "n3": None}
    assert package_lock_problems(probes, "/v", None, ["tabulate==0.8.10"]) == [
        "n1: the venv /v does not hold the job requirements: tabulate==0.8.10: installed 0.9.0; valid: the venv "
        "that multinode.training.wheel_distribute installs from train_requirements "
        "(run with tag prepare)"]


def test_filter_reads_the_files_the_requirements_include(tmp_path, monkeypatch):
    """train_requirements' ``-r <path>`` items (no lock in this run): the file's lines, read on the controller."""
    (tmp_path / "requirements.txt").write_text("# the job's\ntabulate==0.8.10  # pinned\n\nsix\n")
    monkeypatch.chdir(tmp_path)
    probes = {"n1": {"environment": {"packages": BASE}}}
    problems = package_lock_problems(probes, "/v", [], ["accelerate>=1.0", "-r requirements.txt"])
    assert len(problems) == 1
    assert "job requirements: tabulate==0.8.10: installed 0.9.0 | six: not installed; valid:" in problems[0]
    with pytest.raises(AnsibleFilterError, match="requirements: -r missing.txt: cannot be read on the controller"):
        package_lock_problems(probes, "/v", [], ["-r missing.txt"])
