"""wheel_distribute (compat)'s steps on the node (plugins/module_utils/_wheel/node_probe.py): the interpreter probe
run for real under this python and under a missing one, and when 'current' is asked at all."""
import subprocess
import sys

from ansible_collections.multinode.training.plugins.module_utils._wheel import node_probe


class Runner:
    def run_command(self, argv, handle_exceptions=True):
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        return done.returncode, done.stdout, done.stderr


def test_the_interpreter_probe_reports_this_python():
    facts = node_probe.interpreter(Runner(), sys.executable)
    assert facts["tag"] == "cp%d%d" % sys.version_info[:2] and "error" not in facts


def test_a_missing_interpreter_is_an_error_not_a_crash(tmp_path):
    facts = node_probe.interpreter(Runner(), str(tmp_path / "python9"))
    assert facts == {"executable": str(tmp_path / "python9"), "error": "No such file or directory"}


def test_a_failing_interpreter_reports_its_stderr(tmp_path):
    bad = tmp_path / "python"
    bad.write_text("#!/bin/sh\necho 'bad magic number' >&2\nexit 3\n")
    bad.chmod(0o755)
    assert node_probe.interpreter(Runner(), str(bad))["error"] == "bad magic number"


def test_current_is_not_asked_without_expected_files_or_with_problems():
    params = {"expected_files": None, "node_dir": "/nowhere", "lock_sha256": "", "lock_packages": None}
    assert node_probe.current(params, {}, {}, []) == (False, ["not asked (no expected_files)"])
    assert node_probe.current(dict(params, expected_files={}), {}, {}, ["n: python too old"]) == \
        (False, ["not asked (no expected_files)"])
