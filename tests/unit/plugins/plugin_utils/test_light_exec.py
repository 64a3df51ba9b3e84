"""The light call (plugins/plugin_utils/_light_exec.py, plugins/module_utils/_node/light.py): the
controller's script, run by a real python on stdin, isolated (-I: no ansible, no collection on its
path), as a node's python runs it."""
import inspect
import json
import os
import subprocess
import sys

import pytest

from ansible_collections.multinode.training.plugins.module_utils._node import light as _light
from ansible_collections.multinode.training.plugins.module_utils._node import supervisor as _torchrun_supervisor
from ansible_collections.multinode.training.plugins.plugin_utils import _light_exec

ACCESS = "ansible_collections.multinode.training.plugins.module_utils._train.access"
TORCHRUN = "ansible_collections.multinode.training.plugins.module_utils._torchrun.job"
STDLIB = set(sys.stdlib_module_names) | {"__future__"}


def node_python(text):
    """``text`` on stdin of an isolated python -> (rc, the JSON answer or None, stderr)."""
    done = subprocess.run([sys.executable, "-I", "-"], input=text.encode(), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, check=False, cwd="/")
    answer = _light_exec.parse_answer({"rc": done.returncode, "stdout": done.stdout.decode(),
                                       "stderr": done.stderr.decode()})
    return done.returncode, answer, done.stderr.decode()


def light(entry, args, name, check_mode=False):
    params, secrets, error, paths = _light_exec.validate(entry, args, name)
    assert error is None, error
    return node_python(_light_exec.script(entry, params, check_mode, secrets, paths))


@pytest.mark.parametrize("entry", [ACCESS, TORCHRUN])
def test_the_sources_are_the_entry_and_what_it_imports_and_need_only_the_standard_library(entry):
    sources = _light_exec.module_sources(entry)
    assert entry in sources
    if entry == TORCHRUN:
        # shipped into the job directory with inspect.getsource: must travel too
        for name in ("_node.supervisor", "_node.watch", "_node.rankwrap", "_node.torchrun"):
            assert _light.PACKAGE + "." + name in sources
    for name, source in sources.items():
        for imported in _light_exec.imports(source):
            assert imported in sources, (name, imported)
        # beyond the collection's module_utils: the standard library only (no ansible.module_utils)
        tree = __import__("ast").parse(source)
        for node in __import__("ast").walk(tree):
            if isinstance(node, __import__("ast").Import):
                names = [a.name for a in node.names]
            elif isinstance(node, __import__("ast").ImportFrom) and node.level == 0:
                names = [node.module]
            else:
                continue
            for mod in names:
                assert mod.startswith(_light.PACKAGE) or mod.split(".")[0] in STDLIB, (name, mod)


# module_utils (the folder above _node/) and its subpackages: what ``from <package> import`` names
ROOT = os.path.dirname(os.path.dirname(_light.__file__))
PACKAGES = {_light.PACKAGE} | {_light.PACKAGE + "." + name for name in os.listdir(ROOT)
                               if os.path.isfile(os.path.join(ROOT, name, "__init__.py"))}


def ast_imports(source):
    import ast
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith(_light.PACKAGE + "."))
        elif isinstance(node, ast.ImportFrom) and node.module in PACKAGES:
            found.update(node.module + "." + a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(_light.PACKAGE + "."):
            found.add(node.module)
    return found


def test_the_import_scan_finds_what_python_s_parser_finds_in_every_module_utils_file():
    scanned = 0
    for folder, _dirs, names in os.walk(ROOT):
        for name in sorted(names):
            if name.endswith(".py"):
                with open(os.path.join(folder, name)) as handle:
                    source = handle.read()
                assert set(_light_exec.imports(source)) == ast_imports(source), name
                scanned += bool(ast_imports(source))
    assert scanned >= 10
    # the forms: one line, parenthesized over lines, a submodule, `import`
    text = ("from %s import (\n    _a,\n    _b as b,  # note\n)\nfrom %s._c import x\nimport %s._d\n"
            "from %s import _e, _f\nfrom %s._node import (watch,\n    supervisor as sup)\n" % ((_light.PACKAGE,) * 5))
    assert sorted(_light_exec.imports(text)) == [_light.PACKAGE + "." + n for n in (
        "_a", "_b", "_c", "_d", "_e", "_f", "_node.supervisor", "_node.watch")]


def test_train_access_runs_light_and_finds_the_port_collision(tmp_path):
    sshd = tmp_path / "sshd_config"
    sshd.write_text("Port 2222\n")
    rc, answer, err = light(ACCESS, {"port": 2222, "sshd_config": str(sshd), "firewall": "false"}, "train_access")
    assert rc == 0, err
    assert answer["ssh_ports"] == [2222]
    assert len(answer["problems"]) == 1 and "2222" in answer["problems"][0]
    rc, answer, err = light(ACCESS, {"port": 29400, "sshd_config": str(sshd), "firewall": "false"}, "train_access")
    assert rc == 0 and answer["problems"] == [] and answer["changed"] is False, (answer, err)


def test_train_access_fails_naming_the_node_on_problems(tmp_path):
    sshd = tmp_path / "sshd_config"
    sshd.write_text("Port 2222\n")
    args = {"port": 2222, "sshd_config": str(sshd), "firewall": "false", "node": "node2", "fail_on_problems": True}
    rc, answer, err = light(ACCESS, args, "train_access")
    assert rc == 0, err
    assert answer["failed"] is True and answer["msg"] == "node2: " + "; ".join(answer["problems"])
    assert "train_rdzv_port=2222" in answer["msg"] and answer["ssh_ports"] == [2222]
    # no problem: no failure
    rc, answer, err = light(ACCESS, dict(args, port=29400), "train_access")
    assert rc == 0 and not answer.get("failed") and answer["problems"] == [], (answer, err)
    # without fail_on_problems the problems are returned, not failed with
    rc, answer, err = light(ACCESS, dict(args, fail_on_problems=False), "train_access")
    assert rc == 0 and not answer.get("failed") and len(answer["problems"]) == 1, (answer, err)


def test_train_access_bad_checks_fail_as_the_module_does(tmp_path):
    rc, answer, _err = light(ACCESS, {"port": 29400, "checks": [{"path": "/x", "need": "fly"}]}, "train_access")
    assert rc == 0 and answer["failed"] is True
    assert answer["msg"].startswith("checks: ") and "x|r|rx|w" in answer["msg"]


def test_torchrun_stop_of_an_unknown_job_runs_light(tmp_path):
    rc, answer, err = light(TORCHRUN, {"state": "stopped", "job_id": "nojob", "log_dir": str(tmp_path)}, "torchrun")
    assert rc == 0, err
    assert "failed" not in answer or not answer["failed"], answer
    assert answer["changed"] is False


def test_a_shipped_source_is_readable_with_inspect_and_equals_the_file():
    """The torchrun module writes supervisor.py, mt_watch.py and mt_rank.py from
    inspect.getsource of its module_utils: that must work on sources that travelled in memory."""
    entry = _light.PACKAGE + "._probe_source"
    sources = dict(_light_exec.module_sources(_light.PACKAGE + "._node.supervisor"))
    sources[entry] = ("import inspect\nfrom %s._node import supervisor as _torchrun_supervisor\n\n"
                      "def run_module(module):\n"
                      "    module.exit_json(src=inspect.getsource(_torchrun_supervisor))\n" % _light.PACKAGE)
    with open(_light.__file__) as handle:
        text = handle.read()
    payload = {"sources": sources, "entry": entry, "params": {}, "check_mode": False, "no_log_values": []}
    rc, answer, err = node_python("%s\n\nmain(%r)\n" % (text, _light.pack(payload)))
    assert rc == 0, err
    assert answer["src"] == inspect.getsource(_torchrun_supervisor)


def test_no_log_values_never_leave_the_node_and_a_crash_is_a_module_failure():
    entry = _light.PACKAGE + "._probe_secret"
    source = ("def run_module(module):\n"
              "    module.fail_json(msg='token s3cr3t-value refused', env={'TOKEN': 's3cr3t-value'})\n")
    payload = {"sources": {entry: source},
               "entry": entry, "params": {}, "no_log_values": ["s3cr3t-value"]}
    with open(_light.__file__) as handle:
        text = handle.read()
    rc, answer, _err = node_python("%s\n\nmain(%r)\n" % (text, _light.pack(payload)))
    assert rc == 0
    assert answer == {"failed": True, "msg": "token ******** refused", "env": {"TOKEN": "********"}}
    payload["sources"][entry] = "def run_module(module):\n    raise RuntimeError('boom')\n"
    rc, answer, err = node_python("%s\n\nmain(%r)\n" % (text, _light.pack(payload)))
    assert rc == 1 and "RuntimeError: boom" in err
    assert answer["failed"] is True and answer["msg"].startswith("MODULE FAILURE") and "boom" in answer["module_stderr"]


def test_validation_is_the_module_s_own():
    params, _secrets, error, _paths = _light_exec.validate(ACCESS, {"port": "29400"}, "train_access")
    assert error is None and params["port"] == 29400 and params["firewall"] == "auto" and params["checks"] == []
    assert _light_exec.validate(ACCESS, {"port": 1, "colour": "red"}, "train_access")[2] == \
        "Unsupported parameters for (train_access) module: colour. Supported parameters include: checks, " \
        "create, directories, fail_on_problems, firewall, group, job, listen, node, port, probe, ssh_ports, " \
        "sshd_config, user, user_groups."
    assert "missing required arguments: port" in _light_exec.validate(ACCESS, {}, "train_access")[2]
    error = _light_exec.validate(TORCHRUN, {"script": "a.py", "module": "b", "job_id": "j"}, "torchrun")[2]
    assert "mutually exclusive" in error


def test_light_module_run_command_and_get_bin_path(tmp_path):
    module = _light.LightModule({})
    rc, out, err = module.run_command(["cat"], data="line")
    assert (rc, out, err) == (0, "line\n", "")
    assert module.run_command(["cat"], data=b"raw", binary_data=True)[1] == "raw"
    assert module.run_command(["sh", "-c", "exit 3"])[0] == 3
    # as AnsibleModule: ~ and $VAR expanded in each argument, None dropped
    os.environ["LIGHT_TEST"] = "value"
    try:
        assert module.run_command(["echo", "$LIGHT_TEST", None, "~"])[1] == "value %s\n" % os.path.expanduser("~")
    finally:
        del os.environ["LIGHT_TEST"]
    # a command that cannot start fails the module, as AnsibleModule's does
    answer = {}
    failing = _light.LightModule({}, answer=answer)
    with pytest.raises(_light._Exit):
        failing.run_command([str(tmp_path / "missing")])
    assert answer["failed"] is True and answer["msg"] == "Error executing command." and answer["rc"] == 2
    assert module.get_bin_path("sh") and os.path.isabs(module.get_bin_path("sh"))
    assert module.get_bin_path("no-such-tool-here") is None
    with pytest.raises(TypeError):
        module.run_command("echo shell string")


def test_parse_answer_takes_the_last_json_line():
    assert _light_exec.parse_answer({"rc": 0, "stdout": "noise\n{\"a\": 1}\n"}) == {"a": 1}
    failed = _light_exec.parse_answer({"rc": 127, "stdout": "", "stderr": "python: not found"})
    assert failed["failed"] and failed["module_stderr"] == "python: not found" and "module_stdout" in failed
    assert json.dumps(failed)


class _Stub(object):
    def __init__(self, **kw):
        self.__dict__.update(kw)


def _action(pipelining=True, become=None, async_val=0):
    return _Stub(_task=_Stub(async_val=async_val), _connection=_Stub(has_pipelining=pipelining, become=become),
                 _templar=_Stub(template=lambda value: value))


@pytest.mark.parametrize("action, task_vars, expected", [
    (_action(), {"ansible_python_interpreter": "/usr/bin/python3"}, "/usr/bin/python3"),
    (_action(), {"ansible_facts": {"discovered_interpreter_python": "/usr/bin/python3.11"}}, "/usr/bin/python3.11"),
    # not known yet (interpreter_python's default is auto): the module call discovers it
    (_action(), {}, None),
    (_action(), {"ansible_python_interpreter": "python3"}, None),
    (_action(), {"ansible_python_interpreter": "/usr/bin/env python3"}, None),
    # a connection that cannot take stdin, su (no pipelining), an async task
    (_action(pipelining=False), {"ansible_python_interpreter": "/usr/bin/python3"}, None),
    (_action(become=_Stub(pipelining=False)), {"ansible_python_interpreter": "/usr/bin/python3"}, None),
    (_action(become=_Stub(pipelining=True)), {"ansible_python_interpreter": "/usr/bin/python3"}, "/usr/bin/python3"),
    (_action(async_val=30), {"ansible_python_interpreter": "/usr/bin/python3"}, None),
])
def test_where_a_light_call_can_run(action, task_vars, expected):
    assert _light_exec.light_python(action, task_vars) == expected


def test_paths_are_expanded_on_the_node_not_on_the_controller(tmp_path):
    """``~`` and ``$VAR`` in a path option are the node's (its HOME, its environment), as with the
    module; the controller only checks the type."""
    params, _secrets, error, paths = _light_exec.validate(
        TORCHRUN, {"job_id": "j", "log_dir": "~/logs", "env_files": ["$NODE_ONLY/a.env", "/b.env"], "nnodes": "1"},
        "torchrun")
    assert error is None and params["log_dir"] == "~/logs" and params["env_files"][0] == "$NODE_ONLY/a.env"
    assert {"log_dir", "env_files", "script", "python", "chdir", "venv", "archive"} <= set(paths)
    os.environ["NODE_ONLY"] = "/node"
    try:
        expanded = _light.expand_paths(dict(params), paths)
    finally:
        del os.environ["NODE_ONLY"]
    assert expanded["log_dir"] == os.path.expanduser("~/logs") and expanded["env_files"] == ["/node/a.env", "/b.env"]
    # no path option hides in a sub-spec of a light module (only top-level ones are expanded)
    for entry in (ACCESS, TORCHRUN):
        for option in __import__("importlib").import_module(entry).ARGUMENT_SPEC.values():
            for sub in (option.get("options") or {}).values():
                assert "path" not in (sub.get("type"), sub.get("elements")), (entry, option)


def test_a_working_directory_that_cannot_be_read_is_left_for_home_as_ansiblemodule_does(tmp_path):
    """A become user may start where it cannot read (or in a directory removed since); what the
    module starts inherits the cwd. Here: a removed one (root reads any existing one)."""
    gone = tmp_path / "gone"
    gone.mkdir()
    code = ("import os, sys; sys.path.insert(0, %r); import light; os.chdir(%r); os.rmdir(%r); "
            "print(light.readable_cwd(), os.getcwd())" % (os.path.dirname(_light.__file__), str(gone), str(gone)))
    done = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          env=dict(os.environ, HOME=str(tmp_path)), check=False)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().split() == [str(tmp_path), str(tmp_path)]
    # a readable one is kept
    assert _light.readable_cwd() == os.getcwd()


def test_a_secret_inside_a_longer_one_leaves_nothing_of_the_longer_one():
    assert _light.remove_values({"msg": "x abcdef", "n": 3, "l": ("abc",)}, ["abc", "abcdef", ""]) == \
        {"msg": "x ********", "n": 3, "l": ["********"]}
    assert _light.remove_values({"n": 3}, []) == {"n": 3}


@pytest.mark.parametrize("entry", [ACCESS, TORCHRUN])
def test_prepare_warms_the_process_once_for_every_call_after_it(entry):
    """prepare (run when ansible-playbook imports the action, before it forks a worker per node):
    the entry imported, its sources packed once; each call's script carries them as packed then,
    beside its own arguments, and the node's python runs it (covered end to end above)."""
    _light_exec._PACKED.pop(entry, None)
    _light_exec.prepare(entry)
    packed = _light_exec._PACKED[entry]
    assert entry in sys.modules
    assert _light.unpack(packed) == _light_exec.module_sources(entry)
    text = _light_exec.script(entry, {"a": 1}, False, ["s3cret"], ["p"])
    rest = {"entry": entry, "params": {"a": 1}, "paths": ["p"], "check_mode": False, "no_log_values": ["s3cret"]}
    assert text.endswith("\n\nmain(%r, %r, %r)\n" % (_light.pack(rest), packed, _light_exec._CODE[entry]))
    assert _light_exec._PACKED[entry] is packed


def test_the_light_actions_prepare_their_entry_on_import():
    from ansible_collections.multinode.training.plugins.action import torchrun, train_access

    for action in (torchrun, train_access):
        assert action.ENTRY in _light_exec._PACKED


def test_the_node_runs_the_controller_s_compiled_code_where_the_magic_number_is_the_same():
    """The sources travel compiled too: where the node's Python has the controller's bytecode magic
    number the shipped code runs (no compile on every node), elsewhere the sources are compiled there.
    The compiled code here says something else than the source, to tell which one ran."""
    entry = _light.PACKAGE + "._probe_code"
    sources = {entry: "def run_module(module):\n    module.exit_json(ran='source')\n"}
    code = _light.pack_code({entry: "def run_module(module):\n    module.exit_json(ran='compiled')\n"})
    assert code[0] == _light.magic()
    payload = {"sources": sources, "entry": entry, "params": {}, "check_mode": False, "no_log_values": []}
    with open(_light.__file__) as handle:
        text = handle.read()
    for shipped, ran in ((code, "compiled"), (("0000", code[1]), "source"), (None, "source"),
                         ((code[0], "not a blob"), "source")):
        rc, answer, err = node_python("%s\n\nmain(%r, None, %r)\n" % (text, _light.pack(payload), shipped))
        assert rc == 0, err
        assert answer == {"ran": ran}, (shipped[0] if shipped else None, answer)


@pytest.mark.parametrize("entry", [ACCESS, TORCHRUN])
def test_the_compiled_sources_are_the_sources(entry):
    """packed_code compiles exactly the sources that travel (same names, same file names)."""
    _light_exec._CODE.pop(entry, None)
    code = _light.unpack_code(_light_exec.packed_code(entry))
    sources = _light_exec.module_sources(entry)
    assert sorted(code) == sorted(sources)
    for name, source in sources.items():
        assert code[name].co_filename == _light.origin(name)
        assert code[name].co_code == _light.compile_source(name, source).co_code
