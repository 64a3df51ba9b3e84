# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rank wrapper: every rank of a job runs the user's script through this file.

Standard library only; the torchrun module writes its source into the job directory
(``mt_rank.py``) and gives it to torchrun as the entry point, followed by the script (or ``-m
module``) and its arguments. In the rank's own process it:

- writes ``<job dir>/exits/<restart>_<local rank>.start`` (pid, global rank, time, python, the
  environment's real path) before the script runs, and ``.exit`` (exit code, time, the exception's
  last line, the versions of the libraries it imported) when it ends, so the
  node's watcher (_node.watch) learns about a failure the moment it happens, with its cause,
  whether or not the script uses torch's ``@record``;
- runs the script as ``__main__`` (``runpy``: ``sys.argv``, ``sys.path[0]`` and ``__file__`` as
  ``python script.py`` would set them); an exception still prints its traceback and exits 1.

A rank killed by a signal (OOM killer, SIGKILL) writes no ``.exit``; the watcher sees its pid gone.

With ``--local-rank-arg`` before the script (train_local_rank_arg), the script gets what DeepSpeed's
launcher gives each rank and torchrun does not (``deepspeed_contract``): ``--local_rank=<N>`` right after
the script or module, and the variables CROSS_RANK, CROSS_SIZE and LOCAL_SIZE.

It also makes the rank's torchrun error file whole or absent, never cut off (``_error_file``): torch's
``@record`` writes it with ``open("w")`` then ``json.dump``, and torchrun's agent, the moment one of
its ranks fails, SIGTERMs the others and reads every failed rank's file (torch 2.13
``SubprocessContext._poll``, then ``ProcessFailure.__post_init__``), raising on one it cannot parse:
a sibling SIGTERMed while it wrote its own error (all ranks of a node see a lost peer at once)
left it empty, and that ``JSONDecodeError`` ended torchrun itself, not a restartable attempt.
"""
from __future__ import annotations

import importlib.util
import json
import os
import runpy
import sys
import time
import traceback


def _record(kind, data):
    job_dir = os.environ.get("MULTINODE_TRAINING_JOB_DIR")
    if not job_dir:
        return
    exits = os.path.join(job_dir, "exits")
    name = "%s_%s" % (os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"), os.environ.get("LOCAL_RANK", "0"))
    try:
        os.makedirs(exits, exist_ok=True)
        path = os.path.join(exits, "%s.%s" % (name, kind))
        tmp = "%s.%d.tmp" % (path, os.getpid())
        with open(tmp, "w") as handle:
            json.dump(data, handle)
        os.rename(tmp, path)
    except OSError:
        pass


def _error_file(environ=None):
    """Point torch's ``@record`` (``TORCHELASTIC_ERROR_FILE``, read when it records) at a private file
    beside the agent's -> (the agent's path, the private one), or None where torchrun set none."""
    environ = os.environ if environ is None else environ
    real = environ.get("TORCHELASTIC_ERROR_FILE")
    if not real:
        return None
    private = "%s.%d.part" % (real, os.getpid())
    environ["TORCHELASTIC_ERROR_FILE"] = private
    return real, private


def _publish_error_file(files):
    """The private error file onto the agent's path, in one rename, if it holds whole JSON; a file
    cut off (the rank was killed as it wrote) is dropped: torchrun then reports the failure without
    the rank's message (its ``.exit`` record still has it) instead of ending."""
    if not files:
        return
    real, private = files
    try:
        with open(private) as handle:
            json.load(handle)
    except (OSError, ValueError):
        try:
            os.unlink(private)
        except OSError:
            pass
        return
    try:
        os.replace(private, real)
    except OSError:
        pass


def _sampling():
    """The job report's sampler (_node.sampler, shipped beside this file as ``mt_sample.py``) on this
    rank's process and its stdout/stderr; None where it was not shipped or cannot start."""
    job_dir = os.environ.get("MULTINODE_TRAINING_JOB_DIR")
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mt_sample.py")
    if not job_dir or not os.path.isfile(path):
        return None
    try:
        spec = importlib.util.spec_from_file_location("mt_sample", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.start(job_dir, os.environ, {"stdout": (sys, "stdout"), "stderr": (sys, "stderr")})
    except Exception:  # noqa: B902 - the report's samples never stop a rank
        return None


# The wrapper's own option, before the script (_node.torchrun.build_argv puts it there for local_rank_arg).
LOCAL_RANK_ARG = "--local-rank-arg"
# DeepSpeed 0.19.8, deepspeed/launcher/launch.py: per node ``current_env[CROSS_RANK] = str(args.node_rank)``,
# ``current_env[CROSS_SIZE] = str(args.nnodes)``, ``current_env["LOCAL_SIZE"] = str(num_local_procs)``; torchrun
# sets the same numbers under its own names (GROUP_RANK, GROUP_WORLD_SIZE, LOCAL_WORLD_SIZE).
DEEPSPEED_ENV = (("CROSS_RANK", "GROUP_RANK"), ("CROSS_SIZE", "GROUP_WORLD_SIZE"), ("LOCAL_SIZE", "LOCAL_WORLD_SIZE"))


def deepspeed_contract(argv, environ):
    """The wrapper's argv -> (the script's argv, variables to add), as DeepSpeed's launcher runs a rank.

    Without ``--local-rank-arg`` first: argv unchanged, nothing added. With it: ``--local_rank=<LOCAL_RANK>``
    right after the script (or ``-m module``), before its arguments - launch.py's ``cmd.append(
    f"--local_rank={local_rank}")`` between ``args.training_script`` and ``args.training_script_args``, the
    ``=`` form that a script's ``parser.add_argument("--local_rank", type=int)`` reads (torch's own launcher
    passes ``--local-rank``, which that parser refuses) - and DeepSpeed's per-node variables (DEEPSPEED_ENV)
    from torchrun's.
    """
    if argv[:1] != [LOCAL_RANK_ARG]:
        return list(argv), {}
    argv = list(argv[1:])
    at = 2 if argv[:1] == ["-m"] else 1
    argv.insert(at, "--local_rank=%s" % environ.get("LOCAL_RANK", "0"))
    return argv, dict((name, environ[source]) for name, source in DEEPSPEED_ENV if source in environ)


def _code(value):
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    return 1


def main(argv=None):
    argv, added = deepspeed_contract(list(sys.argv[1:] if argv is None else argv), os.environ)
    os.environ.update(added)
    # The python and its environment (the venv's real path names the wheel's release) for the report.
    _record("start", {"pid": os.getpid(), "time": time.time(), "python": sys.version.split()[0],
                      "prefix": os.path.realpath(sys.prefix),
                      "rank": int(os.environ.get("RANK", "-1")), "local_rank": int(os.environ.get("LOCAL_RANK", "0")),
                      "restart": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))})
    code, message = 0, None
    sampler = _sampling()
    error_files = _error_file()
    try:
        if argv[:1] == ["-m"]:
            sys.argv = [argv[1]] + argv[2:]
            # `python -m` imports from the working directory (the job's chdir), not from this file's folder.
            sys.path[0] = os.getcwd()
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            script = argv[0]
            sys.argv = argv
            sys.path[0] = os.path.dirname(os.path.abspath(script))
            runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        # Before the exit record: it makes the watcher stop the job, this rank included, and the
        # agent SIGTERMs it too once a sibling failed; the finally below is for a normal end.
        _publish_error_file(error_files)
        code = _code(exc.code)
        if code and not isinstance(exc.code, int) and exc.code is not None:
            message = str(exc.code)
        _finish(code, message)
        raise
    except BaseException as exc:  # noqa: B902 - recorded, then re-raised unchanged
        _publish_error_file(error_files)
        lines = traceback.format_exception_only(type(exc), exc)
        message = lines[-1].strip() if lines else type(exc).__name__
        _finish(1, message)
        raise
    finally:
        _publish_error_file(error_files)
        if sampler is not None:
            sampler.stop()
    _finish(0, None)
    return 0


# The libraries whose versions the job report's header shows: those the rank imported, as it ended.
REPORTED = ("torch", "deepspeed", "transformers", "accelerate", "numpy")


def imported_versions(modules=None):
    """{name: __version__} of the REPORTED libraries the rank imported (none is imported here)."""
    modules = sys.modules if modules is None else modules
    return {name: str(getattr(modules[name], "__version__", "?")) for name in REPORTED if name in modules}


def _finish(code, message):
    _record("exit", {"exitcode": code, "message": message, "time": time.time(),
                     "rank": int(os.environ.get("RANK", "-1")), "local_rank": int(os.environ.get("LOCAL_RANK", "0")),
                     "restart": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
                     "versions": imported_versions()})


if __name__ == "__main__":
    raise SystemExit(main())
