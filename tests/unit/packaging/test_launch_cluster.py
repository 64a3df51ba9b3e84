"""The launch cluster's verify steps, split over two molecule scenarios (molecule/README.md).

`default` and `launch_diagnosis` each create and prepare the same 3-node cluster (the
playbooks of molecule/default, the same group_vars) and run half of the steps, so that
scripts/run_molecule.sh's two streams each carry about half of the work. Checked here:
launch_diagnosis prepares its nodes as default does, every step file is imported by its
scenario's verify.yml (none dropped, none in both), no step names a container (node names
come from the inventory), and every scenario has a weight in run_molecule.sh.
"""
import re

import yaml

from tests.unit.conftest import ROOT

MOLECULE = ROOT / "molecule"
CLUSTER = ("default", "launch_diagnosis")


def _config(scenario):
    return yaml.safe_load((MOLECULE / scenario / "molecule.yml").read_text())


def test_launch_diagnosis_is_prepared_as_default_is():
    default, diagnosis = _config("default")["provisioner"], _config("launch_diagnosis")["provisioner"]
    for step, playbook in diagnosis["playbooks"].items():
        assert (MOLECULE / "launch_diagnosis" / playbook).resolve() == (MOLECULE / "default" / default["playbooks"][step])
    assert diagnosis["playbooks"].keys() == default["playbooks"].keys()
    assert diagnosis["inventory"] == default["inventory"]


def test_every_verify_step_is_imported_by_its_scenario_once():
    imported = {}
    for scenario in CLUSTER:
        plays = yaml.safe_load((MOLECULE / scenario / "verify.yml").read_text())
        steps = [play["ansible.builtin.import_playbook"] for play in plays]
        files = sorted("verify/" + path.name for path in (MOLECULE / scenario / "verify").glob("*.yml"))
        assert sorted(steps) == files, scenario
        imported[scenario] = {step.split("/")[-1] for step in steps}
    assert not imported["default"] & imported["launch_diagnosis"]


def test_no_verify_step_names_a_container():
    for scenario in CLUSTER:
        for path in (MOLECULE / scenario / "verify").rglob("*.yml"):
            assert not re.search(r"\b(%s)-node" % "|".join(CLUSTER), path.read_text()), path


def test_every_scenario_has_a_weight_in_run_molecule():
    weights = (ROOT / "scripts" / "run_molecule.sh").read_text().split("weight() {")[1].split("\n}")[0]
    named = set(re.findall(r"([a-z_]+)\)", weights.replace(" | ", ") ")))
    assert {path.parent.name for path in MOLECULE.glob("*/molecule.yml")} <= named
