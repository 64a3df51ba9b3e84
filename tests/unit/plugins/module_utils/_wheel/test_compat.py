"""Unit tests for _wheel.compat, .tags, .gpu, .verify and .node_probe: recorded nvidia-smi / cpuinfo / probe outputs and manifests."""
from __future__ import annotations

import copy
import json
import os

import pytest

from ansible_collections.multinode.training.plugins.module_utils._build import cuda_arch
from ansible_collections.multinode.training.plugins.module_utils._wheel import compat
from ansible_collections.multinode.training.plugins.module_utils._wheel import gpu
from ansible_collections.multinode.training.plugins.module_utils._wheel import node_probe
from ansible_collections.multinode.training.plugins.module_utils._wheel import tags
from ansible_collections.multinode.training.plugins.module_utils._wheel import verify
from tests.unit.conftest import FIXTURES

FIX = FIXTURES / "wheel_compat"


def fixture(name):
    return (FIX / name).read_text()


def manifest(name="manifest-cpu-avx512.json"):
    return json.loads(fixture(name))


CP311 = {"version": "3.11.2", "implementation": "cp", "tag": "cp311", "abi": "cp311",
         "platform": "linux_x86_64", "glibc": "2.36", "executable": "/usr/bin/python3"}
CP39 = dict(CP311, version="3.9.2", tag="cp39", abi="cp39", glibc="2.31")
CP312 = dict(CP311, version="3.12.3", tag="cp312", abi="cp312", glibc="2.39")
ARM = dict(CP311, platform="linux_aarch64")


def node_facts(python=None, venv=None, gpus=(), cpuinfo="cpuinfo-avx512-zen4.txt"):
    return {"python": python or CP311, "venv": venv or {"path": "/opt/v", "state": "absent"},
            "gpus": list(gpus), "cpuinfo": fixture(cpuinfo), "cpuinfo_path": "/proc/cpuinfo"}


# ---------------------------------------------------------------- wheel file names

@pytest.mark.parametrize("name,expected", [
    ("deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl",
     {"distribution": "deepspeed", "version": "0.19.8", "build": None,
      "python": ["cp311"], "abi": ["cp311"], "platform": ["linux_x86_64"]}),
    ("/x/dist/deepspeed-0.17.1+a1b2c3d-1-cp312-cp312-linux_x86_64.whl",
     {"distribution": "deepspeed", "version": "0.17.1+a1b2c3d", "build": "1",
      "python": ["cp312"], "abi": ["cp312"], "platform": ["linux_x86_64"]}),
    ("markupsafe-3.0.4-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_28_x86_64.whl",
     {"distribution": "markupsafe", "version": "3.0.4", "build": None, "python": ["cp311"], "abi": ["cp311"],
      "platform": ["manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64"]}),
])
def test_parse_wheel_filename(name, expected):
    assert tags.parse_wheel_filename(name) == expected


@pytest.mark.parametrize("name", ["deepspeed-0.19.8.tar.gz", "deepspeed-0.19.8-cp311.whl"])
def test_parse_wheel_filename_rejects(name):
    with pytest.raises(ValueError):
        tags.parse_wheel_filename(name)


@pytest.mark.parametrize("wheel,python,expected", [
    ("deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl", CP311, []),
    ("deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl", CP39, ["needs python tag cp311", "python 3.9.2 (cp39"]),
    ("deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl", CP312, ["needs python tag cp311"]),
    ("deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl", ARM, ["needs platform linux_x86_64", "on linux_aarch64"]),
    ("deepspeed-0.19.8-py3-none-any.whl", CP39, []),
    ("psutil-7.2.2-cp36-abi3-manylinux2010_x86_64.manylinux_2_12_x86_64.whl", CP311, ["needs python tag cp36"]),
    ("x-1-cp311-cp311-manylinux_2_28_x86_64.whl", CP311, []),
    ("x-1-cp311-cp311-manylinux_2_39_x86_64.whl", CP311, ["needs platform manylinux_2_39_x86_64", "glibc 2.36"]),
    ("x-1-cp311-cp311-manylinux2014_x86_64.whl", CP311, []),
    ("x-1-cp311-cp311-manylinux2014_aarch64.whl", CP311, ["needs platform"]),
    ("x-1-cp311-cp311d-linux_x86_64.whl", CP311, ["needs ABI cp311d"]),
])
def test_wheel_tag_problems(wheel, python, expected):
    problems = tags.wheel_tag_problems(wheel, python, "n1")
    assert len(problems) == (1 if expected else 0)
    for text in expected:
        assert text in problems[0]
    for problem in problems:
        assert problem.startswith('n1: wheel_distribute_python="%s": wheel %s needs ' % (python["executable"], wheel))
        assert "; valid: " in problem


# ---------------------------------------------------------------- CUDA arch coverage

@pytest.mark.parametrize("arch_list,cap,covered_by", [
    ("8.0;9.0+PTX", (8, 0), "8.0 (SASS)"),
    ("8.0;9.0+PTX", (8, 6), "8.0 (SASS)"),        # same major, higher minor runs sm_80 SASS
    ("8.0;9.0+PTX", (8, 9), "8.0 (SASS)"),
    ("8.0;9.0+PTX", (9, 0), "9.0+PTX (SASS)"),
    ("8.0;9.0+PTX", (10, 0), "9.0+PTX (PTX JIT)"),  # newer major: only through PTX
    ("8.0;9.0+PTX", (12, 0), "9.0+PTX (PTX JIT)"),
    ("8.0;9.0+PTX", (7, 5), None),                # older than every entry
    ("8.0;9.0", (10, 0), None),                   # no PTX: Blackwell cannot run sm_90 SASS
    ("8.6", (8, 0), None),                        # SASS does not run on a lower minor
    ("8.0+PTX", (7, 0), None),                    # PTX does not run on an older device
    ("7.0 7.5 8.0+PTX", (8, 6), "8.0+PTX (SASS)"),
    ("9.0a", (9, 0), "9.0a (SASS)"),
    ("9.0a", (9, 1), None),                       # arch-specific: exact only
    ("10.0f", (10, 3), "10.0f (SASS)"),           # family: same major
    ("8.0 9.0+PTX;", (9, 0), "9.0+PTX (SASS)"),
    ("", (9, 0), None),
])
def test_arch_covers(arch_list, cap, covered_by):
    assert gpu.arch_covers(cuda_arch.arch_entries(arch_list, "cuda.arch_list"), cap) == covered_by


@pytest.mark.parametrize("text, parsed, bad", [
    ("9.0+PTX;7.5;8.0", ["7.5", "8.0", "9.0+PTX"], None),
    ("8.0 8.6  9.0", ["8.0", "8.6", "9.0"], None),
    ("9.0;9.0+PTX", ["9.0+PTX"], None),
    ("9.0a;10.0f;12.0", ["9.0a", "10.0f", "12.0"], None),
    ("8.0;sm_banana", None, "'sm_banana' is"),
    ("sm_86;compute_90", None, "'sm_86', 'compute_90' are"),   # nvcc's names: torch takes neither
    ("8.0,9.0", None, "'8.0,9.0' is"),                         # nor a comma
    ("Ampere", None, "'Ampere' is"),
    ("86", None, "'86' is"),
    ("9.0+ptx", None, "'9.0+ptx' is"),
])
def test_the_build_and_the_wheel_check_read_an_arch_list_alike(text, parsed, bad):
    """One reading (_build/cuda_arch.arch_entries): the list the build accepts (and writes into the manifest) is
    the list the wheel's check accepts, entry for entry; each refusal names its own variable and the same
    tokens."""
    m = manifest("manifest-cuda-80-90ptx.json")
    m["cuda"]["arch_list"] = text
    if bad is None:
        assert cuda_arch.parse_arch_list(text) == parsed
        assert sorted({e["text"].replace("+PTX", "") for e in cuda_arch.arch_entries(text, "cuda.arch_list")}) == \
            sorted(p.replace("+PTX", "") for p in parsed)
        assert compat.manifest_problems(m, "m.json") == []
        return
    with pytest.raises(cuda_arch.ArchListError) as err:
        cuda_arch.parse_arch_list(text)
    assert str(err.value).startswith("deepspeed_build_cuda_arch_list=%r: %s not a compute capability" % (text, bad))
    assert compat.manifest_problems(m, "m.json") == [
        "manifest m.json: cuda.arch_list=%r: %s not a compute capability; valid tokens look like 7.5, 8.0, 9.0a, "
        "9.0+PTX (separated by ';'), e.g. '7.5;8.0;9.0+PTX'" % (text, bad)]


@pytest.mark.parametrize("name,expected", [
    ("nvidia-smi-h100x8.txt", [("NVIDIA H100 80GB HBM3", "9.0")] * 8),
    ("nvidia-smi-a10g.txt", [("NVIDIA A10G", "8.6")]),
    ("nvidia-smi-mixed-v100-l4.txt", [("Tesla V100-SXM2-32GB", "7.0"), ("NVIDIA L4", "8.9")]),
])
def test_parse_nvidia_smi(name, expected):
    gpus = cuda_arch.parse_nvidia_smi(fixture(name))
    assert [(g["name"], g["compute_cap"]) for g in gpus] == expected
    assert [g["index"] for g in gpus] == list(range(len(expected)))
    assert cuda_arch.parse_nvidia_smi("name, compute_cap\n" + fixture(name)) == gpus  # a header line is skipped


@pytest.mark.parametrize("smi,bad_indexes", [
    ("nvidia-smi-h100x8.txt", []),
    ("nvidia-smi-a100x4.txt", []),
    ("nvidia-smi-a10g.txt", []),
    ("nvidia-smi-b200x2.txt", []),                 # 10.0 >= 9.0+PTX
    ("nvidia-smi-mixed-v100-l4.txt", [0]),         # V100 7.0 not covered, L4 8.9 is
])
def test_gpu_problems_cuda_manifest(smi, bad_indexes):
    m = manifest("manifest-cuda-80-90ptx.json")
    problems = gpu.gpu_problems(m, cuda_arch.parse_nvidia_smi(fixture(smi)), "gpu1")
    assert len(problems) == len(bad_indexes)
    for problem, index in zip(problems, bad_indexes):
        assert problem.startswith("gpu1: ")
        assert "'8.0;9.0+PTX'" in problem and "GPU %d (Tesla V100-SXM2-32GB) has compute capability 7.0" % index in problem


def test_gpu_problems_without_ptx_refuses_blackwell():
    m = manifest("manifest-cuda-80-90ptx.json")
    m["cuda"]["arch_list"] = "8.0;9.0"
    problems = gpu.gpu_problems(m, cuda_arch.parse_nvidia_smi(fixture("nvidia-smi-b200x2.txt")), "b")
    # GPUs of one model are named together.
    assert len(problems) == 1 and "GPUs 0-1 (NVIDIA B200) have compute capability 10.0" in problems[0]


def test_gpu_check_skipped_with_a_note_on_gpuless_node():
    problems, notes = gpu.gpu_findings(manifest("manifest-cuda-80-90ptx.json"), [], "cpu9")
    assert problems == []
    assert notes == ["cpu9: no NVIDIA GPU (nvidia-smi absent or lists none): the GPU check of cuda wheel "
                     "deepspeed-0.17.1+a1b2c3d-cp312-cp312-linux_x86_64.whl (arch list '8.0;9.0+PTX') is skipped; "
                     "its CUDA ops need a GPU to run"]


def test_a_cpu_wheel_is_refused_on_a_node_with_gpus():
    """A CPU build (from make demo, or accelerator auto on a controller without nvcc) on GPU nodes: the
    job would run, rc 0, with every GPU idle; refused naming node, GPUs, wheel and the fix."""
    gpus = cuda_arch.parse_nvidia_smi(fixture("nvidia-smi-h100x8.txt"))
    m = manifest()
    assert gpu.gpu_problems(m, gpus, "gpu1") == [
        "gpu1: 8 NVIDIA GPU(s) (NVIDIA H100 80GB HBM3) on this node, but wheel %s is a cpu build (torch %s), "
        "which would leave them idle; valid: a cuda wheel: build_deepspeed.yml with deepspeed_build_accelerator=cuda "
        "and a CUDA torch (auto picks cuda only where the build host has nvcc and a CUDA torch)"
        % (m["wheel"], m["torch"]["version"])]
    mixed = gpu.gpu_problems(m, cuda_arch.parse_nvidia_smi(fixture("nvidia-smi-mixed-v100-l4.txt")), "n")
    assert len(mixed) == 1 and "2 NVIDIA GPU(s) (NVIDIA L4, Tesla V100-SXM2-32GB)" in mixed[0]


def test_a_cpu_wheel_on_a_node_without_gpus_is_fine():
    assert gpu.gpu_findings(manifest(), [], "n") == ([], [])


# ---------------------------------------------------------------- CPU flags

def test_cpu_problems_avx512_wheel_on_avx2_node():
    problems = compat.cpu_problems(manifest(), fixture("cpuinfo-avx2-haswell.txt"), "old1")
    assert len(problems) == 1
    assert problems[0].startswith("old1: wheel's ops were built with -march=znver3 and need CPU flags ")
    lacks = problems[0].split(" lacks ")[1].split()
    assert "avx512f" in lacks and "avx2" not in lacks and "fma" not in lacks
    assert lacks == sorted(lacks)


@pytest.mark.parametrize("cpuinfo,ok", [
    ("cpuinfo-avx512-zen4.txt", True),
    ("cpuinfo-avx2-haswell.txt", False),
    ("cpuinfo-arm64-grace.txt", False),
])
def test_cpu_problems(cpuinfo, ok):
    assert (compat.cpu_problems(manifest(), fixture(cpuinfo), "n") == []) is ok


def test_cpu_problems_avx2_wheel_on_haswell():
    m = manifest("manifest-cuda-80-90ptx.json")
    assert compat.cpu_problems(m, fixture("cpuinfo-avx2-haswell.txt"), "n") == []


def test_cpu_problems_empty_cpuinfo():
    assert "lists no CPU flags" in compat.cpu_problems(manifest(), "", "n", "/x/cpuinfo")[0]


# ---------------------------------------------------------------- torch, venv

@pytest.mark.parametrize("venv,expected", [
    ({"path": "/v", "state": "absent"}, []),
    ({"path": "/v", "state": "directory", "torch": None}, []),
    ({"path": "/v", "state": "directory", "torch": "2.13.0+cpu"}, []),
    ({"path": "/v", "state": "directory", "torch": "2.12.0"},
     ["n: wheel needs torch 2.13.0+cpu, node's venv /v has torch 2.12.0"]),
    ({"path": "/v", "state": "directory", "torch": "2.13.0"},   # the CUDA build is not the CPU build
     ["n: wheel needs torch 2.13.0+cpu, node's venv /v has torch 2.13.0 "]),
])
def test_torch_problems_cpu(venv, expected):
    problems = compat.torch_problems(manifest(), venv, "n")
    assert len(problems) == len(expected)
    for problem, start in zip(problems, expected):
        assert problem.startswith(start)


def test_torch_problems_cuda_version():
    m = manifest("manifest-cuda-80-90ptx.json")
    venv = {"path": "/v", "state": "directory", "torch": "2.8.0+cu128", "torch_cuda": "12.6"}
    assert compat.torch_problems(m, venv, "g") == [
        "g: wheel needs torch built for CUDA 12.8, node's venv /v has torch 2.8.0+cu128 built for CUDA 12.6"]
    venv["torch_cuda"] = "12.8"
    assert compat.torch_problems(m, venv, "g") == []


@pytest.mark.parametrize("text,expected", [
    ("__version__ = '2.8.0+cu128'\ncuda: Optional[str] = '12.8'\nhip = None\n", "12.8"),
    ("__version__ = '2.13.0+cpu'\ncuda: Optional[str] = None\n", None),
    ("cuda = '11.8'\n", "11.8"),
    ("", None),
])
def test_parse_torch_cuda(text, expected):
    assert node_probe.parse_torch_cuda(text) == expected


def test_venv_facts_states(tmp_path):
    absent = node_probe.venv_facts(str(tmp_path / "venv"))
    assert absent["state"] == "absent" and not absent.get("blocked_by")

    blocker = tmp_path / "file"
    blocker.write_text("x")
    blocked = node_probe.venv_facts(str(blocker / "sub" / "venv"))
    assert blocked["state"] == "absent" and blocked["blocked_by"] == str(blocker)
    assert compat.venv_problems(blocked, "n") == [
        "n: wheel_distribute_venv %s cannot be created: %s is a file, not a directory" % (blocker / "sub" / "venv", blocker)]

    as_file = node_probe.venv_facts(str(blocker))
    assert as_file["state"] == "file"
    assert compat.venv_problems(as_file, "n")[0].startswith("n: wheel_distribute_venv %s is a file" % blocker)

    dangling = tmp_path / "dangling"
    os.symlink(str(tmp_path / "gone"), str(dangling))
    assert node_probe.venv_facts(str(dangling))["state"] == "other"
    assert "dangling symlink" in compat.venv_problems(node_probe.venv_facts(str(dangling)), "n")[0]


def test_venv_facts_reads_torch_and_marker(tmp_path):
    release = tmp_path / "venv.releases" / "abc"
    site = release / "lib" / "python3.11" / "site-packages"
    (site / "torch-2.8.0+cu128.dist-info").mkdir(parents=True)
    (site / "torch-2.8.0+cu128.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: torch\nVersion: 2.8.0+cu128\n\nVersion: not-this\n")
    (site / "torch").mkdir()
    (site / "torch" / "version.py").write_text("cuda: Optional[str] = '12.8'\n")
    m = manifest()
    marker = {"wheel_sha256": m["wheel_sha256"], "torch": m["torch"]["version"], "verified": True}
    (release / node_probe.MARKER_NAME).write_text(json.dumps(marker))
    link = tmp_path / "venv"
    os.symlink(str(release), str(link))

    facts = node_probe.venv_facts(str(link))
    assert facts["state"] == "directory" and facts["symlink"] and facts["target"] == str(release)
    assert (facts["torch"], facts["torch_cuda"]) == ("2.8.0+cu128", "12.8")
    assert facts["marker"] == marker
    assert node_probe.installed(m, facts)
    assert not node_probe.installed(dict(m, wheel_sha256="0" * 64), facts)
    facts["marker"] = dict(marker, verified=False)
    assert not node_probe.installed(m, facts)
    assert facts["packages"] == ["torch==2.8.0+cu128"]


def test_installed_needs_this_runs_requirements_lock(tmp_path):
    """A venv of this wheel installed with other (or no) job requirements is not installed: otherwise a
    changed train_requirements would be copied to the nodes and never installed."""
    m = manifest()
    marker = {"wheel_sha256": m["wheel_sha256"], "torch": m["torch"]["version"], "verified": True,
              "requirements_sha256": "a" * 64}
    lock = ["torch==%s" % m["torch"]["version"], "accelerate==1.15.0"]
    facts = {"state": "directory", "marker": marker, "packages": lock + ["pip==24.0", "setuptools==66.1.1"]}
    assert node_probe.installed(m, facts, "a" * 64, lock)
    assert not node_probe.installed(m, facts, "b" * 64, lock)  # requirements added or changed: another lock
    assert not node_probe.installed(m, facts, "", None)  # every requirement removed: back to the base set
    assert not node_probe.installed(m, dict(marker=dict(marker, requirements_sha256=""), state="directory"), "a" * 64, lock)
    # the same lock, a package changed by hand on the node
    assert not node_probe.installed(m, dict(facts, packages=lock[:1] + ["accelerate==1.0.0"]), "a" * 64, lock)
    assert not node_probe.installed(m, dict(facts, packages=lock + ["six==1.17.0"]), "a" * 64, lock)


# ---------------------------------------------------------------- the whole guard

def test_node_problems_compatible_node():
    assert compat.node_problems(manifest(), node_facts(), "node1") == []


def test_node_problems_reports_every_problem_of_a_node():
    venv = {"path": "/opt/v", "state": "directory", "torch": "2.12.0"}
    problems = compat.node_problems(manifest(), node_facts(python=CP39, venv=venv, cpuinfo="cpuinfo-avx2-haswell.txt"),
                                    "node3")
    assert [p.split(":")[0] for p in problems] == ["node3"] * 3
    assert "needs python tag cp311" in problems[0]
    assert "needs torch 2.13.0+cpu" in problems[1] and "has torch 2.12.0" in problems[1]
    assert "lacks " in problems[2] and "avx512f" in problems[2]


def test_node_problems_cuda_manifest_gpu_node():
    m = manifest("manifest-cuda-80-90ptx.json")
    gpus = cuda_arch.parse_nvidia_smi(fixture("nvidia-smi-h100x8.txt"))
    venv = {"path": "/v", "state": "directory", "torch": "2.8.0+cu128", "torch_cuda": "12.8"}
    assert compat.node_problems(m, node_facts(python=CP312, venv=venv, gpus=gpus, cpuinfo="cpuinfo-avx2-haswell.txt"),
                                "h100") == []
    gpus = cuda_arch.parse_nvidia_smi(fixture("nvidia-smi-mixed-v100-l4.txt"))
    problems = compat.node_problems(m, node_facts(python=CP312, venv=venv, gpus=gpus), "mixed")
    assert len(problems) == 1 and "Tesla V100" in problems[0]


def test_node_problems_broken_interpreter():
    facts = node_facts(python={"executable": "/usr/bin/python3", "error": "No such file or directory"})
    assert compat.node_problems(manifest(), facts, "n") == [
        'n: wheel_distribute_python="/usr/bin/python3": cannot run on this node (No such file or directory); '
        'valid: an interpreter path on every node, python cp311 for wheel deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl']
    # a failure of several lines stays one line
    facts = node_facts(python={"executable": "/usr/bin/python9", "error": "Traceback\n  boom\nError: x"})
    assert compat.node_problems(manifest(), facts, "n")[0].startswith(
        'n: wheel_distribute_python="/usr/bin/python9": cannot run on this node (Traceback boom Error: x); valid: ')


@pytest.mark.parametrize("change,expected", [
    ({}, []),
    ({"schema": 2}, ["has schema 2"]),
    ({"wheel_sha256": "abc"}, ["is not a sha256"]),
    ({"wheel": "deepspeed.tar.gz"}, ["not a wheel file name"]),
    ({"ops": [{"name": "x", "builder": ""}]}, ["ops[0] lacks 'builder'", "ops[0] lacks 'module'"]),
])
def test_manifest_problems(change, expected):
    m = manifest()
    m.update(change)
    problems = compat.manifest_problems(m, "/d/m.json")
    assert len(problems) == len(expected)
    for problem, text in zip(problems, expected):
        assert problem.startswith("manifest /d/m.json") and text in problem


def test_manifest_problems_arch_list_of_a_cuda_build():
    m = manifest("manifest-cuda-80-90ptx.json")
    assert compat.manifest_problems(m, "m.json") == []
    m["cuda"]["arch_list"] = "8.0;9.0+PTX;ampere-ish"
    assert compat.manifest_problems(m, "m.json") == [
        "manifest m.json: cuda.arch_list='8.0;9.0+PTX;ampere-ish': 'ampere-ish' is not a compute capability; valid "
        "tokens look like 7.5, 8.0, 9.0a, 9.0+PTX (separated by ';'), e.g. '7.5;8.0;9.0+PTX'"]


def test_manifest_problems_missing_key():
    m = manifest()
    del m["ops"]
    assert compat.manifest_problems(m, "m.json") == ["manifest m.json lacks key 'ops'"]


# ---------------------------------------------------------------- post-install verification

def test_probe_ok():
    probe = verify.parse_probe_output(fixture("probe-ok.txt"))
    assert probe["torch"] == "2.13.0+cpu"
    assert verify.verify_problems(manifest(), probe, "node1", "/opt/v") == []
    env = verify.env_summary(manifest(), probe, "/opt/v", "/opt/v/bin/python")
    assert env["ops"] == ["cpu_adam", "deepspeed_shm_comm"] and env["deepspeed"] == "0.19.8"
    assert env["wheel_sha256"] == manifest()["wheel_sha256"]


def test_probe_jit_and_load_failure():
    probe = verify.parse_probe_output(fixture("probe-jit.txt"))
    problems = verify.verify_problems(manifest(), probe, "node2", "/opt/v")
    assert any("op cpu_adam (cpu_adam) is not marked installed" in p for p in problems)
    assert any("op cpu_adam loaded module cpu_adam, the manifest's prebuilt module is deepspeed.ops.adam.cpu_adam_op"
               in p for p in problems)
    assert any("op deepspeed_shm_comm failed to load through ShareMemCommBuilder" in p and "libgomp" in p for p in problems)
    assert any("JIT-compiled (TORCH_EXTENSIONS_DIR got /tmp/wheel-distribute-jit-x1/cpu_adam" in p for p in problems)
    assert all(p.startswith("node2: ") for p in problems)
    assert verify.env_summary(manifest(), probe, "/v", "/v/bin/python")["ops"] == ["cpu_adam"]


@pytest.mark.parametrize("change,text", [
    ({"torch": "2.12.0"}, "has torch 2.12.0, the wheel needs 2.13.0+cpu"),
    ({"deepspeed": "0.18.0"}, "has DeepSpeed 0.18.0, the manifest says 0.19.8"),
    ({"accelerator": "cuda"}, "selected accelerator cuda, the wheel was built for cpu"),
    ({"error": "ModuleNotFoundError: No module named 'deepspeed'"}, "importing torch/DeepSpeed failed"),
])
def test_probe_mismatches(change, text):
    probe = verify.parse_probe_output(fixture("probe-ok.txt"))
    probe.update(change)
    problems = verify.verify_problems(manifest(), probe, "n", "/v")
    assert len(problems) == 1 and text in problems[0]


def test_probe_missing_output():
    assert verify.parse_probe_output("Traceback ...\nSegmentation fault\n") is None
    assert "printed no result" in verify.verify_problems(manifest(), None, "n", "/v")[0]


def test_probe_file_must_be_the_wheels():
    probe = verify.parse_probe_output(fixture("probe-ok.txt"))
    probe["ops"]["cpu_adam"]["file"] = "/root/.cache/torch_extensions/py311_cpu/cpu_adam/cpu_adam_op.so"
    problems = verify.verify_problems(manifest(), probe, "n", "/v")
    assert len(problems) == 1 and "not the prebuilt deepspeed/ops/adam/cpu_adam_op" in problems[0]


def test_probe_script_compiles_and_spec_lists_builders():
    compile(verify.PROBE_SCRIPT, "probe", "exec")
    compile(node_probe.INTERPRETER_SCRIPT, "interp", "exec")
    assert json.loads(verify.probe_spec(manifest())) == {"ops": [
        {"name": "cpu_adam", "builder": "CPUAdamBuilder"}, {"name": "deepspeed_shm_comm", "builder": "ShareMemCommBuilder"}]}


# Recorded on Debian 12 (python3 3.11.2-1+b1) as a node without python3.11-venv looks: the package's
# /usr/lib/python3.11/ensurepip hidden by an empty directory bind-mounted over it (unshare -m), then
# INTERPRETER_SCRIPT under /usr/bin/python3 and `python3 -m venv` (its refusal: venv-debian12-without-venv.txt).
def test_a_python_without_its_venv_package_is_refused_naming_the_package():
    python = json.loads(fixture("interpreter-debian12-without-venv.json"))
    assert "apt install python3.11-venv" in fixture("venv-debian12-without-venv.txt")
    facts = node_facts(python=python)
    assert compat.node_problems(manifest(), facts, "n") == [
        'n: wheel_distribute_python="/usr/bin/python3": cannot make a venv: /usr/lib/python3.11/ensurepip/__main__.py '
        'is missing, which Debian and Ubuntu ship in package python3.11-venv (python -m venv fails without it); '
        'valid: apt install python3.11-venv on the node, or wheel_distribute_venv_existing with an environment of '
        'your own']
    # the same interpreter with the package, and an environment of the user's own, which needs no venv
    assert compat.node_problems(manifest(), node_facts(python=dict(python, ensurepip=True)), "n") == []
    existing = {"path": "/opt/conda", "state": "directory", "existing": True, "python_version": "3.11.2"}
    assert not [p for p in compat.node_problems(manifest(), node_facts(python=python, venv=existing), "n")
                if "ensurepip" in p]


def test_interpreter_script_runs_here():
    import subprocess
    import sys
    import sysconfig
    out = json.loads(subprocess.check_output([sys.executable, "-c", node_probe.INTERPRETER_SCRIPT]))
    assert out["tag"] == "cp%d%d" % sys.version_info[:2]
    assert out["platform"].startswith("linux_")
    assert out["ensurepip"] is True and out["stdlib"] == sysconfig.get_path("stdlib")
    assert tags.wheel_tag_problems("x-1-%s-%s-%s.whl" % (out["tag"], out["abi"], out["platform"]), out, "h") == []


# ---------------------------------------------------------------- consistency report

def _env(**change):
    base = {"python_version": "3.11.2", "torch": "2.13.0+cpu", "torch_cuda": None, "deepspeed": "0.19.8",
            "ops": ["cpu_adam", "deepspeed_shm_comm"], "wheel_sha256": "a" * 64}
    base.update(change)
    return base


def test_consistency_identical():
    report = verify.consistency_report({"n1": _env(), "n2": _env(), "n3": _env()})
    assert report["consistent"] and report["differences"] == []
    assert "torch: 2.13.0+cpu on all 3 nodes" in report["lines"]


def test_consistency_names_the_odd_node():
    envs = {"n1": _env(), "n2": _env(torch="2.12.0", ops=["cpu_adam"]), "n3": _env()}
    report = verify.consistency_report(envs)
    assert not report["consistent"]
    assert report["differences"] == [
        "n2 has torch 2.12.0, 2 node(s) have 2.13.0+cpu",
        "n2 has ops cpu_adam, 2 node(s) have cpu_adam deepspeed_shm_comm",
    ]
    assert report["fields"]["torch"] == {"2.13.0+cpu": ["n1", "n3"], "2.12.0": ["n2"]}


def test_consistency_tie_names_the_later_group():
    report = verify.consistency_report({"a": _env(deepspeed="0.19.8"), "b": _env(deepspeed="0.19.9")})
    assert report["differences"] == ["b has deepspeed 0.19.9, 1 node(s) have 0.19.8"]


def test_consistency_does_not_mutate_input():
    envs = {"n1": _env(), "n2": _env(python_version="3.11.9")}
    before = copy.deepcopy(envs)
    verify.consistency_report(envs)
    assert envs == before


# ---------------------------------------------------------------- GPU code read from the binaries

def coverage_manifest(name):
    """Manifests of real CUDA builds on this machine (fused_adam + host-only cpu_adam added)."""
    m = manifest(name)
    m["ops"].append({"name": "cpu_adam", "builder": "CPUAdamBuilder", "build_var": "DS_BUILD_CPU_ADAM",
                     "module": "deepspeed.ops.adam.cpu_adam_op", "file": "x.so", "cuda": None})
    return m


def gpus(name):
    return cuda_arch.parse_nvidia_smi(fixture(name))


def test_recorded_cuda_manifests_hold_coverage():
    a = coverage_manifest("manifest-cuda-fused_adam-80-90ptx.json")
    b = coverage_manifest("manifest-cuda-fused_adam-90.json")
    assert a["ops"][0]["cuda"] == {"sass": ["8.0", "9.0"], "ptx": ["9.0"]}
    assert b["ops"][0]["cuda"] == {"sass": ["9.0"], "ptx": []}


@pytest.mark.parametrize("smi", ["nvidia-smi-h100x8.txt", "nvidia-smi-a100x4.txt", "nvidia-smi-a10g.txt"])
def test_sass_covered_gpus_accepted_silently(smi):
    # A10G is 8.6: sm_80 SASS runs on it (same major, lower minor).
    assert gpu.gpu_findings(coverage_manifest("manifest-cuda-fused_adam-80-90ptx.json"), gpus(smi), "n") == ([], [])


def test_ptx_only_coverage_accepted_with_jit_warning():
    problems, notes = gpu.gpu_findings(coverage_manifest("manifest-cuda-fused_adam-80-90ptx.json"),
                                       gpus("nvidia-smi-b200x2.txt"), "b1")
    assert problems == []
    assert len(notes) == 1
    assert notes[0].startswith("b1: GPUs 0-1 (NVIDIA B200) have compute capability 10.0, op fused_adam of wheel "
                               "deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl has no SASS for it and runs from "
                               "PTX compute_90: the driver JIT-compiles it on first use")


def test_uncovered_gpu_refused_naming_node_gpu_cap_op_and_binary():
    problems, _notes = gpu.gpu_findings(coverage_manifest("manifest-cuda-fused_adam-80-90ptx.json"),
                                        gpus("nvidia-smi-mixed-v100-l4.txt"), "old2")
    assert problems == [
        "old2: GPU 0 (Tesla V100-SXM2-32GB) has compute capability 7.0, which op fused_adam of wheel "
        "deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl does not cover: its binary has SASS sm_80, sm_90; "
        "PTX compute_90 (arch list '8.0;9.0+PTX'); it needs SASS sm_7<minor <= 0> or PTX of an arch <= 7.0"]


@pytest.mark.parametrize("smi, refused", [
    ("nvidia-smi-h100x8.txt", False),
    ("nvidia-smi-a100x4.txt", True),   # no sm_8x, no PTX
    ("nvidia-smi-b200x2.txt", True),   # sm_90 SASS does not run on 10.0, no PTX to JIT
])
def test_sass_only_build(smi, refused):
    m = coverage_manifest("manifest-cuda-fused_adam-90.json")
    problems, notes = gpu.gpu_findings(m, gpus(smi), "n")
    assert bool(problems) == refused and notes == []
    assert all("its binary has SASS sm_90 (arch list '9.0')" in p for p in problems)


def test_node_problems_use_the_binary_coverage():
    m = coverage_manifest("manifest-cuda-fused_adam-80-90ptx.json")
    # The arch list alone would accept 7.0 nowhere either; the binary is what is judged: an
    # arch list that claims sm_70 does not help when the binary lacks it.
    m["cuda"]["arch_list"] = "7.0;8.0;9.0+PTX"
    facts = node_facts(python=dict(CP311, version="3.11.7"), gpus=gpus("nvidia-smi-mixed-v100-l4.txt"))
    assert any("GPU 0 (Tesla V100-SXM2-32GB) has compute capability 7.0, which op fused_adam" in p
               for p in compat.node_problems(m, facts, "old2"))


@pytest.mark.parametrize("have, want, same", [
    ("2.13.0", "2.13.0+cu130", True),      # PyPI CUDA torch: dist-info vs torch.__version__
    ("2.13.0+cu130", "2.13.0+cu130", True),
    ("2.13.0+cpu", "2.13.0+cu130", False),
    ("2.13.0", "2.13.0+cpu", False),       # PyPI's unlabelled torch is a CUDA build
    ("2.13.0+cu130", "2.13.0", False),
    ("2.12.0", "2.13.0+cu130", False),
])
def test_same_torch_version(have, want, same):
    assert compat.same_torch_version(have, want) is same


def test_env_report_names_an_expected_node_without_an_environment():
    from ansible_collections.multinode.training.plugins.module_utils._wheel import verify
    report = verify.env_report({}, ["node2"])
    assert not report["consistent"]
    assert report["differences"] == ["node2: no verified environment (unreachable, refused or failed before verification)"]
    assert report["lines"][-1] == "MISSING node2"
