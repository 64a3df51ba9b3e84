# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run a module of this collection on the node without Ansible's module machinery (controller side).

For the launch's module calls (train_access, torchrun): where it can, the action validates the
task's arguments here with Ansible's own ArgumentSpecValidator and the module's argument spec, then
sends the node's python, on stdin, plugins/module_utils/_node/light.py followed by ``main(<payload>)``:
the module_utils sources the entry imports (found by reading their imports, standard library only
beyond them), the entry's name and the validated arguments, and those sources compiled here (run
as they are where the node's Python has this one's bytecode magic number, else compiled there).
That costs the node a python start-up (plus the compile of those sources, about 0.03-0.05
CPU-seconds for torchrun's, where the magic differs) instead of about 0.3 for a module call, on
every node at once. The answer is the entry's one JSON line.

The seam: ``run_module(action, module, entry, args, task_vars)`` is the one call the actions make,
for the modules in ``ENTRIES`` only. It imposes one rule on an entry and everything it imports:
standard library and this collection's module_utils only (no Ansible), an ``ARGUMENT_SPEC`` that the
module file hands to AnsibleModule too, and a ``run_module(module)`` that uses only what
``_node.light.LightModule`` has (tests/unit/plugins/plugin_utils/test_light_exec.py checks all three,
so the module and the light call run the same code). ``MULTINODE_TRAINING_LIGHT_CALLS=0`` in the
controller's environment turns it off: every call is then Ansible's module call (pipelining, as for
any module), and so are the torchrun action's polls (benchmarks/launch.sh measures both ways).
Measured (benchmarks/README.md): off costs about 0.7 s at 2 nodes and 3 s at 8 nodes over ssh on a
2-core host whose containers share the CPUs; on real nodes it is the python start-up per call
instead of about 0.3 CPU-seconds of module machinery, on every node, at each start/poll/stop.

``light_python`` says where this cannot run, and the action makes the usual module call instead:
no absolute python known for the host yet (ansible_python_interpreter, the one discovered - by the
first module call or by train.yml's node_facts - or interpreter_python in ansible.cfg), a
connection that cannot take stdin (has_pipelining), become through a method that cannot either
(su), an async task. The task's ``environment`` applies as to a module.
"""
from __future__ import annotations

import importlib
import json
import os
import re

from ansible import constants as C
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.errors import UnsupportedError

from ansible_collections.multinode.training.plugins.module_utils._node import light as _light

# The modules whose actions make light calls, and their entries (module_utils: ARGUMENT_SPEC, run_module).
ENTRIES = {
    "multinode.training.torchrun": "ansible_collections.multinode.training.plugins.module_utils._torchrun.job",
    "multinode.training.train_access": "ansible_collections.multinode.training.plugins.module_utils._train.access",
}
# The switch: "0" turns light calls and light polls off (module calls throughout).
SWITCH = "MULTINODE_TRAINING_LIGHT_CALLS"

_SOURCES = {}
# entry -> its sources, packed (_light.pack) once
_PACKED = {}
# entry -> its sources compiled, packed (_light.pack_code) once
_CODE = {}
_LIGHT_TEXT = []


def module_sources(entry):
    """``{dotted name: source}`` of ``entry`` (a module_utils module of this collection) and every
    module_utils module of this collection it imports, directly or not. Read from the files beside
    _node/light.py, never imported here (each task's worker process pays this: a few milliseconds)."""
    if entry in _SOURCES:
        return _SOURCES[entry]
    sources = {}
    todo = [entry]
    while todo:
        name = todo.pop()
        if name in sources:
            continue
        with open(os.path.join(_ROOT, *name[len(_light.PACKAGE) + 1:].split(".")) + ".py") as handle:
            sources[name] = handle.read()
        todo.extend(imports(sources[name]))
    _SOURCES[entry] = sources
    return sources


_PREFIX = re.escape(_light.PACKAGE)
_FROM = re.compile(r"^[ \t]*from[ \t]+(%s(?:\.\w+)*)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)" % _PREFIX, re.M)
_IMPORT = re.compile(r"^[ \t]*import[ \t]+(%s(?:\.\w+)+)" % _PREFIX, re.M)
# module_utils and its subpackages (_node, _torchrun, ...): ``from <package>._node import watch``
# names modules, ``from <package>._node.watch import x`` names a module's members.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(_light.__file__)))
_SUBPACKAGES = frozenset(name for name in os.listdir(_ROOT) if os.path.isfile(os.path.join(_ROOT, name, "__init__.py")))


def imports(source):
    """The collection's module_utils modules that ``source`` imports (``from <package> import a, b``,
    ``from <package>.a import x``, ``import <package>.a``), in the order written."""
    found = []
    for match in _FROM.finditer(source):
        module, names = match.groups()
        if module != _light.PACKAGE and module[len(_light.PACKAGE) + 1:] not in _SUBPACKAGES:
            found.append(module)
            continue
        for name in names.strip("()").replace("\n", " ").split(","):
            name = name.split("#")[0].strip().split(" ")[0]
            if name:
                found.append(module + "." + name)
    found.extend(match.group(1) for match in _IMPORT.finditer(source))
    return found


def node_side_paths(spec):
    """``spec`` with its top-level ``path`` options (and lists of paths) checked as strings here ->
    (that spec, their names). A path is expanded on the node (``~`` and ``$VAR`` are the node's, as
    AnsibleModule expands them there): _light.expand_paths."""
    checked, paths = {}, []
    for name, option in spec.items():
        option = dict(option)
        if option.get("type") == "path" or (option.get("type") == "list" and option.get("elements") == "path"):
            paths.append(name)
            option["type" if option.get("type") == "path" else "elements"] = "str"
        checked[name] = option
    return checked, paths


def validate(entry, args, name):
    """The task's arguments checked against ``entry``'s ARGUMENT_SPEC (and MUTUALLY_EXCLUSIVE), as
    AnsibleModule would on the node -> (params, no_log values, error message or None, path options)."""
    utils = importlib.import_module(entry)
    spec, paths = node_side_paths(utils.ARGUMENT_SPEC)
    validator = ArgumentSpecValidator(spec, mutually_exclusive=getattr(utils, "MUTUALLY_EXCLUSIVE", None))
    checked = validator.validate(dict(args))
    if checked.error_messages:
        msg = checked.errors.msg
        if isinstance(checked.errors[0], UnsupportedError):
            msg = "Unsupported parameters for (%s) module: %s" % (name, msg)
        return None, (), msg, paths
    return checked.validated_parameters, sorted(str(v) for v in checked._no_log_values), None, paths


def packed_sources(entry):
    """``module_sources(entry)``, packed (_light.pack): once per process and entry."""
    if entry not in _PACKED:
        _PACKED[entry] = _light.pack(module_sources(entry))
    return _PACKED[entry]


def packed_code(entry):
    """``module_sources(entry)`` compiled here and packed (_light.pack_code), with this Python's
    bytecode magic number: once per process and entry."""
    if entry not in _CODE:
        _CODE[entry] = _light.pack_code(module_sources(entry))
    return _CODE[entry]


def light_text():
    """The source of _node/light.py (read once per process)."""
    if not _LIGHT_TEXT:
        with open(_light.__file__) as handle:
            _LIGHT_TEXT.append(handle.read())
    return _LIGHT_TEXT[0]


def prepare(entry):
    """Warm this process for light calls of ``entry``: import it (its ARGUMENT_SPEC checks the
    arguments), read and pack the module_utils sources it needs, read _node/light.py. The action plugins
    call it when they are imported, which ansible-playbook does once, in its own process, before it
    forks a task's worker per node (the linear strategy asks each action class whether it bypasses
    the host loop): every node's worker inherits the work instead of doing it again (for torchrun's
    entry about 40 ms per node where Python writes no bytecode, 10 ms where it does). Where nothing
    imported the action before a fork, the worker does the same work as before, once."""
    importlib.import_module(entry)
    packed_sources(entry)
    packed_code(entry)
    light_text()


def script(entry, params, check_mode=False, no_log_values=(), paths=()):
    """The text the node's python reads on stdin: _node/light.py, then ``main(<payload>, <sources>,
    <compiled sources>)``."""
    payload = {"entry": entry, "params": params, "paths": list(paths), "check_mode": bool(check_mode),
               "no_log_values": list(no_log_values)}
    return "%s\n\nmain(%r, %r, %r)\n" % (
        light_text(), _light.pack(payload), packed_sources(entry), packed_code(entry))


def configured_python(task_vars):
    """The host's python as Ansible would pick it before running a module: ansible_python_interpreter,
    else the one discovered already, else interpreter_python (``auto*``: to be discovered)."""
    return task_vars.get("ansible_python_interpreter") or \
        (task_vars.get("ansible_facts") or {}).get("discovered_interpreter_python") or \
        C.config.get_config_value("INTERPRETER_PYTHON", variables=task_vars)


def enabled(environ=None):
    """False where the controller's environment turns light calls off (SWITCH=0)."""
    return (os.environ if environ is None else environ).get(SWITCH, "1").strip() != "0"


def light_python(action, task_vars):
    """The host's python when a light call can run on this connection, else None."""
    if not enabled():
        return None
    task_vars = task_vars or {}
    connection = action._connection
    if action._task.async_val or not getattr(connection, "has_pipelining", False):
        return None
    become = getattr(connection, "become", None)
    if become is not None and not getattr(become, "pipelining", True):
        return None
    python = configured_python(task_vars)
    if not python:
        return None
    python = action._templar.template(python)
    if not isinstance(python, str) or not python.startswith("/") or " " in python:
        return None
    return python


def parse_answer(answer):
    """The low-level command's answer -> the module's result, or a failure shaped like a module's
    that died without one (MODULE FAILURE, module_stdout, module_stderr, rc)."""
    stdout = answer.get("stdout") or ""
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except ValueError:
                break
            if isinstance(data, dict):
                return data
            break
    return {"failed": True, "msg": "MODULE FAILURE: no answer from the node (rc %s); see stdout/stderr"
            % answer.get("rc"), "module_stdout": stdout, "module_stderr": answer.get("stderr") or "",
            "rc": answer.get("rc")}


def run_light(action, module, entry, args, task_vars, python):
    """One light call of ``module`` (its logic: ``entry``.run_module) with ``args`` -> its result."""
    params, no_log_values, error, paths = validate(entry, args, module)
    if error:
        return {"failed": True, "msg": error}
    cmd = action._connection._shell.build_module_command(action._compute_environment_string(), python, "-")
    text = script(entry, params, action._task.check_mode, no_log_values, paths)
    answer = action._low_level_execute_command(cmd, sudoable=True, in_data=text.encode("utf-8"))
    return parse_answer(answer)


def run_module(action, module, entry, args, task_vars):
    """``module`` with ``args``: light where it can run (light_python), else the usual module call.
    ``module`` must be one of ENTRIES, with ``entry`` its entry (the rule the tests check is theirs)."""
    if ENTRIES.get(module) != entry:
        raise ValueError("%s: not a light module with entry %s; valid: %s" % (module, entry, ", ".join(sorted(ENTRIES))))
    python = light_python(action, task_vars)
    if python is None:
        return action._execute_module(module_name=module, module_args=args, task_vars=task_vars)
    return run_light(action, module, entry, args, task_vars, python)
