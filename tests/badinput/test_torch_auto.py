# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""deepspeed_build_torch_requirement auto through the real `ansible-playbook build_deepspeed.yml`.

The inventory's group train holds nodes whose nvidia-smi is a stand-in answering as a recorded node
(tests/fixtures/nvidia_smi: ten A40s on driver 550.127.05, two H100s on driver 580.95.05); the build host is
this machine, whose nvcc is CUDA 13.0. `--skip-tags toolchain,deepspeed_build` runs only what runs before any work (the check of the
variables, the nodes' nvidia-smi, the build's preflight), so no toolchain is installed and nothing is built.
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import tempfile

import pytest

from test_badinput import FIXTURES, base_vars, failure_messages, run_playbook  # pylint: disable=import-error

SMI = os.path.join(os.path.dirname(FIXTURES), "..", "fixtures", "nvidia_smi")
NODES = {"gpu550": ("a40x10.csv", "a40x10_driver_550.csv"), "gpu580": ("h100x2.csv", "h100x2_driver_580.csv")}


def stand_in(path, gpus, drv):
    """An nvidia-smi that answers the two recorded queries and fails any other."""
    with open(path, "w") as handle:
        handle.write("#!/bin/sh\n"
                     'if [ "$*" = "--query-gpu=name,compute_cap --format=csv,noheader" ]; then cat %s; exit 0; fi\n'
                     'if [ "$*" = "--query-gpu=driver_version --format=csv,noheader" ]; then cat %s; exit 0; fi\n'
                     'echo "stand-in nvidia-smi: no recorded answer to: $*" >&2; exit 9\n'
                     % (os.path.realpath(os.path.join(SMI, gpus)), os.path.realpath(os.path.join(SMI, drv))))
    os.chmod(path, stat.S_IRWXU)


def run(nodes, **variables):
    parent = tempfile.mkdtemp(prefix="torch-auto-")
    try:
        tmp = os.path.join(parent, "case")
        os.mkdir(tmp)
        local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
        train = {}
        for name in nodes:
            stand_in(os.path.join(parent, name), *NODES[name])
            train[name] = dict(local, _deepspeed_build_nvidia_smi=os.path.join(parent, name))
        inventory = os.path.join(parent, "hosts.json")
        with open(inventory, "w") as handle:
            json.dump({"all": {"hosts": {"localhost": local}, "children": {"train": {"hosts": train}}}}, handle)
        extra = dict(base_vars("build_deepspeed.yml", tmp), **variables)
        proc, report, _seconds = run_playbook("build_deepspeed.yml", extra, tmp, ["-i", inventory, "--skip-tags", "toolchain,deepspeed_build"])
        return proc, report
    finally:
        shutil.rmtree(parent, ignore_errors=True)


def messages(report, task):
    return [str(r.get("msg")) for play in report.get("plays", []) for t in play.get("tasks", [])
            if t["task"]["name"].endswith(" : " + task) for r in t["hosts"].values() if "msg" in r]


@pytest.fixture(scope="module")
def runs():
    empty = tempfile.mkdtemp(prefix="torch-auto-wheels-")
    try:
        offline = {"deepspeed_build_pip_args": ["--no-index", "--find-links", empty]}
        return {"580": run(["gpu580"]),
                "550 cpu": run(["gpu550"], deepspeed_build_accelerator="cpu", **offline),
                "550 nvcc 13": run(["gpu550", "gpu580"])}
    finally:
        shutil.rmtree(empty, ignore_errors=True)


def test_driver_580_picks_pypis_cuda_13_torch_and_says_why(runs):
    proc, report = runs["580"]
    said = messages(report, "Say which torch auto picked, and why")
    assert proc.returncode == 0, failure_messages(report) or proc.stderr[-2000:]
    assert said == ["localhost: deepspeed_build_torch_requirement=auto picked torch==2.13.0: the lowest NVIDIA driver "
                    "of the 1 GPU node(s), 580.95.05 on gpu580, runs CUDA 13.0; nvcc 13.0 compiles against it"], said
    # Then the one line on what the build makes and why (its content depends on the torch pip resolves here).
    plan = messages(report, "Say what the build makes, and why")
    assert len(plan) == 1 and plan[0].startswith(("localhost: a cpu wheel", "localhost: a cuda wheel")), plan


def test_driver_550_picks_a_cuda_12_torch_and_says_why(runs):
    proc, report = runs["550 cpu"]
    said = messages(report, "Say which torch auto picked, and why")
    # No +cu126 build is reachable offline: the run stops before any build, after saying what it picked.
    assert proc.returncode != 0 and failure_messages(report), proc.stderr[-2000:]
    assert said == ["localhost: deepspeed_build_torch_requirement=auto picked torch==2.13.0+cu126: the lowest NVIDIA "
                    "driver of the 1 GPU node(s), 550.127.05 on gpu550, runs CUDA 12.6 (not torch==2.13.0, "
                    "torch==2.13.0+cu130: CUDA 13.0 needs a driver >= 580.65.06, gpu550 has 550.127.05)"], said


def test_nvcc_13_for_a_driver_550_node_is_refused_before_any_work(runs):
    proc, report = runs["550 nvcc 13"]
    failed = failure_messages(report)
    assert proc.returncode != 0 and len(failed) == 1, failed or proc.stderr[-2000:]
    assert failed[0].startswith("deepspeed_build_torch_requirement=auto: no build of torch 2.13.0 fits: "), failed
    for part in ("torch==2.13.0, torch==2.13.0+cu130: CUDA 13.0 needs a driver >= 580.65.06, gpu550 has 550.127.05",
                 "torch==2.13.0+cu126: nvcc 13.0 on the build host compiles no DeepSpeed op against CUDA 12.6",
                 "valid: a newer NVIDIA driver on the GPU nodes"):
        assert part in failed[0], failed
    assert not messages(report, "Say which torch auto picked, and why")
