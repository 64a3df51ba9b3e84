# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The validator: types without coercion, one-line values, env mappings, the message shape."""
from __future__ import annotations

import collections
import pathlib
import re

import pytest
import yaml

from ansible_collections.multinode.training.plugins.module_utils._validate import engine as v
from ansible_collections.multinode.training.plugins.module_utils._validate import rules as r

ROOT = pathlib.Path(__file__).resolve().parents[5]
SHAPE = re.compile(r"^([^ :]+(, [^ :]+)*: )?[A-Za-z_][A-Za-z0-9_]*(\[[^\]]+\])*=.+: .+; valid: .+$")


def check_option(variable, value, spec):
    """The problems alone, as the validate module reports them."""
    return v.check_option_typed(variable, value, spec)[0]


def lines(problems):
    return [p.line() for p in problems]


# ---------------------------------------------------------------- show

@pytest.mark.parametrize("value, shown", [
    ("maybe", '"maybe"'),
    ("a\nb", '"a\\nb"'),
    ("nul\x00", '"nul\\u0000"'),
    (b"/usr/bin/python9", '"/usr/bin/python9"'),
    (None, "null"),
    (True, "true"),
    (4, "4"),
    (["a", 1], '["a", 1]'),
    ({"K": "v"}, '{"K": "v"}'),
    ("x" * 500, '"' + "x" * 116 + "..."),
    ("\x1b[31m", '"\\u001b[31m"'),
])
def test_show_is_one_safe_line(value, shown):
    assert v.show(value) == shown
    assert "\n" not in v.show(value)


def test_show_converts_mapping_subclasses_and_unknown_objects():
    ordered = collections.OrderedDict([("b", 1), ("a", 2)])
    assert v.show(ordered) == '{"b": 1, "a": 2}'
    assert v.show(object()) == '"<a value of another kind>"'


def test_secret_keys_are_masked_in_messages():
    problem = v.Problem('train_env["HF_TOKEN"]', "abc\ndef", "holds a newline", "one line")
    assert "abc" not in problem.line()
    assert v.MASK in problem.line()
    assert "abc" in v.Problem('train_env["HOME"]', "abc", "x", "y").line()


def test_message_shape_and_hosts():
    problem = v.Problem("train_interface", "eth9", "no such interface", "eth0", hosts=["n1", "n2"])
    assert problem.line() == 'n1, n2: train_interface="eth9": no such interface; valid: eth0'
    assert SHAPE.match(problem.line())


# ---------------------------------------------------------------- types, no coercion

@pytest.mark.parametrize("kind, value", [
    ("str", "x"), ("str", 12), ("str", ""),
    ("int", 3), ("int", "3"), ("int", "-1"), ("int", " 7 "),
    ("float", 1.5), ("float", "1e3"), ("float", 2),
    ("bool", True), ("bool", "yes"), ("bool", "False"), ("bool", 0),
    ("list", []), ("list", ["a"]),
    ("dict", {}), ("dict", collections.OrderedDict()),
    ("path", "/abs"),
    ("raw", None),
    ("scalar", "s"), ("scalar", 1.5),
])
def test_types_accept(kind, value):
    assert v.check_type("x", value, kind) == []


@pytest.mark.parametrize("kind, value, what", [
    ("str", None, "null, not a string"),
    ("str", {"a": 1}, "a mapping, not a string"),
    ("str", ["a"], "a list, not a string"),
    ("str", True, "a boolean, not a string"),
    ("str", 0.2, "a number, not a string (quote it"),
    ("int", "many", "a string, not an integer"),
    ("int", True, "a boolean, not an integer"),
    ("int", 1.5, "a number, not an integer"),
    ("int", None, "null, not an integer"),
    ("float", "fast", "a string, not a number"),
    ("bool", "maybe", "not a boolean"),
    ("bool", 2, "an integer, not a boolean"),
    ("bool", None, "null, not a boolean"),
    ("list", "cpu_adam", "a string, not a list"),
    ("list", {"a": 1}, "a mapping, not a list"),
    ("list", None, "null, not a list"),
    ("dict", ["a"], "a list, not a mapping"),
    ("dict", "A=1", "a string, not a mapping"),
    ("path", "logs", "a relative path"),
    ("path", "", "empty"),
    ("path", 5, "an integer, not a path"),
    ("scalar", None, "null, not a string or a number"),
    ("scalar", True, "a boolean, not a string or a number"),
    ("scalar", ["a"], "a list, not a string or a number"),
])
def test_types_refuse_without_coercion(kind, value, what):
    problems = v.check_type("x", value, kind)
    assert len(problems) == 1
    assert problems[0].what.startswith(what)
    assert problems[0].valid == v.VALID_BY_TYPE[kind]
    assert SHAPE.match(problems[0].line())


def test_empty_path_allowed_only_when_the_default_is_empty():
    assert v.check_type("train_chdir", "", "path", default="") == []
    assert v.check_type("train_log_dir", "", "path", default="/var/log") != []


# ---------------------------------------------------------------- options

def test_list_elements_are_checked_each_with_its_index():
    spec = {"type": "list", "elements": "str"}
    assert lines(check_option("ops", ["a", None, {"b": 1}], spec)) == [
        'ops[1]=null: null, not a string; valid: a string',
        'ops[2]={"b": 1}: a mapping, not a string; valid: a string',
    ]
    paths = {"type": "list", "elements": "path"}
    assert [p.variable for p in check_option("files", ["/a", "b", ""], paths)] == ["files[1]", "files[2]"]


@pytest.mark.parametrize("spec, value, ok", [
    ({"type": "str", "choices": ["c10d", "etcd"]}, "c10d", True),
    ({"type": "str", "choices": ["c10d", "etcd"]}, "zookeeper", False),
    ({"type": "int", "choices": [4, 6]}, "6", True),
    ({"type": "int", "choices": [4, 6]}, 5, False),
    ({"type": "str", "choices": ["", "INFO"]}, "", True),
    ({"type": "list", "elements": "str", "choices": ["a", "b"]}, ["a", "c"], False),
])
def test_choices(spec, value, ok):
    assert (check_option("x", value, spec) == []) is ok


def test_choices_message_lists_them():
    (problem,) = check_option("train_rdzv_backend", "zk", {"type": "str", "choices": ["c10d", "etcd", "static"]})
    assert problem.line() == 'train_rdzv_backend="zk": not one of the choices; valid: one of c10d, etcd, static'


@pytest.mark.parametrize("value", ["a\nb", "a\rb", "a\x00b", ["ok", "x\ny"], {"K": "v\n"}, {"K\n": "v"}])
def test_no_newline_or_nul_anywhere(value):
    problems = v.one_line("var", value)
    assert problems and all("holds a" in p.what for p in problems)


def test_one_line_names_the_item():
    problems = check_option("nccl_tuning_overrides", {"NCCL_X": "a\nNCCL_Y=1"}, {"type": "dict"})
    assert lines(problems) == ['nccl_tuning_overrides["NCCL_X"]="a\\nNCCL_Y=1": holds a newline (it would end up '
                               'in a file, environment or command line on the nodes); valid: a single line '
                               'without NUL']


# ---------------------------------------------------------------- env mappings

def test_env_mapping_keys_values_and_visible_conversion():
    problems, notes = v.check_env_mapping("train_env", {"OK": "1", "N": 4, "F": 1.5, "BAD KEY": "x", "B": True,
                                                        "L": [1], "Z": None})
    assert sorted(p.variable for p in problems) == ['train_env["B"]', 'train_env["BAD KEY"]', 'train_env["L"]',
                                                    'train_env["Z"]']
    assert notes == ['train_env["N"]=4 is a number: passed as the string "4"',
                     'train_env["F"]=1.5 is a number: passed as the string "1.5"']


def test_env_mapping_null_removes_when_allowed():
    problems, _notes = v.check_env_mapping("nccl_tuning_env", {"A": None}, allow_null=True)
    assert problems == []


# ---------------------------------------------------------------- validate and merge

def test_validate_runs_rules_only_on_typed_values_and_reports_required():
    specs = {"a_port": {"type": "int"}, "a_name": {"type": "str", "required": True}}
    rules = {"a_port": [lambda n, val, vals, ctx: v.check_range(n, val, 1, 65535)]}
    assert lines(v.validate(specs, {"a_port": "70000"}, rules)) == [
        'a_name=null: not set; valid: required: a string',
        'a_port="70000": out of range; valid: 1-65535',
    ]
    assert lines(v.validate(specs, {"a_port": "x", "a_name": "n"}, rules)) == [
        'a_port="x": a string, not an integer; valid: an integer']


def test_merge_hosts_names_hosts_only_when_not_all():
    same = v.Problem("a", 1, "bad", "good")
    only = v.Problem("b", "eth9", "bad", "good")
    merged = v.merge_hosts({"n1": [same, only], "n2": [same]}, ["n1", "n2"])
    assert lines(merged) == ["a=1: bad; valid: good", 'n1: b="eth9": bad; valid: good']


# ---------------------------------------------------------------- the rules of this collection

def _specs():
    specs = {}
    for spec_file in sorted(ROOT.glob("roles/*/meta/argument_specs.yml")):
        specs.update(yaml.safe_load(spec_file.read_text())["argument_specs"]["main"]["options"])
    return specs


def _defaults():
    values = {}
    for defaults in sorted(ROOT.glob("roles/*/defaults/main.yml")):
        values.update(yaml.safe_load(defaults.read_text()) or {})
    return values


def test_every_rule_names_a_variable_of_some_argument_spec():
    assert sorted(set(r.RULES) - set(_specs())) == []


def test_defaults_without_templates_are_valid():
    values = {k: val for k, val in _defaults().items() if "{{" not in str(val)}
    assert lines(v.validate(_specs(), values, r.RULES, {"hosts": ["h"]}, r.MAY_BE_EMPTY)) == []


CASES = [
    # (variable, value, hosts, part of the message)
    ("train_nnodes", "3", ["a", "b"], "does not fit the 2 host(s) of the play (a, b); valid: 2 (the hosts"),
    ("train_nnodes", "2:1", ["a"], "MIN must be 1 or more"),
    ("train_nnodes", "0", ["a"], "MIN must be 1 or more"),
    ("train_nnodes", "two", ["a"], "not a node count"),
    ("train_nproc_per_node", "0", [], "not a process count"),
    ("train_nproc_per_node", "gpu", [], "valid: auto (GPU count) or a positive integer"),
    ("train_rdzv_port", 0, [], "out of range; valid: 1-65535"),
    ("train_rdzv_port", 65536, [], "out of range; valid: 1-65535"),
    ("train_timeout", -1, [], "valid: 0 or more"),
    ("train_job_id", "../x", [], "it names a directory"),
    ("train_module", "pkg train", [], "a module name"),
    ("train_interface", "eth0 eth1", [], "an interface name"),
    ("train_rdzv_conf", {"join_timeout": "1,2"}, [], "holds ',' or '='"),
    ("train_rdzv_conf", {"a-b": 1}, [], "is not a name"),
    ("train_args", ["--lr", None], [], 'train_args[1]=null: null, not a string or a number'),
    ("train_args", ["--flag", True], [], "a boolean, not a string or a number"),
    ("deepspeed_build_cuda_arch_list", "7.5;foo", [], "'foo' is not a compute capability"),
    ("deepspeed_build_cuda_arch_list", ";", [], "empty"),
    ("deepspeed_build_ops", ["cpu adam"], [], "not an op name"),
    ("toolchain_gcc_version", "gcc-12", [], "not a gcc major version"),
    ("toolchain_nvcc", "nvcc", [], "neither empty, none nor an absolute path"),
    ("wheel_distribute_index_url", "pypi.org", [], "http(s)://"),
    ("nccl_tuning_nccl_version", "latest", [], "auto or a version"),
    ("nccl_tuning_socket_ifname", "eth0 eth1", [], "NCCL_SOCKET_IFNAME syntax"),
    ("nccl_tuning_user", "bad user", [], "a user name"),
    ("nccl_tuning_overrides", {"IB_HCA": "x"}, [], "NCCL_* names in capitals"),
    ("nccl_tuning_tests", {"min_bw": -1}, [], 'nccl_tuning_tests["min_bw"]=-1: out of range; valid: 0 or more'),
    ("nccl_tuning_tests", {"gpu": 8}, [], "not one of the check's; valid: keys among bin, args, gpus, min_bw"),
    ("nccl_tuning_tests", {"bin": "all_reduce_perf"}, [], 'nccl_tuning_tests["bin"]="all_reduce_perf": a relative'),
    ("nccl_tuning_tests", {"args": ["-b", None]}, [], 'nccl_tuning_tests["args"][1]=null'),
    ("train_venv", "/", [], "the root directory"),
    ("train_rdzv_port", 22, [], 'train_rdzv_port=22: collides with ssh (port 22); valid: a free port'),
    ("train_rdzv_port", "22", [], "collides with ssh"),
    ("train_user", "root", [], 'train_user="root": the job (your script and everything it imports) would run as root'),
    ("train_user", "Bad User", [], "cannot be created, not a valid account name"),
    ("train_group", "Bad Group", [], "a group name"),
    ("train_firewall", "maybe", [], "not auto or a boolean"),
    ("train_progress_interval", 0, [], "valid: 1 or more"),
]


@pytest.mark.parametrize("name, value, hosts, expected", CASES, ids=[c[0] + "=" + str(c[1]) for c in CASES])
def test_rules(name, value, hosts, expected):
    specs = _specs()
    problems = v.validate({name: specs[name]}, {name: value}, r.RULES, {"hosts": hosts})
    assert problems, "%s=%r accepted" % (name, value)
    text = "\n".join(lines(problems))
    assert expected in text
    assert all(SHAPE.match(line) for line in lines(problems))


def test_rdzv_port_of_the_hosts_ssh_and_root_only_when_allowed():
    specs = _specs()

    def run(values, ctx):
        return lines(v.validate({n: specs[n] for n in values}, values, r.RULES, ctx))

    assert run({"train_rdzv_port": 2222}, {"ssh_ports": [2222]})[0].startswith(
        "train_rdzv_port=2222: collides with ssh (port 22, 2222); valid:")
    assert run({"train_rdzv_port": 29400}, {"ssh_ports": ["2222"]}) == []
    assert run({"train_rdzv_port": 22}, {"ssh_ports": ["{{ templated }}"]}) != []
    assert run({"train_user": "root", "train_allow_root": True}, {}) == []
    assert run({"train_user": "root", "train_allow_root": False}, {}) != []
    # every word the boolean type accepts means what it says (as_bool), "on" and "y" as well
    assert run({"train_user": "root", "train_allow_root": "on"}, {}) == []
    assert run({"train_user": "root", "train_allow_root": "y"}, {}) == []
    assert run({"train_user": "root", "train_allow_root": "off"}, {}) != []
    assert run({"train_user": "", "train_allow_root": False}, {}) == []
    assert run({"train_user": "alice", "train_firewall": "true"}, {}) == []


def test_deepspeed_source_names_the_variable_at_fault():
    specs = _specs()
    names = ["deepspeed_build_source", "deepspeed_build_version", "deepspeed_build_git_repo",
             "deepspeed_build_git_ref", "deepspeed_build_local_path"]
    base = {"deepspeed_build_version": "0.19.8", "deepspeed_build_git_repo": "https://x/y.git",
            "deepspeed_build_git_ref": "v1", "deepspeed_build_local_path": ""}

    def run(**values):
        return [p.variable for p in v.validate({n: specs[n] for n in names}, dict(base, **values), r.RULES, {})]

    assert run(deepspeed_build_source="pypi", deepspeed_build_version="latest!") == ["deepspeed_build_version"]
    assert run(deepspeed_build_source="git", deepspeed_build_git_ref="") == ["deepspeed_build_git_ref"]
    assert run(deepspeed_build_source="local") == ["deepspeed_build_local_path"]
    assert run(deepspeed_build_source="local", deepspeed_build_local_path="src") == ["deepspeed_build_local_path"]
    assert run(deepspeed_build_source="pypi") == []


def test_code_src_must_exist_on_the_controller(tmp_path):
    rule = r.RULES["train_code_src"][0]
    assert rule("train_code_src", str(tmp_path / "nope.py"), {}, {})
    assert rule("train_code_src", "", {}, {}) == []
    assert rule("train_code_src", str(tmp_path), {}, {}) == []


def test_requirements_include_a_controller_file_with_pips_r(tmp_path, monkeypatch):
    """train_requirements / wheel_distribute_requirements: PEP 508 items and pip's ``-r <path>`` (the former
    train_requirements_file), the file on the controller, relative from the working directory."""
    specs = _specs()
    (tmp_path / "requirements.txt").write_text("accelerate\n")
    monkeypatch.chdir(tmp_path)

    def run(name, value):
        return lines(v.validate({name: specs[name]}, {name: value}, r.RULES, {}))

    for name in ("train_requirements", "wheel_distribute_requirements"):
        assert run(name, ["six", "-r requirements.txt", "-r%s/requirements.txt" % tmp_path,
                          "--requirement=requirements.txt"]) == []
        problems = run(name, ["six", "-r missing.txt"])
        assert problems == ['%s[1]="-r missing.txt": no such file on the controller; valid: %s'
                            % (name, r.REQUIREMENTS_VALID)]
        assert all(SHAPE.match(line) for line in problems)
        assert "a pip option other than -r <path>" in run(name, ["-e ."])[0]
    assert "train_requirements_file" not in specs


# ---------------------------------------------------------------- the manifest on the controller

MANIFEST = {"schema": 1, "wheel": "w.whl", "wheel_sha256": "0" * 64, "deepspeed": {}, "accelerator": "cpu",
            "python": {}, "torch": {}, "ops": []}


def _manifest_values(tmp_path, **kw):
    values = {"wheel_distribute_manifest": "", "wheel_distribute_dist_dir": str(tmp_path)}
    values.update(kw)
    return values


def test_manifest_found_in_the_dist_dir(tmp_path):
    import json
    (tmp_path / "w.whl.manifest.json").write_text(json.dumps(MANIFEST))
    rule = r.RULES["wheel_distribute_dist_dir"][0]
    assert rule("wheel_distribute_dist_dir", str(tmp_path), _manifest_values(tmp_path), {}) == []


@pytest.mark.parametrize("content, what", [
    ('{"schema": 1, "wheel": "w.wh', "is not valid JSON (Unterminated string"),
    ("", "is not valid JSON"),
    ("[1]", "holds JSON list, not an object"),
    ('{"schema": 2}', "is not a schema 1 manifest (missing: wheel, wheel_sha256"),
    (b"\xff\xfe", "is not UTF-8 text"),
])
def test_broken_manifest_names_the_file(tmp_path, content, what):
    path = tmp_path / "w.whl.manifest.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    rule = r.RULES["wheel_distribute_dist_dir"][0]
    (problem,) = rule("wheel_distribute_dist_dir", str(tmp_path), _manifest_values(tmp_path), {})
    assert problem.variable == "wheel_distribute_dist_dir"
    assert problem.line().startswith('wheel_distribute_dist_dir="%s"' % path)
    assert what in problem.what


def test_missing_manifest_names_the_variable_that_points_at_it(tmp_path):
    rule = r.RULES["wheel_distribute_dist_dir"][0]
    (empty,) = rule("x", str(tmp_path), _manifest_values(tmp_path), {})
    assert "holds no *.whl.manifest.json" in empty.what
    (named,) = rule("x", str(tmp_path), _manifest_values(tmp_path, wheel_distribute_manifest=str(tmp_path / "m")), {})
    assert named.variable == "wheel_distribute_manifest" and "cannot be read" in named.what


@pytest.mark.parametrize("tags, only, skip, selected", [
    ({"prepare", "wheel_distribute"}, (), (), True),
    ({"prepare", "wheel_distribute"}, (), ("prepare",), False),
    ({"prepare", "validate"}, ("validate",), (), True),
    ({"prepare"}, ("train",), (), False),
    ({"train"}, ("tagged",), (), True),
    ({"always"}, ("x",), (), True),
    ({"always"}, (), ("all",), True),
    ({"always"}, (), ("always", "all"), False),
    ({"nccl"}, (), ("tagged",), False),
    (set(), (), ("tagged",), True),
])
def test_tags_selected_like_ansible(tags, only, skip, selected):
    assert v.tags_selected(tags, only, skip) is selected


@pytest.mark.parametrize("launcher, expected", [
    ("ssh", ['train_nnodes="3": does not fit the 2 host(s) of the play (a, b); valid: 2 (the hosts of the play), '
             'or MIN:MAX with 1 <= MIN <= 2 <= MAX']),
    # Slurm's partition (sinfo, before sbatch) and the platform decide the node count there.
    ("slurm", []),
    ("env", []),
])
def test_nnodes_against_the_play_hosts_only_for_the_ssh_launcher(launcher, expected):
    values = {k: val for k, val in _defaults().items() if "{{" not in str(val)}
    values.update(train_nnodes="3", train_launcher=launcher)
    assert lines(v.validate(_specs(), values, r.RULES, {"hosts": ["a", "b"]}, r.MAY_BE_EMPTY)) == expected


# ---------------------------------------------------------------- unknown variables

DECLARED = ["train_timeout", "train_tee", "train_env", "deepspeed_build_ops", "train_hosts"]
PREFIXES = ["deepspeed_build_", "toolchain_", "train_"]


def test_a_misspelled_variable_is_refused_naming_the_declared_one():
    problems = v.unknown_variables({"train_timout": 60, "train_tee": True}, DECLARED, PREFIXES)
    assert lines(problems) == ["train_timout=60: not a variable of this collection; valid: train_timeout"]
    assert SHAPE.match(problems[0].line())


def test_variables_without_a_role_prefix_and_declared_ones_pass():
    assert v.unknown_variables({"ansible_host": "x", "trainer": 1, "train_env": {}, "my_train_x": 1},
                               DECLARED, PREFIXES) == []


def test_no_close_name_points_at_the_role_specs():
    [problem] = v.unknown_variables({"deepspeed_build_zzz": 1}, DECLARED, PREFIXES)
    assert "roles/deepspeed_build/meta/argument_specs.yml" in problem.line()


def test_an_unknown_secret_looking_variable_is_not_shown():
    [problem] = v.unknown_variables({"train_wandb_api_key": "hunter2"}, DECLARED, PREFIXES)
    assert "hunter2" not in problem.line()


def test_every_role_variable_is_declared_in_the_collection():
    """What the action declares: every role's argument specs; a name the roles use with their
    prefix in defaults must be among them (else every play would refuse its own default)."""
    declared, prefixes = set(), []
    for specs in sorted(ROOT.glob("roles/*/meta/argument_specs.yml")):
        prefixes.append(specs.parent.parent.name + "_")
        for entry in yaml.safe_load(specs.read_text())["argument_specs"].values():
            declared.update(entry.get("options") or {})
    for defaults in sorted(ROOT.glob("roles/*/defaults/main.yml")):
        names = yaml.safe_load(defaults.read_text()) or {}
        assert v.unknown_variables(names, declared, prefixes) == [], defaults


def test_data_sync_items(tmp_path):
    rule = r.RULES["train_data_sync"][0]
    ok = str(tmp_path)
    assert rule("train_data_sync", [{"src": ok, "dest": "/data/a"}, {"src": ok, "dest": "/data/b/"}], {}, {}) == []
    lines = [p.line() for p in rule("train_data_sync", [
        {"src": ok, "dest": "/data"}, {"src": ok + "/nope", "dest": "/data/x"}, {"src": ok},
        {"src": ok, "dest": "data"}, {"src": ok, "dest": "/"}], {}, {})]
    assert [line.split("=")[0] for line in lines] == [
        "train_data_sync[1][src]", "train_data_sync[1][dest]", "train_data_sync[2]", "train_data_sync[3][dest]",
        "train_data_sync[4][dest]"]
    assert "the same as or inside train_data_sync[0][dest]=/data" in lines[1]
    slurm = rule("train_data_sync", [{"src": ok, "dest": "/data/a"}], {"train_launcher": "slurm"}, {})
    assert [p.line().split("=")[0] for p in slurm] == ["train_data_sync"]
    assert "only the ssh launcher brings data" in slurm[0].line()
