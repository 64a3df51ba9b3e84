"""The node side's contract with the real torch: run by a python that has torch (make test runs it with the CUDA
wheel of scripts/check_cuda_build.sh and with the pinned CPU wheel in scripts/gpu_check.sh's CPU part; the GPU
machine with its own torch). No GPU needed: importing torch and calling its recorders is enough.

  python scripts/check_torch_contract.py

Checks, one line each, exit 1 on the first set that fails:
  names      every private torch name the node side's files call (``_dump_*`` of torch._C._distributed_c10d,
             found in the files, not listed here) exists in this torch where its build has the backend
             (NCCL's only with NCCL), and takes every keyword the sampler passes it
  fakes      tests/unit/torch_fakes.py's recorders take exactly the real bindings' keywords
  recorders  the sampler (_node/sampler.py, as shipped to the ranks) reads this torch's recorders for real: a gloo
             group of one rank runs three all_reduces and the sampler names them from the generic recorder; the
             NCCL recorder (CUDA builds) answers the sampler's call with a status per process group
  analyser   the NCCL dumps the fakes build parse with torch's own analyser (torch.distributed.flight_recorder,
             build_db as torch's debug handlers call it; torch >= 2.10), a hang's too
  errorfile  the rank wrapper (_node/rankwrap.py) and torchrun's error files: a script under torch's own @record
             that raises hands the agent's ProcessFailure its message; a rank SIGTERMed as it wrote its file
             leaves the agent nothing to choke on, where the same cut-off file makes this torch's agent raise
  localrank  DeepSpeed's launcher contract (train_local_rank_arg): this torch's torchrun, 2 ranks, the argv of
             _node/torchrun.py's build_argv with the rank wrapper: a script with argparse --local_rank gets each
             rank's LOCAL_RANK and DeepSpeed's CROSS_RANK, CROSS_SIZE, LOCAL_SIZE; without the option it sees -1
"""
from __future__ import annotations

import ast
import contextlib
import importlib.util
import io
import logging
import inspect
import os
import pickle
import re
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The files that run in or beside the ranks (shipped to the nodes).
NODE_SIDE = [os.path.join(ROOT, "plugins", "module_utils", "_node", name)
             for name in sorted(os.listdir(os.path.join(ROOT, "plugins", "module_utils", "_node")))
             if name.endswith(".py")] + \
    [os.path.join(ROOT, "roles", "train", "files", name)
     for name in sorted(os.listdir(os.path.join(ROOT, "roles", "train", "files"))) if name.endswith(".py")]
PRIVATE = re.compile(r"\b(_dump_[a-z_]+|_reset_fr_[a-z_]+)\b")


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def keywords(function):
    """A pybind function's keywords from its docstring's first line: ``f(a: bool | None = None, ...) -> bytes``."""
    first = (function.__doc__ or "").strip().splitlines()[0]
    inside = first[first.index("(") + 1:first.rindex(")")]
    return [part.split(":")[0].split("=")[0].strip() for part in inside.split(",") if part.strip()]


def sampler_keywords(path):
    """The keywords the sampler passes to the recorders (every call of its ``_dumps``)."""
    found = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "_dumps":
            found.update(k.arg for k in node.keywords if k.arg)
    return found


RECORDED = """
from torch.distributed.elastic.multiprocessing.errors import record


@record
def main():
    raise ValueError("bad batch 7")


main()
"""

CUT_OFF = """
import os, signal
with open(os.environ["TORCHELASTIC_ERROR_FILE"], "w") as fp:
    fp.write('{"message": {"message": "RuntimeError: Connection closed by peer", "extraI')
    fp.flush()
    os.kill(os.getpid(), signal.SIGTERM)
"""


def error_files():
    """The errorfile check -> (problems, what was seen)."""
    import subprocess
    import tempfile

    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    wrapper = os.path.join(ROOT, "plugins", "module_utils", "_node", "rankwrap.py")
    problems, seen = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for case, body in (("recorded", RECORDED), ("cut_off", CUT_OFF)):
            agent_file = os.path.join(tmp, case, "attempt_0", "0", "error.json")
            os.makedirs(os.path.dirname(agent_file))
            script = os.path.join(tmp, case, "job.py")
            with open(script, "w") as handle:
                handle.write(body)
            env = dict(os.environ, MULTINODE_TRAINING_JOB_DIR=os.path.join(tmp, case), RANK="0", LOCAL_RANK="0",
                       TORCHELASTIC_RESTART_COUNT="0", TORCHELASTIC_ERROR_FILE=agent_file)
            proc = subprocess.run([sys.executable, wrapper, script], env=env, capture_output=True, text=True,
                                  check=False)
            try:
                failure = ProcessFailure(local_rank=0, pid=1, exitcode=proc.returncode, error_file=agent_file)
                message = failure.message
                message = message.get("message") if isinstance(message, dict) else message
                seen[case] = "rc %s, the agent reads %r" % (proc.returncode, message)
            except Exception as exc:  # noqa: B902 - what torch's agent would have died of
                problems.append("%s: torch's ProcessFailure raised %s on the agent's error file" % (
                    case, type(exc).__name__))
                continue
            if case == "recorded" and "ValueError: bad batch 7" not in str(failure.message):
                problems.append("recorded: the agent read %r, not the rank's ValueError" % (failure.message,))
        # the oracle: the same cut-off file where the agent looks makes this torch's agent raise
        cut = os.path.join(tmp, "cut.json")
        with open(cut, "w") as handle:
            handle.write('{"message": {"message": "RuntimeError: Connection closed by peer", "extraI')
        quiet = logging.getLogger("torch.distributed.elastic.multiprocessing.errors")
        kept, quiet.disabled = quiet.disabled, True  # its traceback of the expected failure
        try:
            ProcessFailure(local_rank=0, pid=1, exitcode=-15, error_file=cut)
            seen["oracle"] = "this torch reads a cut-off error file without raising"
        except ValueError:
            seen["oracle"] = "a cut-off file at the agent's path makes it raise"
        finally:
            quiet.disabled = kept
    return problems, "; ".join("%s: %s" % item for item in sorted(seen.items()))


DEEPSPEED_SCRIPT = """
import argparse, os
parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=-1)
parser.add_argument("--steps", type=int, default=0)
args = parser.parse_args()
print("rank %s: args.local_rank=%d LOCAL_RANK=%s CROSS_RANK=%s CROSS_SIZE=%s LOCAL_SIZE=%s steps=%d" % (
    os.environ["RANK"], args.local_rank, os.environ["LOCAL_RANK"], os.environ.get("CROSS_RANK"),
    os.environ.get("CROSS_SIZE"), os.environ.get("LOCAL_SIZE"), args.steps), flush=True)
assert args.local_rank == int(os.environ["LOCAL_RANK"]), "args.local_rank=%d, LOCAL_RANK=%s" % (
    args.local_rank, os.environ["LOCAL_RANK"])
"""


def local_rank_arg():
    """The localrank check -> (problems, what was seen)."""
    import socket
    import subprocess
    import tempfile

    node_torchrun = load("mt_node_torchrun", os.path.join(ROOT, "plugins", "module_utils", "_node", "torchrun.py"))
    wrapper = os.path.join(ROOT, "plugins", "module_utils", "_node", "rankwrap.py")
    problems, seen = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "ds_train.py")
        with open(script, "w") as handle:
            handle.write(DEEPSPEED_SCRIPT)
        for on in (True, False):
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
            argv = node_torchrun.build_argv(sys.executable, {
                "nnodes": "1", "nproc_per_node": 2, "rdzv_id": "localrank", "rdzv_endpoint": "127.0.0.1:%d" % port,
                "rdzv_conf": {"is_host": True}, "script": script, "args": ["--steps", "3"], "wrapper": wrapper,
                "local_rank_arg": on})
            proc = subprocess.run(argv, env=dict(os.environ, MULTINODE_TRAINING_JOB_DIR=os.path.join(tmp, str(on))),
                                  capture_output=True, text=True, timeout=300, check=False)
            lines = sorted(line for line in proc.stdout.splitlines() if line.startswith("rank "))
            seen["on" if on else "off"] = "rc %d, %s" % (proc.returncode, " | ".join(lines) or proc.stderr[-300:])
            want = ["rank %d: args.local_rank=%d LOCAL_RANK=%d CROSS_RANK=0 CROSS_SIZE=1 LOCAL_SIZE=2 steps=3" % (r, r, r)
                    for r in (0, 1)]
            if on and (proc.returncode != 0 or lines != want):
                problems.append("with local_rank_arg: %s" % seen["on"])
            if not on and (proc.returncode == 0 or "args.local_rank=-1" not in proc.stdout):
                problems.append("without local_rank_arg the script did not see its default -1: %s" % seen["off"])
    return problems, "; ".join("%s: %s" % item for item in sorted(seen.items()))


def main():
    import torch
    import torch.distributed as dist
    c10d = sys.modules["torch._C._distributed_c10d"]
    nccl = dist.is_nccl_available()
    print("torch %s (CUDA %s, NCCL %s), python %s" % (
        torch.__version__, torch.version.cuda, "yes" if nccl else "no", sys.version.split()[0]))
    sampler_path = os.path.join(ROOT, "plugins", "module_utils", "_node", "sampler.py")
    sampler = load("mt_sample", sampler_path)
    sys.path.insert(0, os.path.join(ROOT, "tests", "unit"))
    fakes = load("torch_fakes", os.path.join(ROOT, "tests", "unit", "torch_fakes.py"))
    failed = []

    def check(name, problems, seen):
        print("%-5s %-9s %s" % ("FAIL" if problems else "PASS", name, "; ".join(problems) if problems else seen))
        failed.extend(problems)

    # names: what the node side calls, found in its files (less the names those files define themselves)
    own = set(node.name for path in NODE_SIDE for node in ast.walk(ast.parse(open(path).read()))
              if isinstance(node, (ast.FunctionDef, ast.ClassDef)))
    used = sorted(set(m for path in NODE_SIDE for m in PRIVATE.findall(open(path).read())) - own)
    passed = sorted(sampler_keywords(sampler_path))
    problems = []
    for name in used:
        if "nccl" in name and not nccl:
            continue  # a build without NCCL has no NCCL recorder; the sampler asks for it only in NCCL jobs
        function = getattr(c10d, name, None)
        if function is None:
            problems.append("torch._C._distributed_c10d.%s (called in %s) is not in torch %s" % (
                name, ", ".join(os.path.relpath(p, ROOT) for p in NODE_SIDE if name in open(p).read()),
                torch.__version__))
            continue
        missing = [k for k in passed if k not in keywords(function)]
        if missing and name.startswith("_dump_") and not name.endswith("_json"):
            problems.append("%s takes %s, not %s" % (name, keywords(function), missing))
    checked = [n for n in used if nccl or "nccl" not in n]
    check("names", problems, "%s exist%s; the sampler passes %s" % (
        ", ".join(checked), " (no NCCL in this build: %s not asked)" % ", ".join(sorted(set(used) - set(checked)))
        if set(used) - set(checked) else "", ", ".join(passed)))

    # fakes: the stand-ins' recorders take what the real ones take
    problems = []
    for name in (sampler.NCCL_RECORDER, sampler.GENERIC_RECORDER):
        function = getattr(c10d, name, None)
        if function is not None and tuple(keywords(function)) != fakes.RECORDER_KEYWORDS:
            problems.append("%s takes %s, tests/unit/torch_fakes.py %s" % (
                name, keywords(function), fakes.RECORDER_KEYWORDS))
    fake = fakes.C10d(nccl=fakes.Recorder({}), generic=fakes.Recorder({}))
    for name in (sampler.NCCL_RECORDER, sampler.GENERIC_RECORDER):
        if name not in fake.recorders:
            problems.append("tests/unit/torch_fakes.py has no %s" % name)
            continue
        params = tuple(inspect.signature(getattr(fake, name)).parameters)
        if params != fakes.RECORDER_KEYWORDS:
            problems.append("the fake %s takes %s" % (name, params))
    check("fakes", problems, "the fakes' recorders take %s, as torch's" % (", ".join(fakes.RECORDER_KEYWORDS),))

    # recorders: the sampler on this torch's own recorders
    problems = []
    sampler.recorder_env(os.environ, sampler.torch_version())
    os.environ.setdefault(sampler.BUFFER_ENV, "2000")
    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    try:
        for _step in range(3):
            dist.all_reduce(torch.ones(4))
        # gloo marks a collective completed in its recorder from its worker thread, after the caller's wait has
        # returned: measured with torch 2.13.0+cu130, 2 of 200 all_reduces read back one short, for 0.7 and 3.4 ms.
        # The hang check judges a status only once it stood still for its timeout; here, up to 5 s for it to settle.
        settle = time.monotonic()
        status = sampler.fr_status()
        while status != {"0": [3, 3]} and time.monotonic() - settle < 5:
            time.sleep(0.001)
            status = sampler.fr_status()
        settled = time.monotonic() - settle
        off = sampler.recorder_off()
        generic = hasattr(c10d, sampler.GENERIC_RECORDER)
        if generic:
            if status != {"0": [3, 3]}:
                problems.append("fr_status() after 3 gloo all_reduces: %r, not {'0': [3, 3]}" % (status,))
            if sampler.fr_op("0", 3) != "gloo:all_reduce":
                problems.append("fr_op('0', 3): %r, not 'gloo:all_reduce'" % (sampler.fr_op("0", 3),))
            entries = sampler.fr_entries()
            if [e.get("collective_seq_id") for e in entries] != [1, 2, 3] or not all(
                    e.get("time_created_ns") for e in entries):
                problems.append("fr_entries(): %r" % (entries,))
            if off != "":
                problems.append("recorder_off() with a generic recorder: %r" % (off,))
        elif not off or "backend gloo" not in off:
            problems.append("a torch without the generic recorder, and recorder_off() says %r" % (off,))
        if nccl:
            answered = dict(sampler._dumps(c10d, True, includeCollectives=False))
            data = answered.get(sampler.NCCL_RECORDER)
            if not isinstance(data, dict) or not {"version", "pg_config", "pg_status"} <= set(data):
                problems.append("the NCCL recorder's dump through the sampler: %r" % (data,))
            else:
                full = dict(sampler._dumps(c10d, True, includeStackTraces=False)).get(sampler.NCCL_RECORDER)
                if "entries" not in (full or {}):
                    problems.append("the NCCL recorder's dump with collectives has no entries: %r" % (full,))
    finally:
        dist.destroy_process_group()
    check("recorders", problems, "gloo: %s, status %s (settled in %.1f ms)%s" % (
        "generic recorder" if hasattr(c10d, sampler.GENERIC_RECORDER) else "none (%s)" % off, status, settled * 1000,
        "; NCCL recorder answers the sampler (version %s)" % data["version"] if nccl and not problems else ""))

    # analyser: the fakes' NCCL dumps parse with torch's own
    problems = []
    try:
        from torch.distributed.flight_recorder.components.builder import build_db
        from torch.distributed.flight_recorder.components.config_manager import JobConfig
    except ImportError as exc:
        check("analyser", [], "not in torch %s (%s): skipped" % (torch.__version__, exc))
    else:
        counts = {}
        for case, late in (("even", None), ("hang", 1)):
            dumps = fakes.two_rank_nccl_dumps(late_rank=late)
            args = JobConfig().parse_args(args=[])
            args.allow_incomplete_ranks = True
            details = {"rank%d" % r: dict(d, rank=r, host_name="node%d" % (r + 1)) for r, d in dumps.items()}
            for detail in details.values():  # the analyser's input: pickles round-tripped as files would be
                detail.update(pickle.loads(pickle.dumps(detail)))
            said = io.StringIO()
            logger = logging.getLogger("Flight Recorder")  # the analyser's own logger (its fr_logger)
            kept, logger.handlers = logger.handlers, [logging.StreamHandler(said)]
            try:
                with contextlib.redirect_stdout(said):
                    db = build_db(details, args, fakes.VERSION)
                counts[case] = len(db.collectives)
            except Exception as exc:  # noqa: B902 - the analyser refused the fakes' dumps
                problems.append("%s: build_db refused the fakes' NCCL dumps: %s: %s" % (case, type(exc).__name__, exc))
                continue
            finally:
                logger.handlers = kept
            # the hang: rank 1 never entered all_reduce #3, which the analyser reports as such
            if late is not None and "missing ranks: {1}" not in said.getvalue():
                problems.append("the analyser did not see rank 1 missing from the hang's last all_reduce: %r"
                                % said.getvalue()[-300:])
        if not problems and counts.get("even") != 3:
            problems.append("build_db found %s collectives in 3 all_reduces on 2 ranks" % counts.get("even"))
        check("analyser", problems, "torch's build_db parses the fakes' NCCL dumps (collectives: %s; the hang's rank 1 "
              "named missing)" % counts)
    check("errorfile", *error_files())
    check("localrank", *local_rank_arg())
    if failed:
        print("torch contract: %d problem(s)" % len(failed))
        return 1
    print("torch contract: every check passed with torch %s" % torch.__version__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
