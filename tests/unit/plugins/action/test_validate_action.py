# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The validate action's list of facts the roles return: every set_fact with a role's prefix is in it
(else a playbook importing build_deepspeed then train would refuse the first one's results)."""
from __future__ import annotations

import pathlib

import yaml

from ansible_collections.multinode.training.plugins.action import validate

ROOT = pathlib.Path(__file__).resolve().parents[4]


def set_facts():
    found = set()
    for tasks in sorted(ROOT.glob("roles/*/tasks/*.yml")):
        prefix = tasks.parent.parent.name + "_"
        for task in yaml.safe_load(tasks.read_text()) or []:
            for block in [task] + list(task.get("block") or []) + list(task.get("always") or []):
                facts = block.get("ansible.builtin.set_fact") or {}
                found.update(name for name in facts if name.startswith(prefix))
    return found


def declared():
    names = set()
    for specs in ROOT.glob("roles/*/meta/argument_specs.yml"):
        for entry in yaml.safe_load(specs.read_text())["argument_specs"].values():
            names.update(entry.get("options") or {})
    return names


def test_every_fact_a_role_returns_is_known_to_the_unknown_variable_check():
    assert set_facts() - declared() - set(validate.RETURNED) == set()
    assert "wheel_distribute_lock" in set_facts()  # the scan reads the roles' tasks
