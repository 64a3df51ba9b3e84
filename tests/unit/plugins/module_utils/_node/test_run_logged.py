"""Unit tests for _run_logged, the build helper module deepspeed_build (stage) writes into the work folder."""
import inspect
import subprocess
import sys

from ansible_collections.multinode.training.plugins.module_utils._node import run_logged as _run_logged


def test_output_goes_to_the_log_and_the_return_code_through(tmp_path, capsys):
    log = tmp_path / "build.log"
    assert _run_logged.main([str(log), "--", sys.executable, "-c", "print('compiling'); import sys; sys.exit(0)"]) == 0
    assert log.read_text() == "compiling\n"
    assert capsys.readouterr().err == ""


def test_a_failure_prints_the_error_lines_and_the_tail(tmp_path, capsys):
    log = tmp_path / "build.log"
    script = "print('-Werror=x ok'); print('cpu_adam.cpp:1: error: no member'); [print(i) for i in range(30)]; exit(3)"
    assert _run_logged.main([str(log), "--", sys.executable, "-c", script]) == 3
    err = capsys.readouterr().err
    assert "command failed with rc=3; see %s" % log in err
    assert "error lines:\ncpu_adam.cpp:1: error: no member\n" in err
    assert "-Werror" not in err.split("last lines:")[0]
    assert err.rstrip().endswith("29") and "\n9\n" not in err.split("last lines:")[1]


def test_the_shipped_source_runs_as_a_script(tmp_path):
    helper = tmp_path / "run_logged.py"
    helper.write_text(inspect.getsource(_run_logged))
    log = tmp_path / "log"
    done = subprocess.run([sys.executable, str(helper), str(log), "--", sys.executable, "-c", "exit(5)"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 5 and "rc=5" in done.stderr
