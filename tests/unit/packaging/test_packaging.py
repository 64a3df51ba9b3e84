"""Packaging consistency: one Ansible floor, every collection used is declared.

- meta/runtime.yml's requires_ansible is the only floor: every role's
  galaxy_info.min_ansible_version says the same version.
- Every collection named by an FQCN in the repository's files (roles, playbooks,
  plugins, molecule, benchmarks, tests, docs) is this collection, ansible.builtin,
  a dependency in galaxy.yml (what users get with the collection), or a test-only
  collection in tests/requirements.yml; and nothing is declared that is not used.
- `ansible-doc -l multinode.training` presents a module that only the roles call (a role's steps) as
  internal, its short description starting with INTERNAL, and no other module so (docs/design.md).
"""
import json
import os
import re
import subprocess
import sys

import pytest
import yaml

from tests.unit.conftest import ROOT

OWN = "multinode.training"
# Python packages of ansible-core that look like FQCNs (`from ansible.utils.display import Display`).
FQCN = re.compile(r"(?<![\w.])((?:community|ansible)\.[a-z_]+)\.[a-z_]+")
CORE_PACKAGES = {"ansible.builtin", "ansible.module_utils", "ansible.plugins", "ansible.utils", "ansible.errors",
                 "ansible.parsing", "ansible.executor", "ansible.playbook", "ansible.template", "ansible.inventory",
                 "ansible.vars", "ansible.cli", "ansible.config", "ansible.constants", "ansible.galaxy",
                 "ansible.release", "ansible.modules", "ansible.legacy", "ansible.cfg", "ansible.module"}
SCANNED = (".yml", ".yaml", ".py", ".sh", ".cfg", ".md", ".j2", ".ini")
# The declarations themselves and this test name collections without using them.
NOT_USES = ("galaxy.yml", "tests/requirements.yml", "tests/unit/packaging/", "changelogs/", "tests/fixtures/")
# How a module that only the roles call says so, first in its short description (prometheus.prometheus's
# marker for its internal role entry points), so that `ansible-doc -l` shows it.
INTERNAL = "Internal only - "
# The roles' steps that are no module of module_utils/_stepped.py: validate, each role's first step.
ROLE_STEPS = {"validate"}


def _yaml(path):
    return yaml.safe_load((ROOT / path).read_text())


def _floor(requires_ansible):
    match = re.fullmatch(r">=\s*(\d+)\.(\d+)(?:\.0)?", requires_ansible.strip())
    assert match, f"requires_ansible={requires_ansible!r}: expected a single floor such as '>=2.19.0'"
    return f"{match.group(1)}.{match.group(2)}"


def _declared():
    galaxy = set((_yaml("galaxy.yml").get("dependencies") or {}))
    tests = {c["name"] for c in (_yaml("tests/requirements.yml").get("collections") or [])}
    return galaxy, tests


def _used():
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True, text=True).stdout
    used = {}
    for name in files.split("\0"):
        if not name.endswith(SCANNED) or name.startswith(NOT_USES):
            continue
        path = ROOT / name
        if not path.is_file():
            continue
        for line in path.read_text(errors="replace").splitlines():
            if re.match(r"\s*(from|import)\s+ansible", line):
                continue
            for collection in FQCN.findall(line):
                if collection not in CORE_PACKAGES:
                    used.setdefault(collection, name)
    return used


def test_one_ansible_floor_in_runtime_and_every_role():
    floor = _floor(_yaml("meta/runtime.yml")["requires_ansible"])
    roles = sorted(p.parent.parent.name for p in (ROOT / "roles").glob("*/meta/main.yml"))
    assert roles, "no role metadata found"
    found = {role: str(_yaml(f"roles/{role}/meta/main.yml")["galaxy_info"]["min_ansible_version"])
             for role in roles}
    assert found == {role: floor for role in roles}, f"requires_ansible floor {floor}; roles' min_ansible_version {found}"


@pytest.mark.parametrize("value, floor", [(">=2.19.0", "2.19"), (">=2.19", "2.19"), (">= 2.20.0", "2.20")])
def test_floor_parsing(value, floor):
    assert _floor(value) == floor


@pytest.mark.parametrize("value", [">=2.19.1", "<2.20", ">=2.19.0,<2.21", "2.19"])
def test_floor_refuses_what_a_role_version_cannot_say(value):
    with pytest.raises(AssertionError):
        _floor(value)


def test_fqcn_scan_sees_collections_not_core_imports():
    line = "from ansible.utils.display import Display  # community.docker.docker, ansible.posix.json"
    assert re.match(r"\s*(from|import)\s+ansible", line)
    assert FQCN.findall("connection: community.docker.docker; cb ansible.posix.json; x.community.y.z") == [
        "community.docker", "ansible.posix"]


def test_every_collection_used_is_declared_and_every_declared_one_used():
    galaxy, tests = _declared()
    used = _used()
    assert "community.general" in galaxy, "roles use community.general.alternatives"
    assert not galaxy & tests, f"declared twice: {sorted(galaxy & tests)}"
    undeclared = {c: f for c, f in used.items() if c not in galaxy | tests and c != OWN}
    assert not undeclared, f"collections used but not declared in galaxy.yml or tests/requirements.yml: {undeclared}"
    unused = sorted((galaxy | tests) - set(used))
    assert not unused, f"declared but not used anywhere: {unused}"


def test_runtime_dependencies_are_used_by_the_collection_content():
    """galaxy.yml's dependencies are what an installed collection needs, not test tools."""
    galaxy = _declared()[0]
    used = _used()
    content = ("roles/", "playbooks/", "plugins/", "meta/", "build_deepspeed.yml", "train.yml")
    files = subprocess.run(["git", "ls-files", *content], cwd=ROOT, check=True, capture_output=True,
                           text=True).stdout.split()
    runtime = set()
    for name in files:
        if name.endswith(SCANNED) and (ROOT / name).is_file():
            for line in (ROOT / name).read_text(errors="replace").splitlines():
                if not re.match(r"\s*(from|import)\s+ansible", line):
                    runtime |= {c for c in FQCN.findall(line) if c not in CORE_PACKAGES and c != OWN}
    assert runtime <= galaxy, f"used by the collection, missing from galaxy.yml: {sorted(runtime - galaxy)}"
    assert galaxy <= runtime, f"galaxy.yml dependencies the collection content does not use: {sorted(galaxy - runtime)}"
    assert set(used) >= runtime


def test_the_ssh_keepalives_users_are_told_to_set_are_the_ones_molecule_proves():
    """docs/train.md gives users the ssh_args of this repository's ansible.cfg, which
    molecule/default/verify/ssh_keepalive.yml runs against a frozen node: the same line in both."""
    import configparser

    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(ROOT / "ansible.cfg")
    ssh_args = cfg.get("ssh_connection", "ssh_args")
    assert "ServerAliveInterval=15" in ssh_args and "ServerAliveCountMax=4" in ssh_args
    assert "ssh_args = %s\n" % ssh_args in (ROOT / "docs" / "train.md").read_text()
    assert "ansible.cfg" in (ROOT / "molecule" / "default" / "verify" / "ssh_keepalive.yml").read_text()


def role_step_modules(root):
    """The modules only the roles call: those whose options are a role's steps (_stepped), and ROLE_STEPS."""
    stepped = {path.stem for path in (root / "plugins" / "modules").glob("*.py")
               if re.search(r"^from \S+ import (.*, )?_stepped\b", path.read_text(), re.M)}
    return stepped | ROLE_STEPS


def listed_modules(root, tmp_path):
    """{FQCN: short description} as `ansible-doc -l multinode.training` lists the collection at ``root``,
    installed under ``tmp_path`` as Ansible finds an installed collection (Ansible's defaults otherwise)."""
    (tmp_path / "ansible_collections" / "multinode").mkdir(parents=True)
    (tmp_path / "ansible_collections" / "multinode" / "training").symlink_to(root)
    env = {name: value for name, value in os.environ.items() if not name.startswith("ANSIBLE_")}
    env.update(ANSIBLE_COLLECTIONS_PATH=str(tmp_path), ANSIBLE_HOME=str(tmp_path / ".ansible"))
    listed = subprocess.run([sys.executable, "-m", "ansible", "doc", "-t", "module", "-l", "--json", "multinode.training"],
                            cwd=tmp_path, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(listed)


def presented_wrongly(root, tmp_path):
    """['<FQCN> ...'] for each module ansible-doc -l shows as a user's that only the roles call, or the reverse."""
    steps = role_step_modules(root)
    wrong = []
    for fqcn, description in sorted(listed_modules(root, tmp_path).items()):
        internal = fqcn.split(".")[-1] in steps
        if internal != description.startswith(INTERNAL):
            wrong.append("%s: only the roles call it: %s; ansible-doc -l shows %r" % (
                fqcn, "yes" if internal else "no", description))
    return wrong


def test_ansible_doc_lists_the_roles_steps_as_internal(tmp_path):
    assert presented_wrongly(ROOT, tmp_path) == []
    assert {"deepspeed_build", "wheel_distribute", "train_node", "validate"} <= role_step_modules(ROOT)


def test_a_roles_step_shown_as_a_users_module_is_named(tmp_path):
    modules = tmp_path / "planted" / "plugins" / "modules"
    modules.mkdir(parents=True)
    doc = 'DOCUMENTATION = r"""\nmodule: %s\nshort_description: %s\n"""\n'
    (modules / "steps.py").write_text(doc % ("steps", "The steps of a role") + "from x import _stepped\n")
    (modules / "validate.py").write_text(doc % ("validate", INTERNAL + "the roles' first step"))
    (modules / "launch.py").write_text(doc % ("launch", INTERNAL + "start a job"))
    assert presented_wrongly(tmp_path / "planted", tmp_path / "installed") == [
        "multinode.training.launch: only the roles call it: no; ansible-doc -l shows 'Internal only - start a job'",
        "multinode.training.steps: only the roles call it: yes; ansible-doc -l shows 'The steps of a role'"]
