"""The budgets docs/CONTRIBUTING.md keeps, counted here instead of by hand.

- At most ROLE_VARIABLES role variables in all (every name an entry point of meta/argument_specs.yml
  declares, once per role).
- No function of the collection's code (plugins/, the roles' shipped files) over FUNCTION_LINES lines,
  `def` to its last line.
- No function or class of that code used only by the tests: its name is read somewhere outside tests/.
- One place per default value. A default lives in the code (a module's argument spec, from a module_utils
  constant) or in a role's defaults/main.yml; every other place that shows it is a copy that must say the
  same: a module's documented default (its own or its doc fragment's) against its argument spec, a role's
  meta/argument_specs.yml (and so the README generated from it) against its defaults/main.yml, the
  hand-written `| variable | default |` tables of the docs against the roles' defaults, and a role value
  (defaults/main.yml, vars/main.yml) that a role task hands a module option as `{{ name }}` (or
  `{{ name | int }}`, float, string, bool) against that option's default - else a play that sets nothing
  and a module call that sets nothing differ. OTHER_DEFAULT_ON_PURPOSE names the pairs that differ by design.
- One place per option text: no option is documented with the same text by two modules, or by a module
  and a doc fragment; the same option is a doc fragment of plugins/doc_fragments/.

Each counter runs on the repository and on a planted tree that breaks its budget by one.
(Mirrors no scan reaches are in tests/unit/roles/test_default_constants.py.)
"""
import ast
import importlib
import re
from unittest import mock

import yaml
from ansible.module_utils.common.parameters import DEFAULT_TYPE_VALIDATORS

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
PACKAGE = "ansible_collections.multinode.training"
# A role value handed to a module option unchanged: `{{ name }}`, or through type conversions only.
HANDED = re.compile(r"^\{\{\s*([A-Za-z_]\w*)\s*((?:\|\s*(?:int|float|string|bool)\s*)*)\}\}$")
# A role value handed to a module option whose own default is another, by design:
# {(role variable, module, option): why}. A module's default serves a task that sets nothing.
OTHER_DEFAULT_ON_PURPOSE = {
    ("nccl_tuning_exclude_devices", "nccl_fabric", "exclude"):
        "the role keeps NCCL off bonded ports (*bond*); the module excludes only what it is given",
    ("toolchain_set_default", "deepspeed_build", "gcc_plan.set_default"):
        "the role changes no default compiler unless asked; the step's own default plans the switch",
    ("train_lease", "torchrun", "watch.lease"):
        "a play's job stops 900 s after the controller's last poll; a module call without a lease never does",
    ("train_stream_ranks", "torchrun", "stream_ranks"): "a play streams rank 0's output; a module call none",
    ("train_stream_ranks", "slurm_job", "stream_ranks"): "a play streams rank 0's output; a module call none",
    ("train_progress_interval", "torchrun", "poll"):
        "a play prints a progress line every 15 s (as data_sync's transfer); a module call every 10 s",
    ("train_progress_interval", "slurm_job", "wait"):
        "a play's status call waits one progress interval; a module call's status waits 10 s",
}


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


class _Built(Exception):
    """How the stand-in AnsibleModule leaves a module's main() with the arguments main() gave it."""


def argument_spec(name):
    """Module ``name``'s argument spec as its code holds it: what its main() hands AnsibleModule, or, for a
    module that is only documentation (its action plugin does the work), the action's ARGUMENT_SPEC - {}
    when it has none, so that no option of it has a default."""
    module = importlib.import_module("%s.plugins.modules.%s" % (PACKAGE, name))
    if not hasattr(module, "main"):
        return getattr(importlib.import_module("%s.plugins.action.%s" % (PACKAGE, name)), "ARGUMENT_SPEC", {})

    def built(**kwargs):
        raise _Built(kwargs["argument_spec"])
    with mock.patch.object(module, "AnsibleModule", built):
        try:
            module.main()
        except _Built as exc:
            return exc.args[0]
    raise AssertionError("%s: main() built no AnsibleModule" % name)


def module_specs(root):
    return {path.stem: argument_spec(path.stem) for path in sorted((root / "plugins" / "modules").glob("*.py"))}


def _doc_string(path, variable="DOCUMENTATION"):
    """The YAML of the string assigned to ``variable`` in a plugin file (a fragment's class attribute too)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Assign) and any(getattr(target, "id", None) == variable for target in node.targets):
            return yaml.safe_load(node.value.value)
    raise KeyError("%s: no %s" % (path, variable))


def documented_options(root, path):
    """A module's documented options as ansible-doc shows them: its doc fragments' and its own."""
    doc = _doc_string(path)
    options = {}
    for fragment in doc.get("extends_documentation_fragment") or []:
        name, _dot, variable = fragment.split(".", 2)[2].partition(".")
        fragment_doc = _doc_string(root / "plugins" / "doc_fragments" / (name + ".py"), variable.upper() or "DOCUMENTATION")
        options.update(fragment_doc.get("options") or {})
    options.update(doc.get("options") or {})
    return options


def _doc_against_spec(documented, spec, place, found):
    for name, doc in documented.items():
        option = spec.get(name) or {}
        if doc.get("default") != option.get("default"):
            found.append("%s%s: documented default %r, the code's %r" % (place, name, doc.get("default"), option.get("default")))
        if doc.get("suboptions"):
            _doc_against_spec(doc["suboptions"], option.get("options") or {}, "%s%s." % (place, name), found)


def documented_default_copies(root, specs):
    """['plugins/modules/<m>.py <option>: documented default X, the code's Y'] for every documented option
    (suboptions too, doc fragments' too) whose default is not its argument spec's."""
    found = []
    for path in sorted((root / "plugins" / "modules").glob("*.py")):
        _doc_against_spec(documented_options(root, path), specs[path.stem], "%s " % path.relative_to(root), found)
    return found


def role_spec_copies(root):
    """['roles/<r>/meta/argument_specs.yml <entry> <variable>: shows X, defaults/main.yml has Y'] for every
    variable of every entry point whose shown default is not the role's (a required one shows none)."""
    found = []
    for path in sorted(root.glob("roles/*/meta/argument_specs.yml")):
        defaults_file = path.parent.parent / "defaults" / "main.yml"
        defaults = yaml.safe_load(defaults_file.read_text()) or {} if defaults_file.exists() else {}
        for entry, spec in yaml.safe_load(path.read_text())["argument_specs"].items():
            for name, option in (spec.get("options") or {}).items():
                if option.get("required") and "default" not in option:
                    continue
                if option.get("default", "(none)") != defaults.get(name, "(none)"):
                    found.append("%s %s %s: shows %r, defaults/main.yml has %r" % (
                        path.relative_to(root), entry, name, option.get("default", "(none)"), defaults.get(name, "(none)")))
    return found


def role_values(root, role, files=("defaults", "vars")):
    """{name: (file, value)} of a role's defaults/main.yml and vars/main.yml; a templated value is left out
    (it is worked out in the play)."""
    values = {}
    for name in files:
        path = root / "roles" / role / name / "main.yml"
        data = yaml.safe_load(path.read_text()) or {} if path.exists() else {}
        values.update({key: (path.relative_to(root), value) for key, value in data.items()
                       if not ("{{" in str(value) or "{%" in str(value))})
    return values


def _shown(text, value):
    """Whether a table's backquoted text shows ``value`` (`""` is the empty string; `off` stays a string)."""
    if isinstance(value, str):
        return text == value or (text == '""' and value == "")
    return yaml.safe_load(text) == value


def table_default_copies(root):
    """['<doc>:<line> <variable>: shows X, <role defaults> has Y'] for every row of a hand-written
    `| variable | default | ...` table whose default, a backquoted value, is not the role's (cells may hold
    several, `a` / `b`; a single default holds for every variable of the row; prose is not a default)."""
    values = {}
    for path in sorted(root.glob("roles/*/defaults/main.yml")):
        values.update(role_values(root, path.parent.parent.name, ("defaults",)))
    found = []
    for path in sorted(root.rglob("*.md")):
        if SKIPPED_PARTS.intersection(path.relative_to(root).parts):
            continue
        header = None
        for number, line in enumerate(path.read_text().splitlines(), 1):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if not line.startswith("|"):
                header = None
            elif header is None:
                header = [cell.lower() for cell in cells]
            elif header[:2] == ["variable", "default"] and not set(line) <= set("|-: "):
                names, shown = cells[0].split(" / "), cells[1].split(" / ")
                for name, text in zip(names, shown * len(names) if len(shown) == 1 else shown):
                    name, text = re.fullmatch(r"`(\w+)`", name.strip()), re.fullmatch(r"`([^`]*)`", text.strip())
                    if name and text and name.group(1) in values and not _shown(text.group(1), values[name.group(1)][1]):
                        where, value = values[name.group(1)]
                        found.append("%s:%d %s: shows %s, %s has %r" % (
                            path.relative_to(root), number, name.group(1), text.group(1), where, value))
    return found


def _tasks(data):
    for task in data or []:
        if isinstance(task, dict):
            for key in ("block", "rescue", "always"):
                yield from _tasks(task.get(key))
            yield task


def _handed(args, spec, path=()):
    """(option path, role value's name, the option's spec) for every option set from one value unchanged."""
    for name, value in (args or {}).items():
        option = (spec or {}).get(name)
        if option is None:
            continue
        if isinstance(value, dict) and option.get("options"):
            yield from _handed(value, option["options"], path + (name,))
        elif isinstance(value, str) and HANDED.match(value.strip()):
            yield ".".join(path + (name,)), HANDED.match(value.strip()).group(1), option


def _as_option_reads(value, option):
    kind = option.get("type", "str")
    return DEFAULT_TYPE_VALIDATORS[kind](value) if kind in DEFAULT_TYPE_VALIDATORS and kind != "raw" else value


def differing_handovers(root, specs):
    """{(variable, module, option): '<role file> <variable> X, <module> option <o> default Y (<tasks file>
    hands it over)'} for every role value a role's task hands a module option whose default (the code's) is
    another, as the option reads both."""
    found = {}
    for path in sorted(root.glob("roles/*/tasks/*.yml")):
        values = role_values(root, path.parent.parent.name)
        for task in _tasks(yaml.safe_load(path.read_text())):
            for key, args in task.items():
                module = key.split(".", 2)[2] if key.startswith("multinode.training.") else ""
                if not module or not isinstance(args, dict):
                    continue
                for option, name, spec in _handed(args, specs.get(module)):
                    if name not in values or spec.get("default") is None:
                        continue
                    where, value = values[name]
                    try:
                        same = _as_option_reads(value, spec) == _as_option_reads(spec["default"], spec)
                    except (TypeError, ValueError):
                        same = False
                    if not same:
                        found.setdefault((name, module, option), "%s %s %r, %s option %s default %r (%s hands it over)" % (
                            where, name, value, module, option, spec["default"], path.relative_to(root)))
    return found


def _text(description):
    return " ".join(" ".join(description if isinstance(description, list) else [str(description)]).split())


def copied_option_texts(root):
    """['<option>: <text> - documented alike in <place>, <place>'] for every option whose description two
    modules (or a module and a doc fragment) write out alike, white space aside. Top-level options only: a
    doc fragment adds those, not a step's suboptions (a module of module_utils/_stepped.py)."""
    places = {}
    for path in sorted((root / "plugins" / "doc_fragments").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Assign) and isinstance(getattr(node.value, "value", None), str):
                for target in (target for target in node.targets if isinstance(target, ast.Name)):
                    for name, doc in (_doc_string(path, target.id).get("options") or {}).items():
                        places.setdefault((name, _text(doc.get("description"))), []).append(
                            "%s %s" % (path.relative_to(root), target.id))
    for path in sorted((root / "plugins" / "modules").glob("*.py")):
        for name, doc in (_doc_string(path).get("options") or {}).items():
            places.setdefault((name, _text(doc.get("description"))), []).append(str(path.relative_to(root)))
    return ["%s: %s - documented alike in %s" % (name, text[:60], ", ".join(where))
            for (name, text), where in sorted(places.items()) if len(where) > 1]


def attribute_descriptions(root):
    """['<module>: <attribute>'] for every attribute a module describes itself: what an attribute means is
    plugins/doc_fragments/attributes.py's DOCUMENTATION (Ansible merges it in); a module says its support and
    details, and extends that fragment."""
    found = []
    for path in sorted((root / "plugins" / "modules").glob("*.py")):
        doc = _doc_string(path)
        attributes = doc.get("attributes") or {}
        for name, attribute in sorted(attributes.items()):
            if "description" in (attribute or {}):
                found.append("%s: %s" % (path.relative_to(root), name))
        if attributes and "multinode.training.attributes" not in (doc.get("extends_documentation_fragment") or []):
            found.append("%s: attributes without the fragment multinode.training.attributes" % path.relative_to(root))
    return found


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


def test_every_documented_default_is_the_codes():
    assert documented_default_copies(ROOT, module_specs(ROOT)) == []


def test_every_role_entry_point_shows_the_roles_defaults():
    assert role_spec_copies(ROOT) == []


def test_every_default_table_of_the_docs_shows_the_roles_defaults():
    assert table_default_copies(ROOT) == []


def test_no_role_value_handed_to_a_module_differs_from_its_default():
    differing = differing_handovers(ROOT, module_specs(ROOT))
    assert sorted(line for pair, line in differing.items() if pair not in OTHER_DEFAULT_ON_PURPOSE) == []
    # a pair that differs on purpose is still handed over and still differs, else it leaves the list
    assert sorted(set(OTHER_DEFAULT_ON_PURPOSE) - set(differing)) == []


def test_no_option_text_is_written_twice():
    assert copied_option_texts(ROOT) == []


def test_no_module_describes_an_attribute_itself():
    assert attribute_descriptions(ROOT) == []


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


def test_a_copy_of_a_default_that_differs_is_named(tmp_path):
    for folder in ("plugins/modules", "plugins/doc_fragments", "roles/r/meta", "roles/r/defaults", "roles/r/vars",
                   "roles/r/tasks", "docs"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "plugins" / "doc_fragments" / "f.py").write_text(
        'class ModuleDocFragment:\n    SHARED = r"""\noptions:\n  b:\n    type: str\n    default: x\n"""\n')
    (tmp_path / "plugins" / "modules" / "m.py").write_text(
        'DOCUMENTATION = r"""\nextends_documentation_fragment: [multinode.training.f.shared]\noptions:\n'
        '  a: {type: float, default: 1.3}\n  c:\n    type: dict\n    suboptions:\n      d: {type: int, default: 2}\n'
        '      e: {type: int, default: 5}\n"""\n')
    specs = {"m": {"a": {"type": "float", "default": 1.2}, "b": {"type": "str", "default": "y"},
                   "c": {"type": "dict", "options": {"d": {"type": "int", "default": 2}, "e": {"type": "int"}}}}}
    assert documented_default_copies(tmp_path, specs) == [
        "plugins/modules/m.py b: documented default 'x', the code's 'y'",
        "plugins/modules/m.py a: documented default 1.3, the code's 1.2",
        "plugins/modules/m.py c.e: documented default 5, the code's None"]

    (tmp_path / "roles" / "r" / "defaults" / "main.yml").write_text(
        "r_a: 1.2\nr_b: 'off'\nr_c: [0]\nr_d: 4\nr_e: '{{ r_d }}'\n")
    (tmp_path / "roles" / "r" / "vars" / "main.yml").write_text("_r_d: 3\n")
    (tmp_path / "roles" / "r" / "meta" / "argument_specs.yml").write_text(yaml.safe_dump({"argument_specs": {
        "main": {"options": {"r_a": {"type": "float", "default": 1.3}, "r_b": {"default": "off"}, "r_c": {"type": "list"}}},
        "other": {"options": {"r_c": {"type": "list", "required": True}}}}}))
    assert role_spec_copies(tmp_path) == [
        "roles/r/meta/argument_specs.yml main r_a: shows 1.3, defaults/main.yml has 1.2",
        "roles/r/meta/argument_specs.yml main r_c: shows '(none)', defaults/main.yml has [0]"]

    (tmp_path / "docs" / "x.md").write_text(
        "| variable | default | meaning |\n|---|---|---|\n| `r_a` / `r_b` | `1.3` / `off` | |\n"
        "| `r_c` / `r_d` | `[0]` | |\n| `r_e` | `4` | templated: worked out in the play |\n| `r_f` | `1` | no role's |\n"
        "\n| variable | type | default |\n|---|---|---|\n| `r_a` | float | `9` |\n")
    assert table_default_copies(tmp_path) == [
        "docs/x.md:3 r_a: shows 1.3, roles/r/defaults/main.yml has 1.2",
        "docs/x.md:4 r_d: shows [0], roles/r/defaults/main.yml has 4"]

    (tmp_path / "roles" / "r" / "tasks" / "main.yml").write_text(
        "- name: A block\n  block:\n    - name: Handed over\n      multinode.training.m:\n"
        "        a: '{{ r_a | float }}'\n        b: '{{ r_b }}-not-unchanged'\n        c: {d: '{{ _r_d }}'}\n")
    specs["m"]["a"]["default"] = 1.3
    differing = differing_handovers(tmp_path, specs)
    assert sorted(differing.values()) == [
        "roles/r/defaults/main.yml r_a 1.2, m option a default 1.3 (roles/r/tasks/main.yml hands it over)",
        "roles/r/vars/main.yml _r_d 3, m option c.d default 2 (roles/r/tasks/main.yml hands it over)"]
    assert sorted(differing) == [("_r_d", "m", "c.d"), ("r_a", "m", "a")]


def test_an_option_text_written_twice_is_named(tmp_path):
    for folder in ("plugins/modules", "plugins/doc_fragments"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "plugins" / "doc_fragments" / "f.py").write_text(
        'class ModuleDocFragment:\n    DOCUMENTATION = r"""\noptions:\n  shared:\n    description: [One text.]\n"""\n')
    doc = 'DOCUMENTATION = r"""\noptions:\n%s"""\n'
    (tmp_path / "plugins" / "modules" / "a.py").write_text(doc % (
        "  node: {description: The node.}\n  other: {description: Same words, another option.}\n"
        "  step: {type: dict, suboptions: {node: {description: The node.}}}\n"))
    (tmp_path / "plugins" / "modules" / "b.py").write_text(doc % (
        "  node:\n    description:\n      - The\n        node.\n  shared: {description: One   text.}\n"
        "  something: {description: Same words, another option.}\n"))
    assert copied_option_texts(tmp_path) == [
        "node: The node. - documented alike in plugins/modules/a.py, plugins/modules/b.py",
        "shared: One text. - documented alike in plugins/doc_fragments/f.py DOCUMENTATION, plugins/modules/b.py"]


def test_an_attribute_a_module_describes_itself_is_named(tmp_path):
    (tmp_path / "plugins" / "modules").mkdir(parents=True)
    doc = 'DOCUMENTATION = r"""\n%s"""\n'
    (tmp_path / "plugins" / "modules" / "a.py").write_text(doc % (
        "extends_documentation_fragment: [multinode.training.attributes]\n"
        "attributes:\n  check_mode: {support: full}\n  diff_mode: {description: Its own words., support: none}\n"))
    (tmp_path / "plugins" / "modules" / "b.py").write_text(doc % "attributes:\n  check_mode: {support: full}\n")
    (tmp_path / "plugins" / "modules" / "c.py").write_text(doc % "options: {}\n")
    assert attribute_descriptions(tmp_path) == [
        "plugins/modules/a.py: diff_mode",
        "plugins/modules/b.py: attributes without the fragment multinode.training.attributes"]
