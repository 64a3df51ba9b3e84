# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Bad input for the entry playbooks (cases.yml), each refused before any work.

Every case runs the real `ansible-playbook <playbook>` on the embedded default
(localhost, no -i) with the case's extra variables over a base that points every
path variable into the case's own, empty temporary directory. Asserted per case:
rc != 0; changed=0 for every host in the recap; the temporary directory is still
empty; no new job directory under runs/; the failure message names the variable
in the one shape `<variable>=<value>: <what is wrong>; valid: <what would be>`,
with exactly the expected number of problems (so the base itself is valid, which
test_base_is_valid also shows for train.yml).

The cases run in a small pool (BADINPUT_JOBS, default 3); the case count and the
slowest case's seconds are printed at the end of the run.
"""
from __future__ import annotations

import concurrent.futures
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
HERE = pathlib.Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"
PLAYBOOK_BIN = pathlib.Path(sys.executable).parent / "ansible-playbook"
JOBS = int(os.environ.get("BADINPUT_JOBS", "3"))
TIMEOUT = int(os.environ.get("BADINPUT_TIMEOUT", "180"))
SHAPE = re.compile(r"^([^ :]+(, [^ :]+)*: )?[A-Za-z_][A-Za-z0-9_]*(\[[^\]]+\])*=.+: .+; valid: .+$")


def load_cases():
    text = (HERE / "cases.yml").read_text()
    cases = yaml.safe_load(text.replace("@FIXTURES@", str(FIXTURES)))
    ids = [c["id"] for c in cases]
    assert len(ids) == len(set(ids)), "duplicate case ids"
    return cases


CASES = load_cases()
if os.environ.get("BADINPUT_ONLY"):  # a subset while working on some cases: BADINPUT_ONLY=id,id
    CASES = [c for c in CASES if c["id"] in os.environ["BADINPUT_ONLY"].split(",")]


def base_vars(playbook, tmp):
    """Every path a run could write to, inside ``tmp``; the wheel manifest from the fixtures.

    Paths that are no role variable are the roles' internal ones (``_<role>_...`` in vars/main.yml),
    which extra variables override."""
    if playbook == "build_deepspeed.yml":
        return {"_deepspeed_build_workdir": tmp + "/build", "_deepspeed_build_dist_dir": tmp + "/dist"}
    return {
        "train_log_dir": tmp + "/log",
        "train_runs_dir": tmp + "/runs",
        "train_code_dir": tmp + "/code",
        "train_venv": tmp + "/venv",
        "_train_nccl_env_file": tmp + "/etc/nccl.env",
        "wheel_distribute_dist_dir": str(FIXTURES / "wheel_dist"),
        "_wheel_distribute_node_dir": tmp + "/cache",
        "_nccl_tuning_conf_path": tmp + "/etc/nccl.conf",
        "_nccl_tuning_env_file": tmp + "/etc/nccl.env",
        "_nccl_tuning_memlock_file": tmp + "/etc/memlock.conf",
    }


def tree(path):
    """Every file and directory below ``path`` (relative names)."""
    found = []
    for root, dirs, files in os.walk(path):
        found.extend(os.path.relpath(os.path.join(root, n), path) for n in dirs + files)
    return sorted(found)


def run_playbook(playbook, extra, tmp, args=(), environ=None):
    """ansible-playbook with ``extra`` as a vars file, its JSON report; ``environ`` added to its environment."""
    with open(os.path.join(tmp, "..", os.path.basename(tmp) + ".vars.json"), "w") as handle:
        json.dump(extra, handle)
        vars_file = handle.name
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
               ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", PWD=str(ROOT), **(environ or {}))
    argv = [str(PLAYBOOK_BIN), playbook, "-e", "@" + vars_file] + list(args)
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=str(ROOT), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=TIMEOUT, check=False)
    seconds = time.monotonic() - start
    try:
        report = json.loads(proc.stdout[proc.stdout.index("{"):])
    except ValueError:
        report = {}
    return proc, report, seconds


def failure_messages(report):
    messages = []
    for play in report.get("plays", []):
        for task in play.get("tasks", []):
            for result in task.get("hosts", {}).values():
                if result.get("failed"):
                    messages.append(str(result.get("msg", "")))
    return messages


def run_case(case):
    playbook = case.get("playbook", "train.yml")
    parent = tempfile.mkdtemp(prefix="badinput-")
    # Others may pass through the case's parent (not list it): an account such as nobody reaches the
    # case's directory; @PRIVATE@ is a 0700 directory of root's beside it, with a script p.py.
    os.chmod(parent, 0o711)
    tmp = os.path.join(parent, "case")
    os.mkdir(tmp)
    private = os.path.join(parent, "private")
    os.mkdir(private, 0o700)
    with open(os.path.join(private, "p.py"), "w") as handle:
        handle.write("print('the job ran')\n")
    extra = base_vars(playbook, tmp)
    extra.update(json.loads(json.dumps(case["vars"]).replace("@TMP@", tmp).replace("@PRIVATE@", private)))
    try:
        proc, report, seconds = run_playbook(playbook, extra, tmp, case.get("args", ()))
        return {"proc": proc, "report": report, "seconds": seconds, "left": tree(tmp)}
    finally:
        shutil.rmtree(parent, ignore_errors=True)


@pytest.fixture(scope="session")
def outcomes(request):
    runs_dir = ROOT / "runs"
    before = set(os.listdir(runs_dir)) if runs_dir.is_dir() else set()
    with concurrent.futures.ThreadPoolExecutor(max_workers=JOBS) as pool:
        results = dict(zip([c["id"] for c in CASES], pool.map(run_case, CASES)))
    after = set(os.listdir(runs_dir)) if runs_dir.is_dir() else set()
    slowest = max(results, key=lambda k: results[k]["seconds"])
    total = sum(r["seconds"] for r in results.values())
    request.config.badinput_summary = (
        "bad-input suite: %d cases, slowest %s %.1f s, %.1f s of runs in %d workers"
        % (len(results), slowest, results[slowest]["seconds"], total, JOBS),)
    return {"cases": results, "new_runs": sorted(after - before)}


def test_at_least_60_cases_over_both_playbooks():
    assert len(CASES) >= 60
    assert {c.get("playbook", "train.yml") for c in CASES} == {"train.yml", "build_deepspeed.yml"}


def test_no_job_directory_under_runs(outcomes):
    assert outcomes["new_runs"] == []


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_refused_before_any_work(outcomes, case):
    outcome = outcomes["cases"][case["id"]]
    proc, report = outcome["proc"], outcome["report"]
    tail = (proc.stdout[-3000:] + proc.stderr[-2000:])
    assert proc.returncode != 0, "accepted: %s" % tail
    stats = report.get("stats")
    assert stats, "no recap: %s" % tail
    assert all(host["changed"] == 0 for host in stats.values()), stats
    assert outcome["left"] == [], "files written: %s" % outcome["left"]
    messages = failure_messages(report)
    assert len(messages) == 1, messages
    lines = messages[0].splitlines()
    variable = case.get("variable") or next(iter(case["vars"]))
    named = re.compile("^([^ :]+(, [^ :]+)*: )?" + re.escape(variable) + r"(\[[^\]]+\])*=")
    assert any(named.match(line) for line in lines), lines
    assert len(lines) == case.get("problems", 1), lines
    assert all(SHAPE.match(line) for line in lines), lines
    assert "Traceback" not in messages[0] and "b'" not in messages[0]
    if "expect" in case:
        assert case["expect"] in messages[0]


def test_base_is_valid(tmp_path):
    """The base variables alone pass validation (train.yml --tags validate: no node work, changed=0)."""
    tmp = tmp_path / "case"
    tmp.mkdir()
    proc, report, _seconds = run_playbook("train.yml", base_vars("train.yml", str(tmp)), str(tmp),
                                          ["--tags", "validate"])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert all(host["changed"] == 0 for host in report["stats"].values())
    assert tree(str(tmp)) == []


def test_collect_and_report_tolerate_a_job_that_never_started(tmp_path):
    """No tar error replacing the cause, no archive left: the report fails naming the first real cause."""
    tmp = tmp_path / "case"
    tmp.mkdir()
    proc, report, _seconds = run_playbook(str(HERE / "never_started.yml"), {"tmp": str(tmp)}, str(tmp))
    messages = failure_messages(report)
    assert proc.returncode != 0
    assert messages == ["Training job never-started failed on localhost: localhost: chdir /nonexistent is not a "
                        "directory on localhost. Logs: %s/runs/never-started/" % tmp], messages
    assert "Cannot stat" not in proc.stdout + proc.stderr
    assert tree(str(tmp)) == []


def test_env_launcher_preflight_is_the_ssh_launchers():
    """train_launcher=env (a platform's container: its variables in the environment ansible-playbook passes
    to the embedded localhost) runs the ssh launcher's preflight on its container before torchrun: the
    python, the script, the env files are named in the same words (filter train_preflight_problems on the
    same probe), and no job is started (no job directory, no torchrun)."""
    parent = tempfile.mkdtemp(prefix="badinput-env-")
    os.chmod(parent, 0o711)  # the job's account (mtrain) passes through to its directories, as in run_case
    try:
        _env_launcher_preflight(pathlib.Path(parent) / "case")
    finally:
        shutil.rmtree(parent, ignore_errors=True)


def _env_launcher_preflight(tmp):
    tmp.mkdir()
    extra = dict(base_vars("train.yml", str(tmp)), train_launcher="env", train_job_id="env-preflight",
                 train_env_files=[str(tmp / "job.env")])
    proc, report, _seconds = run_playbook("train.yml", extra, str(tmp), ["--skip-tags", "prepare,nccl"],
                                          {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29531", "WORLD_SIZE": "1",
                                           "RANK": "0"})
    messages = failure_messages(report)
    assert proc.returncode == 2 and len(messages) == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert messages[0].split(" | ") == [
        'localhost: train_python="%s/venv/bin/python": missing or not executable on this node (train_venv="%s/venv"); '
        "valid: the venv that multinode.training.wheel_distribute installs (tag prepare)" % (tmp, tmp),
        'localhost: train_script="%s/code/smoke_train.py": missing on this node; valid: the same file on all nodes '
        "(train_code_src is copied there)" % tmp,
        'localhost: train_env_files="%s/job.env": missing on this node; valid: existing KEY=VALUE files' % tmp,
        'localhost: train_nccl="%s/etc/nccl.env": missing on this node; valid: the NCCL env file '
        "multinode.training.nccl_tuning writes (tag nccl), or train_nccl=false to leave it out" % tmp]
    assert not (tmp / "log" / "env-preflight").exists()
