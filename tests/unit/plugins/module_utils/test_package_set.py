"""Package set comparison across nodes (plugins/module_utils/_package_set.py)."""
from ansible_collections.multinode.training.plugins.module_utils._package_set import differences

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
