"""Unit tests for plugins/module_utils/_node/preflight.py (the probe and the cross-node comparison every launcher
uses: module train_node (probe) and filter train_preflight_problems, Slurm's slurm_node.py), _train/preflight.py
(the controller's code manifest, the module's probe) and env_probe.py.

The probe runs for real: this test interpreter stands in for the job's python.
"""
from __future__ import annotations

import copy
import os
import pwd
import hashlib
import json
import subprocess
import sys

import pytest

from ansible_collections.multinode.training.plugins.filter.train_preflight_problems import train_preflight_problems
from ansible_collections.multinode.training.plugins.module_utils._node import env_probe
from ansible_collections.multinode.training.plugins.module_utils._node import preflight as node_pre
from ansible_collections.multinode.training.plugins.module_utils._train import preflight as pre


def run(argv):
    done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
    return done.returncode, done.stdout, done.stderr


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    base = tmp_path_factory.mktemp("probe")
    script = base / "train.py"
    script.write_text("print('hi')\n")
    env = base / "job.env"
    env.write_text("A=1\n")
    result = pre.probe_node(sys.executable, run, str(script), str(base),
                            [{"var": "train_env_files", "path": str(env)},
                             {"var": "train_nccl", "path": str(base / "missing.env")}])
    return result, script


def test_probe_node_reads_everything_in_one_go(probe):
    result, script = probe
    assert result["python"] == {"path": sys.executable, "executable": True}
    env = result["environment"]
    assert env["python"] == sys.version.split()[0]
    assert any(p.lower().startswith("pytest==") for p in env["packages"])
    assert set(env) == {"python", "torch", "deepspeed", "ops", "packages"}
    assert result["script"] == {"path": str(script), "exists": True,
                                "sha256": hashlib.sha256(b"print('hi')\n").hexdigest()}
    assert result["chdir"]["isdir"] is True
    assert [f["exists"] for f in result["env_files"]] == [True, False]


def test_probe_node_without_python_or_script(tmp_path):
    result = pre.probe_node(str(tmp_path / "nope" / "python"), run, str(tmp_path / "x.py"), str(tmp_path / "d"))
    assert result["python"]["executable"] is False and result["environment"] is None
    assert result["script"] == {"path": str(tmp_path / "x.py"), "exists": False, "sha256": None}
    assert result["chdir"]["isdir"] is False and result["env_files"] == []
    assert pre.probe_node(sys.executable, lambda argv: (1, "", "Traceback\nImportError: x"), None)["probe_error"] \
        == "rc 1: ['ImportError: x']"


def test_env_probe_source_is_the_file_and_prints_the_probe():
    with open(env_probe.__file__) as handle:
        assert pre.env_probe_source() == handle.read()
    rc, out, _err = run([sys.executable, env_probe.__file__])
    assert rc == 0 and json.loads(out) == env_probe.probe()


def test_env_probe_reads_the_packages_importlib_metadata_reads():
    """The probe reads dist-info headers itself (no importlib.metadata import on the nodes): the same
    name==version set and versions as importlib.metadata, on this interpreter's installed packages."""
    from importlib import metadata
    assert env_probe.probe()["packages"] == \
        sorted({"%s==%s" % (dist.metadata["Name"], dist.version) for dist in metadata.distributions()})
    for name in ("pytest", "ansible-core", "jinja2", "PyYAML"):
        assert env_probe.version(name) == metadata.version(name)
    assert env_probe.version("no-such-project-xyz") is None


def _dist(folder, dirname, name, version, record=None):
    path = folder / dirname
    path.mkdir(parents=True)
    if name is not None:
        (path / ("METADATA" if dirname.endswith(".dist-info") else "PKG-INFO")).write_text(
            "Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: x\n\nName: not-a-header\n" % (name, version))
    if record is not None:
        (path / "RECORD").write_text("".join("%s,sha256=x,1\n" % line for line in record))


def test_env_probe_first_on_sys_path_wins_names_normalized_ops_from_record(tmp_path, monkeypatch):
    from importlib import metadata
    first, second = tmp_path / "first", tmp_path / "second"
    _dist(first, "DeepSpeed-0.19.8.dist-info", "deepspeed", "0.19.8",
          record=["deepspeed/ops/adam/cpu_adam_op.cpython-311-x86_64-linux-gnu.so", "deepspeed/__init__.py",
                  '"deepspeed/ops/comm/shm,odd/deepspeed_shm_comm_op.so"', "deepspeed/lib/not_an_op.so"])
    _dist(second, "deepspeed-0.18.0.dist-info", "deepspeed", "0.18.0")       # shadowed by the first
    _dist(second, "Foo.Bar-1.0.egg-info", "Foo.Bar", "1.0")
    _dist(second, "broken-0.1.dist-info", None, None)                       # no METADATA
    (second / "plain-2.0.egg-info").write_text("Metadata-Version: 1.1\nName: plain\nVersion: 2.0\n")
    monkeypatch.setattr(sys, "path", [str(first), str(tmp_path / "missing"), str(second)])
    out = env_probe.probe()
    assert out["deepspeed"] == "0.19.8" and out["torch"] is None
    assert out["ops"] == ["cpu_adam_op", "deepspeed_shm_comm_op"]
    assert out["packages"] == sorted({"%s==%s" % (d.metadata["Name"], d.version) for d in metadata.distributions()})
    assert out["packages"] == ["Foo.Bar==1.0", "None==None", "deepspeed==0.18.0", "deepspeed==0.19.8",
                               "plain==2.0"]
    assert env_probe.version("foo-bar") == metadata.version("foo-bar") == "1.0"
    assert env_probe.version("Plain") == "2.0"


def node(torch="2.13.0+cpu", deepspeed="0.19.8", ops=("cpu_adam_op",), packages=("torch==2.13.0+cpu",),
         sha="a" * 64, script_exists=True, executable=True, chdir=None, env_files=()):
    return {"python": {"path": "/v/bin/python", "executable": executable},
            "environment": {"python": "3.11.2", "torch": torch, "deepspeed": deepspeed, "ops": list(ops),
                            "packages": list(packages)} if executable else None,
            "probe_error": None,
            "script": {"path": "/c/train.py", "exists": script_exists, "sha256": sha if script_exists else None},
            "chdir": chdir, "env_files": list(env_files)}


HOSTS = ["n1", "n2", "n3"]


def test_compare_the_same_everywhere_is_no_problem():
    assert node_pre.compare({h: node() for h in HOSTS}, HOSTS, "n1", "/v") == []


def test_compare_names_each_problem_with_node_and_variable():
    probes = {"n1": node(), "n2": node(ops=(), sha="b" * 64, packages=("torch==2.13.0+cpu", "wheel==0.45.1")),
              "n3": node(executable=False, script_exists=False, chdir={"path": "/w", "isdir": False},
                         env_files=[{"var": "train_nccl", "path": "/etc/n.env", "exists": False}])}
    problems = node_pre.compare(probes, HOSTS, "n1", "/v")
    assert problems[0].startswith('n2: train_python="/v/bin/python": its environment {"deepspeed": "0.19.8", '
                                  '"ops": [], ')
    assert "differs from n1's" in problems[0]
    assert problems[1] == ('n2: train_script="/c/train.py": sha256 %s differs from n1\'s %s; valid: the same file on '
                           'all nodes (train_code_src is copied there)' % ("b" * 64, "a" * 64))
    assert problems[2].startswith('n3: train_python="/v/bin/python": missing or not executable on this node '
                                  '(train_venv="/v"); valid:')
    assert problems[3].startswith('n3: train_script="/c/train.py": missing on this node')
    assert problems[4].startswith('n3: train_chdir="/w": not a directory on this node')
    assert problems[5].startswith('n3: train_nccl="/etc/n.env": missing on this node')
    assert problems[6] == ("the venvs (/v) differ between the nodes: wheel: wheel==0.45.1 on n2; not installed on n1; "
                           "valid: the same package set on all nodes (wheel_distribute_requirements / "
                           "train_requirements install the job's packages on every node; run with tag prepare)")
    assert len(problems) == 7


def test_compare_refuses_an_op_the_deepspeed_config_needs_and_the_nodes_lack():
    """A ZeRO-2 config with optimizer Adam and no offload loads FusedAdam: the nodes have only cpu_adam
    prebuilt, so every rank would JIT-compile fused_adam at the first step. Named once, from the first node
    (the others equal it); train_allow_jit lets it through; an offloaded Adam needs the cpu_adam they have."""
    adam = {"optimizer": {"type": "Adam", "params": {"lr": 0.001}}, "zero_optimization": {"stage": 2}}
    config = {"text": json.dumps(adam), "path": "/c/ds.json"}
    probes = {h: node(ops=("cpu_adam_op", "deepspeed_shm_comm_op")) for h in HOSTS}
    problems = node_pre.compare(probes, HOSTS, "n1", "/v", deepspeed_config=config)
    assert len(problems) == 1 and problems[0].startswith(
        'train_deepspeed_config=/c/ds.json: optimizer "Adam" without offload_optimizer makes DeepSpeed load op '
        "fused_adam, which the DeepSpeed on n1 does not have prebuilt (it has: cpu_adam, deepspeed_shm_comm)")
    assert node_pre.compare(probes, HOSTS, "n1", "/v", deepspeed_config=config, allow_jit=True) == []
    adam["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
    assert node_pre.compare(probes, HOSTS, "n1", "/v", deepspeed_config=dict(config, text=json.dumps(adam))) == []


def test_compare_reads_the_deepspeed_file_an_accelerate_config_names(tmp_path):
    """Without train_deepspeed_config, the accelerate config's deepspeed_config_file (found in train_code_src,
    as the nodes find it in train_code_dir) is checked the same way; a file the controller cannot read is
    named. The controller reads it (filter train_deepspeed_config, which the Slurm launcher passes on; filter
    train_preflight_problems resolves it itself)."""
    (tmp_path / "ds.json").write_text(json.dumps({"optimizer": {"type": "Adam"}}))
    config = {"accelerate": {"distributed_type": "DEEPSPEED", "deepspeed_config": {"deepspeed_config_file": "ds.json"}},
              "accelerate_path": "/c/acc.yaml", "code_src": str(tmp_path)}
    probes = {h: node(ops=("cpu_adam_op",)) for h in HOSTS}
    problems = train_preflight_problems(probes, HOSTS, "n1", "/v", deepspeed_config=config)
    assert len(problems) == 1 and problems[0].startswith(
        'train_accelerate_config=/c/acc.yaml (its deepspeed_config_file ds.json): optimizer "Adam" without '
        "offload_optimizer makes DeepSpeed load op fused_adam, which the DeepSpeed on n1 does not have prebuilt")
    assert train_preflight_problems(probes, HOSTS, "n1", "/v", deepspeed_config=dict(config, code_src="")) == [
        "train_accelerate_config=/c/acc.yaml (its deepspeed_config_file ds.json): cannot be read on the controller "
        "(train_code_src is not a directory); valid: a file of the directory train_code_src (copied to "
        "train_code_dir, where a relative name is found), an absolute path that is the same file on the controller "
        "and the nodes, or train_deepspeed_config"]
    assert train_preflight_problems(probes, HOSTS, "n1", "/v", deepspeed_config=dict(config, accelerate={"use_cpu": True})) == []
    # what the Slurm launcher hands the batch host: already read, compared the same way
    from ansible_collections.multinode.training.plugins.filter.train_preflight_problems import train_deepspeed_config
    assert node_pre.compare(probes, HOSTS, "n1", "/v", deepspeed_config=train_deepspeed_config(config)) == problems


def test_compare_lacking_torch_or_deepspeed():
    problems = node_pre.compare({"n1": node(torch=None), "n2": node(deepspeed=None)}, ["n1", "n2"], "n1", "/v")
    assert problems == ['n1: train_python="/v/bin/python": lacks torch; valid: the venv that '
                        'multinode.training.wheel_distribute installs (tag prepare)',
                        'n2: train_python="/v/bin/python": lacks deepspeed; valid: the venv that '
                        'multinode.training.wheel_distribute installs (tag prepare), or train_require_deepspeed=false']
    assert node_pre.compare({"n1": node(deepspeed=None), "n2": node(deepspeed=None)}, ["n1", "n2"], "n1", "/v",
                            require_deepspeed=False) == []


def test_compare_a_node_without_result_and_a_failed_probe():
    failed = copy.deepcopy(node())
    failed.update(environment=None, probe_error="rc 1: ['SyntaxError']")
    problems = node_pre.compare({"n1": node(), "n2": failed}, ["n1", "n2", "n3"], "n1")
    assert problems[0].startswith('n2: train_python="/v/bin/python": the environment probe failed (rc 1:')
    assert problems[1] == "n3: no preflight probe result (the node did not answer)"


def test_compare_a_module_job_has_no_script():
    probes = {h: dict(node(), script=None) for h in HOSTS}
    assert node_pre.compare(probes, HOSTS, "n1") == []


def test_filter():
    assert train_preflight_problems({"n1": node(), "n2": node(sha="c" * 64)}, ("n1", "n2"), "n1")[0].startswith(
        'n2: train_script="/c/train.py": sha256 ccc')


def test_try_connect_reaches_a_listener_and_names_a_refusal():
    import socket
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    try:
        assert node_pre.try_connect("127.0.0.1", port, 5)["ok"] is True
    finally:
        server.close()
    refused = node_pre.try_connect("127.0.0.1", port, 1, interval=0.2)
    assert refused["ok"] is False and "refused" in refused["error"].lower() and refused["seconds"] < 3


def test_probe_node_connects_and_compare_names_the_unreachable_node():
    refused = pre.probe_node(sys.executable, run, None, None, (), {"host": "127.0.0.1", "port": 9, "timeout": 1})
    assert refused["connect"]["ok"] is False and refused["connect"]["port"] == 9
    ok = dict(node(), connect={"ok": True, "error": None, "seconds": 0.01, "host": "10.0.0.1", "port": 29400})
    bad = dict(node(), connect={"ok": False, "error": "timed out", "seconds": 15.2, "host": "10.0.0.1", "port": 29400})
    problems = node_pre.compare({"n1": ok, "n2": bad}, ["n1", "n2"], "n1", "/v", interface="eth0.100")
    assert problems == ['n2: train_rdzv_port=29400: this node cannot connect to the rendezvous address 10.0.0.1:29400 '
                        '(n1, train_interface="eth0.100") within 15s (timed out); valid: an interface all nodes reach, '
                        'a port the firewall lets through']
    assert node_pre.endpoint("fd00::1", 29400) == "[fd00::1]:29400"


# ------------------------------------------------------------------ code: compared, copied only where it differs

def test_code_manifest_like_copy(tmp_path):
    src = tmp_path / "myjob"
    (src / "pkg").mkdir(parents=True)
    (src / "train.py").write_text("print(1)\n")
    (src / "pkg" / "mod.py").write_text("x = 1\n")
    (src / "train.py").chmod(0o750)
    contents = pre.code_manifest(str(src) + "/")
    assert sorted(contents) == ["pkg/mod.py", "train.py"]
    assert contents["train.py"]["mode"] == "0750"
    assert contents["train.py"]["sha256"] == hashlib.sha256(b"print(1)\n").hexdigest()
    assert sorted(pre.code_manifest(str(src))) == ["myjob/pkg/mod.py", "myjob/train.py"]
    assert sorted(pre.code_manifest(str(src / "train.py"))) == ["train.py"]
    with pytest.raises(pre.CodeError, match="train_code_src=/nonexistent/x: does not exist on the controller"):
        pre.code_manifest("/nonexistent/x")


def test_code_differences(tmp_path):
    src = tmp_path / "src"
    dest = tmp_path / "dest"
    src.mkdir()
    (src / "train.py").write_text("print(1)\n")
    manifest = pre.code_manifest(str(src) + "/")
    assert node_pre.code_differences(str(dest), manifest) == ["train.py"]          # missing
    dest.mkdir()
    (dest / "train.py").write_text("print(2)\n")
    assert node_pre.code_differences(str(dest), manifest) == ["train.py"]          # content
    (dest / "train.py").write_text("print(1)\n")
    os.chmod(str(dest / "train.py"), int(manifest["train.py"]["mode"], 8))
    me = pwd.getpwuid(os.geteuid()).pw_name
    assert node_pre.code_differences(str(dest), manifest, me) == []
    assert node_pre.code_differences(str(dest), manifest, "no-such-owner") == ["train.py"]
    os.chmod(str(dest / "train.py"), 0o600)
    assert node_pre.code_differences(str(dest), manifest) == ["train.py"]          # mode (copy's preserve)


def test_probe_reports_whether_the_code_is_the_same(tmp_path, probe):
    src = tmp_path / "code.py"
    src.write_text("a = 1\n")
    manifest = pre.code_manifest(str(src))
    out = pre.probe_node(sys.executable, run, code={"dest": str(tmp_path / "node"), "manifest": manifest})
    assert out["code"] == {"dest": str(tmp_path / "node"), "same": False, "differ": ["code.py"], "count": 1}
    # a copy that still differs (a stale mount of shared storage) is refused naming the node and the file
    probes = {h: dict(node(), code=out["code"] if h == "n2" else None) for h in HOSTS}
    assert node_pre.compare(probes, HOSTS, "n1", "/v") == [
        'n2: train_code_dir="%s": 1 file(s) differ from the controller\'s train_code_src (code.py); valid: the same '
        "code on every node (train_code_src is copied there; on storage the nodes share, a node that mounts it)"
        % (tmp_path / "node")]
    assert pre.probe_node(sys.executable, run)["code"] is None


def test_code_manifest_filter_names_the_variable():
    from ansible.errors import AnsibleFilterError
    from ansible_collections.multinode.training.plugins.filter.code_manifest import FilterModule
    manifest = FilterModule().filters()["code_manifest"]
    with pytest.raises(AnsibleFilterError, match="train_code_src=/nonexistent/y: does not exist on the controller"):
        manifest("/nonexistent/y")
