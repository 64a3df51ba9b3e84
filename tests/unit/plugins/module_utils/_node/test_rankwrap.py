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
