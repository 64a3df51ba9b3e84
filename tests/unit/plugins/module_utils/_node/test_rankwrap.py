"""The rank wrapper runs a script as `python script.py` would and records how it ended."""
import json
import os
import subprocess
import sys

from ansible_collections.multinode.training.plugins.module_utils._node import rankwrap

WRAPPER = rankwrap.__file__


def _run(tmp_path, body, *args):
    script = tmp_path / "code" / "job.py"
    script.parent.mkdir(exist_ok=True)
    (script.parent / "helper_mod.py").write_text("VALUE = 42\n")
    script.write_text(body)
    env = dict(os.environ, MULTINODE_TRAINING_JOB_DIR=str(tmp_path), RANK="3", LOCAL_RANK="1",
               TORCHELASTIC_RESTART_COUNT="0")
    proc = subprocess.run([sys.executable, WRAPPER, str(script)] + list(args), env=env,
                          capture_output=True, text=True, check=False)
    exit_file = tmp_path / "exits" / "0_1.exit"
    return proc, json.loads(exit_file.read_text()) if exit_file.exists() else None


def test_exception_recorded_and_traceback_kept(tmp_path):
    proc, record = _run(tmp_path, "assert 2 == 4, 'Only wrote to file 2 times, not 4'\n")
    assert proc.returncode == 1
    assert "AssertionError: Only wrote to file 2 times, not 4" in proc.stderr
    assert record["exitcode"] == 1 and record["rank"] == 3
    assert record["message"] == "AssertionError: Only wrote to file 2 times, not 4"
    start = json.loads((tmp_path / "exits" / "0_1.start").read_text())
    assert start["local_rank"] == 1 and start["pid"] > 0


def test_script_sees_its_argv_path_and_main(tmp_path):
    body = ("import sys, helper_mod\nprint(sys.argv, __name__, helper_mod.VALUE)\n"
            "assert __file__.endswith('job.py')\n")
    proc, record = _run(tmp_path, body, "--lr", "a b;c $X")
    assert proc.returncode == 0, proc.stderr
    assert "'--lr', 'a b;c $X']" in proc.stdout and "__main__ 42" in proc.stdout
    assert record["exitcode"] == 0 and record["message"] is None


def test_sys_exit_codes(tmp_path):
    proc, record = _run(tmp_path, "import sys\nsys.exit(3)\n")
    assert proc.returncode == 3 and record["exitcode"] == 3
    proc, record = _run(tmp_path, "import sys\nsys.exit('bad config')\n")
    assert proc.returncode == 1 and record["exitcode"] == 1 and record["message"] == "bad config"


def test_python_environment_and_imported_versions_recorded(tmp_path):
    # a stand-in `torch` beside the script: the wrapper reports what the rank imported, and only that
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "torch.py").write_text("__version__ = '9.9.9+test'\n")
    proc, record = _run(tmp_path, "import torch\nprint(torch.__version__)\n")
    assert proc.returncode == 0, proc.stderr
    assert record["versions"] == {"torch": "9.9.9+test"}
    start = json.loads((tmp_path / "exits" / "0_1.start").read_text())
    assert start["python"] == sys.version.split()[0] and start["prefix"] == os.path.realpath(sys.prefix)
    _proc, record = _run(tmp_path, "print('no import')\n")
    assert record["versions"] == {}


# torch's @record writes TORCHELASTIC_ERROR_FILE with open("w") then json.dump; torchrun's agent reads a failed
# rank's file the moment it has SIGTERMed that rank's siblings, and ends (not a restartable attempt) on one it
# cannot parse. A rank killed as it wrote: the agent's path must hold nothing rather than a cut-off file.
CUT_OFF = """
import os, signal
with open(os.environ["TORCHELASTIC_ERROR_FILE"], "w") as fp:
    fp.write('{"message": {"message": "RuntimeError: Connection closed by peer", "extraI')
    fp.flush()
    os.kill(os.getpid(), signal.SIGTERM)
"""

WHOLE = """
import json, os
with open(os.environ["TORCHELASTIC_ERROR_FILE"], "w") as fp:
    json.dump({"message": {"message": "ValueError: bad batch", "extraInfo": {"timestamp": "1"}}}, fp)
raise ValueError("bad batch")
"""


def _run_with_error_file(tmp_path, body):
    agent_file = tmp_path / "attempt_0" / "1" / "error.json"
    agent_file.parent.mkdir(parents=True)
    script = tmp_path / "job.py"
    script.write_text(body)
    env = dict(os.environ, MULTINODE_TRAINING_JOB_DIR=str(tmp_path), RANK="3", LOCAL_RANK="1",
               TORCHELASTIC_RESTART_COUNT="0", TORCHELASTIC_ERROR_FILE=str(agent_file))
    proc = subprocess.run([sys.executable, WRAPPER, str(script)], env=env, capture_output=True, text=True,
                          check=False)
    return proc, agent_file


def test_a_rank_killed_while_writing_its_error_file_leaves_the_agent_none(tmp_path):
    proc, agent_file = _run_with_error_file(tmp_path, CUT_OFF)
    assert proc.returncode == -15
    assert not agent_file.exists()
    # the private file was the one cut off (and is left, beside it, for whoever looks)
    parts = list(agent_file.parent.glob("error.json.*.part"))
    assert len(parts) == 1 and parts[0].read_text().endswith('"extraI')


def test_a_rank_error_file_written_whole_reaches_the_agent(tmp_path):
    proc, agent_file = _run_with_error_file(tmp_path, WHOLE)
    assert proc.returncode == 1
    assert json.loads(agent_file.read_text())["message"]["message"] == "ValueError: bad batch"
    assert not list(agent_file.parent.glob("*.part"))


def test_the_error_file_is_private_only_where_torchrun_set_one():
    environ = {}
    assert rankwrap._error_file(environ) is None and environ == {}
    environ = {"TORCHELASTIC_ERROR_FILE": "/j/attempt_0/0/error.json"}
    real, private = rankwrap._error_file(environ)
    assert real == "/j/attempt_0/0/error.json" and environ["TORCHELASTIC_ERROR_FILE"] == private
    assert private.startswith(real + ".") and private.endswith(".part")


# ------------------------------------------------------------------ DeepSpeed's launcher contract (local_rank_arg)

# A script written for `deepspeed --hostfile`: its local rank from argparse (DeepSpeedExamples' way), the node's
# place from DeepSpeed's own variables.
DEEPSPEED_SCRIPT = """
import argparse, json, os, sys
parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=-1)
parser.add_argument("--lr", type=float)
args = parser.parse_args()
print(json.dumps({"argv": sys.argv[1:], "local_rank": args.local_rank, "lr": args.lr,
                  "env": {k: os.environ.get(k) for k in ("CROSS_RANK", "CROSS_SIZE", "LOCAL_SIZE")}}))
assert args.local_rank == int(os.environ["LOCAL_RANK"]), (args.local_rank, os.environ["LOCAL_RANK"])
"""
# What torchrun sets for each rank of the second of two nodes, two ranks each (torch 2.13's agent).
TORCHRUN_ENV = {"GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "WORLD_SIZE": "4",
                "TORCHELASTIC_RESTART_COUNT": "0"}


def _rank(tmp_path, local_rank, wrapper_args):
    (tmp_path / "code").mkdir(exist_ok=True)
    (tmp_path / "code" / "ds_train.py").write_text(DEEPSPEED_SCRIPT)
    # PYTHONPATH: the -m form imports ds_train from there
    env = dict(os.environ, MULTINODE_TRAINING_JOB_DIR=str(tmp_path), LOCAL_RANK=str(local_rank),
               RANK=str(2 + local_rank), PYTHONPATH=str(tmp_path / "code"), **TORCHRUN_ENV)
    for name in ("CROSS_RANK", "CROSS_SIZE", "LOCAL_SIZE"):
        env.pop(name, None)
    return subprocess.run([sys.executable, WRAPPER] + wrapper_args, env=env, capture_output=True, text=True,
                          check=False)


def test_each_rank_of_a_deepspeed_script_reads_its_local_rank_from_argparse(tmp_path):
    for local_rank in (0, 1):
        for form in ([str(tmp_path / "code" / "ds_train.py")], ["-m", "ds_train"]):
            proc = _rank(tmp_path, local_rank, [rankwrap.LOCAL_RANK_ARG] + form + ["--lr", "0.1"])
            assert proc.returncode == 0, proc.stderr
            seen = json.loads(proc.stdout.strip().splitlines()[-1])
            # launch.py's order: the script, --local_rank=<N>, then the script's own arguments
            assert seen["argv"] == ["--local_rank=%d" % local_rank, "--lr", "0.1"]
            assert seen["local_rank"] == local_rank and seen["lr"] == 0.1
            assert seen["env"] == {"CROSS_RANK": "1", "CROSS_SIZE": "2", "LOCAL_SIZE": "2"}


def test_without_the_option_a_deepspeed_script_sees_its_default_and_fails(tmp_path):
    """torchrun alone: LOCAL_RANK only in the environment, args.local_rank stays -1 (every rank on GPU 0)."""
    proc = _rank(tmp_path, 1, [str(tmp_path / "code" / "ds_train.py"), "--lr", "0.1"])
    assert proc.returncode == 1
    assert "AssertionError: (-1, '1')" in proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])["env"] == {
        "CROSS_RANK": None, "CROSS_SIZE": None, "LOCAL_SIZE": None}


def test_deepspeed_contract_is_pure_and_only_with_the_option():
    env = dict(TORCHRUN_ENV, LOCAL_RANK="3")
    assert rankwrap.deepspeed_contract(["s.py", "--x"], env) == (["s.py", "--x"], {})
    assert rankwrap.deepspeed_contract(["--local-rank-arg", "s.py"], env) == (
        ["s.py", "--local_rank=3"], {"CROSS_RANK": "1", "CROSS_SIZE": "2", "LOCAL_SIZE": "2"})
    assert rankwrap.deepspeed_contract(["--local-rank-arg", "-m", "pkg.train", "a"], {"LOCAL_RANK": "0"}) == (
        ["-m", "pkg.train", "--local_rank=0", "a"], {})
    assert env == dict(TORCHRUN_ENV, LOCAL_RANK="3")  # the caller's environment is not changed


def test_a_module_is_imported_from_the_working_directory_as_python_m_does(tmp_path):
    """train_module: torchrun runs the wrapper (in the job's folder) with the code folder as working directory;
    `python -m pkg.train` there imports pkg from it, so must the wrapper."""
    code = tmp_path / "code"
    (code / "pkg").mkdir(parents=True)
    (code / "pkg" / "__init__.py").write_text("")
    (code / "pkg" / "train.py").write_text("import sys\nprint('ran', __name__, sys.argv[1:])\n")
    env = dict(os.environ, MULTINODE_TRAINING_JOB_DIR=str(tmp_path), RANK="0", LOCAL_RANK="0")
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([sys.executable, WRAPPER, "-m", "pkg.train", "--steps", "2"], env=env, cwd=str(code),
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "ran __main__ ['--steps', '2']"
