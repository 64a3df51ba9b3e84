"""scripts/role_docs.py: every role README's variables table is meta/argument_specs.yml's, checked here.

The check runs the script as CI would (`--check`, exit status and message); a tmp copy of a role with a
variable added to its argument_specs proves the check fails naming the role and the variable.
"""
import importlib.util
import shutil
import subprocess
import sys

import yaml

from tests.unit.conftest import ROOT

SCRIPT = ROOT / "scripts" / "role_docs.py"
_SPEC = importlib.util.spec_from_file_location("role_docs", SCRIPT)
role_docs = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(role_docs)

ROLES = sorted(p.parent.parent.name for p in ROOT.glob("roles/*/meta/argument_specs.yml"))


def check(root):
    return subprocess.run([sys.executable, str(SCRIPT), "--check", "--root", str(root)],
                          capture_output=True, text=True, check=False)


def test_every_role_readme_is_up_to_date():
    assert ROLES == ["deepspeed_build", "nccl_tuning", "toolchain", "train", "wheel_distribute"]
    proc = check(ROOT)
    assert proc.returncode == 0, proc.stderr


def test_every_entry_point_and_variable_is_in_its_readme():
    for role in ROLES:
        readme = (ROOT / "roles" / role / "README.md").read_text()
        for entry, spec in yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"].items():
            assert "| `%s` |" % entry in readme, (role, entry)
            for var in spec.get("options") or {}:
                assert "| `%s` |" % var in readme, (role, var)


def copy_role(tmp_path, role):
    shutil.copytree(ROOT / "roles" / role / "meta", tmp_path / "roles" / role / "meta")
    shutil.copy(ROOT / "roles" / role / "README.md", tmp_path / "roles" / role / "README.md")
    return tmp_path / "roles" / role


def test_check_fails_naming_role_and_variable_a_readme_lacks(tmp_path):
    role = copy_role(tmp_path, "toolchain")
    assert check(tmp_path).returncode == 0
    specs_file = role / "meta" / "argument_specs.yml"
    specs = yaml.safe_load(specs_file.read_text())
    specs["argument_specs"]["main"]["options"]["toolchain_planted"] = {"type": "str", "default": "", "description": "planted"}
    specs_file.write_text(yaml.safe_dump(specs))
    proc = check(tmp_path)
    assert proc.returncode == 1
    assert "toolchain: toolchain_planted is in meta/argument_specs.yml but not in README.md" in proc.stderr
    # the rewrite brings it back in line, the prose around the block untouched
    before = (role / "README.md").read_text()
    assert role_docs.main(["--root", str(tmp_path)]) == 0
    after = (role / "README.md").read_text()
    assert "| `toolchain_planted` | str |" in after
    assert after.split(role_docs.BEGIN)[0] == before.split(role_docs.BEGIN)[0]
    assert check(tmp_path).returncode == 0


def test_check_names_a_changed_default_and_a_readme_without_markers(tmp_path):
    role = copy_role(tmp_path, "train")
    specs_file = role / "meta" / "argument_specs.yml"
    specs = yaml.safe_load(specs_file.read_text())
    specs["argument_specs"]["main"]["options"]["train_rdzv_port"]["default"] = 29500
    specs_file.write_text(yaml.safe_dump(specs))
    assert "train: train_rdzv_port differs from meta/argument_specs.yml" in check(tmp_path).stderr
    (role / "README.md").write_text("# no table\n")
    proc = check(tmp_path)
    assert proc.returncode == 1 and "train: README.md has no generated block" in proc.stderr


def test_cells_render_markup_choices_and_escape_pipes():
    option = {"type": "list", "elements": "str", "default": "{{ a | default([]) }}",
              "choices": ["x", "y"], "description": ["Use C(foo) or I(bar)", "| not a cell"]}
    assert role_docs.row("v", option) == (
        "| `v` | list of str | `{{ a \\| default([]) }}` | Use `foo` or *bar* \\| not a cell One of `x`, `y`. |")
    assert role_docs.default({"type": "str", "default": ""}) == '`""`'
    assert role_docs.default({"type": "str", "required": True}) == "required"
