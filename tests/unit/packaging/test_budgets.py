"""The budgets docs/CONTRIBUTING.md keeps, counted here instead of by hand.

- At most ROLE_VARIABLES role variables in all (every name an entry point of meta/argument_specs.yml
  declares, once per role).
- No function of the collection's code (plugins/, the roles' shipped files) over FUNCTION_LINES lines,
  `def` to its last line.
- No function or class of that code used only by the tests: its name is read somewhere outside tests/.

Each counter runs on the repository and on a planted tree that breaks its budget by one.
(One place per default value is tests/unit/roles/test_default_constants.py.)
"""
import ast
import re

import yaml

from tests.unit.conftest import ROOT

ROLE_VARIABLES = 100
FUNCTION_LINES = 60
# What ansible-core finds by name, not by a reference in the code.
PLUGIN_CLASSES = {"ActionModule", "CallbackModule", "FilterModule", "InventoryModule", "LookupModule", "ModuleDocFragment"}
# Build output and copies of the tree (`make sanity` copies the collection into .cache/sanity): a stale copy
# that still calls a function would hide that nothing else does.
SKIPPED_PARTS = {".git", ".collections", ".venv", ".cache", ".pytest_cache", "tests", "__pycache__", "runs", "dist"}
# Files that run or configure something; prose (docs, changelogs) naming a function is not a use of it.
READERS = {".py", ".yml", ".yaml", ".j2", ".sh", ".cfg", ".ini", ".toml", ""}


def role_variables(root):
    """{role: set of variable names} from every role's meta/argument_specs.yml (all entry points)."""
    found = {}
    for path in sorted(root.glob("roles/*/meta/argument_specs.yml")):
        specs = yaml.safe_load(path.read_text())["argument_specs"]
        found[path.parent.parent.name] = {name for entry in specs.values() for name in entry.get("options") or {}}
    return found


def code_files(root):
    """The collection's Python: plugins/ and the files the roles ship to the nodes."""
    return sorted(list(root.glob("plugins/**/*.py")) + list(root.glob("roles/*/files/**/*.py")))


def long_functions(root, limit=FUNCTION_LINES):
    """['<path>:<line> <name> (<n> lines)'] for every function (methods and nested ones too) over limit."""
    long = []
    for path in code_files(root):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    long.append("%s:%d %s (%d lines)" % (path.relative_to(root), node.lineno, node.name, lines))
    return long


def _names_read(path, text):
    """Every name a file could use a definition by: in Python the names, attributes, imported names and
    strings (a step table, getattr); in any other text file (tasks, templates, scripts) every word."""
    if path.suffix != ".py":
        return set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))
    names = set()
    for node in ast.walk(ast.parse(text, str(path))):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.alias):
            names.add(node.name.rsplit(".", 1)[-1])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)
    return names


def read_only_by_tests(root):
    """['<path> <name>'] for each top-level function or class of the collection's code that nothing
    outside tests/ reads (a definition is not a read of itself)."""
    read = set()
    for path in root.rglob("*"):
        rel = path.relative_to(root)
        if not path.is_file() or path.suffix not in READERS or SKIPPED_PARTS.intersection(rel.parts):
            continue
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        read |= _names_read(path, text)
    unused = []
    for path in code_files(root):
        for node in ast.parse(path.read_text(), str(path)).body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if node.name == "main" or node.name in PLUGIN_CLASSES or node.name in read:
                continue
            unused.append("%s %s" % (path.relative_to(root), node.name))
    return unused


def test_role_variables_within_budget():
    found = role_variables(ROOT)
    assert set(found) == {"deepspeed_build", "nccl_tuning", "toolchain", "train", "wheel_distribute"}
    total = sum(len(names) for names in found.values())
    assert total <= ROLE_VARIABLES, "%d role variables, the budget is %d: %s" % (
        total, ROLE_VARIABLES, {role: len(names) for role, names in found.items()})


def test_no_function_over_the_line_budget():
    assert long_functions(ROOT) == []


def test_no_code_used_only_by_tests():
    assert read_only_by_tests(ROOT) == []


# ------------------------------------------------------------------- each counter sees a broken budget


def test_a_variable_over_the_budget_is_counted(tmp_path):
    for path in ROOT.glob("roles/*/meta/argument_specs.yml"):
        target = tmp_path / path.relative_to(ROOT)
        target.parent.mkdir(parents=True)
        target.write_text(path.read_text())
    total = sum(len(names) for names in role_variables(tmp_path).values())
    specs_file = tmp_path / "roles" / "toolchain" / "meta" / "argument_specs.yml"
    specs = yaml.safe_load(specs_file.read_text())
    planted = max(1, ROLE_VARIABLES - total + 1)
    for index in range(planted):
        specs["argument_specs"]["main"]["options"]["toolchain_planted_%d" % index] = {"type": "str"}
    # a variable declared again by a second entry point of the same role is one variable
    specs["argument_specs"]["second"] = {"options": {"toolchain_planted_0": {"type": "str"}}}
    specs_file.write_text(yaml.safe_dump(specs))
    counted = sum(len(names) for names in role_variables(tmp_path).values())
    assert counted == total + planted > ROLE_VARIABLES


def _function(name, lines):
    body = "".join("    x%d = %d\n" % (index, index) for index in range(lines - 2))
    return "def %s():\n%s    return 0\n" % (name, body)


def test_a_function_over_the_budget_is_named(tmp_path):
    (tmp_path / "plugins" / "module_utils").mkdir(parents=True)
    (tmp_path / "roles" / "train" / "files").mkdir(parents=True)
    (tmp_path / "plugins" / "module_utils" / "a.py").write_text(
        _function("fits", FUNCTION_LINES) + "\n\nclass K:\n" + "".join(
            "    " + line + "\n" for line in _function("method", FUNCTION_LINES + 1).splitlines()))
    (tmp_path / "roles" / "train" / "files" / "job.py").write_text(_function("shipped", FUNCTION_LINES + 1))
    assert long_functions(tmp_path) == ["plugins/module_utils/a.py:%d method (61 lines)" % (FUNCTION_LINES + 4),
                                        "roles/train/files/job.py:1 shipped (61 lines)"]


def test_code_read_only_by_a_test_is_named(tmp_path):
    for folder in ("plugins/module_utils/_x", "plugins/filter", "roles/r/tasks", "tests/unit"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "plugins" / "module_utils" / "_x" / "lib.py").write_text(
        "def by_module():\n    return 1\n\n\ndef by_task():\n    return 2\n\n\n"
        "def by_table():\n    return 3\n\n\ndef by_test():\n    return by_test_helper()\n\n\n"
        "def by_test_helper():\n    return 4\n\n\nclass Unread:\n    pass\n")
    (tmp_path / "plugins" / "filter" / "f.py").write_text(
        "from x.lib import by_module\n\nSTEPS = {'t': 'by_table'}\n\n\nclass FilterModule:\n"
        "    def filters(self):\n        return {'f': by_module}\n")
    (tmp_path / "roles" / "r" / "tasks" / "main.yml").write_text("- debug: {msg: \"{{ 'x' | by_task }}\"}\n")
    (tmp_path / "tests" / "unit" / "test_lib.py").write_text("from x.lib import by_test, Unread\n")
    stale = tmp_path / ".cache" / "sanity" / "plugins" / "filter"
    stale.mkdir(parents=True)
    (stale / "old.py").write_text("from x.lib import by_test\n\nby_test()\n")
    # by_test_helper is read by by_test, itself read only by the test: a chain the test keeps alive is
    # named at its head, and goes with it.
    assert read_only_by_tests(tmp_path) == ["plugins/module_utils/_x/lib.py by_test",
                                            "plugins/module_utils/_x/lib.py Unread"]
