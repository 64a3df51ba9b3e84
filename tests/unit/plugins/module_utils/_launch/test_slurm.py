"""Unit tests for plugins/module_utils/_launch/slurm.py, _launch/platform_env.py and roles/train/files/slurm_node.py.

tests/fixtures/slurm/: sinfo_cpu.txt and scontrol_*.txt were recorded on the
molecule/launch_slurm cluster (Debian bookworm slurm-wlm 22.05.8); sinfo_gpu.txt is written in the
same format (sinfo -h -N -o '%R|%N|%T|%G|%c') for a GPU cluster with a drained and a down node.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess

import pytest

from ansible_collections.multinode.training.plugins.module_utils._launch import platform_env as pe
from ansible_collections.multinode.training.plugins.module_utils._launch import slurm as sl
from tests.unit.conftest import FIXTURES, ROOT

FIX = FIXTURES / "slurm"
NASTY_ARGS = ["--note", "a b", "it's \"quoted\"", "x;y && rm -rf /tmp/nope", "$HOME $(id) `id`", "", "tab\there",
              "new\nline", "*", "back\\slash", "--flag=va lue"]


def text(name):
    return (FIX / name).read_text(encoding="utf-8")


def spec(**over):
    base = {
        "job_name": "multinode-training", "nodes": (2, 2), "output": "/shared/jobs/slurm-%j.out",
        "partition": "debug", "account": "", "gres": "", "time": "", "constraint": "", "extra_args": [],
        "nnodes": "2", "nproc_per_node": 2, "rdzv_backend": "c10d", "rdzv_port": 29400, "rdzv_conf": "",
        "max_restarts": 0, "script": "/shared/code/smoke_train.py", "module": None, "args": list(NASTY_ARGS),
        "python": "/opt/multinode-training/venv/bin/python", "system_python": "python3",
        "bin_dir": "/shared/bin", "job_base": "/shared/jobs", "interface": "", "ip_version": 4,
        "env_files": ["/etc/multinode-training/nccl.env"], "timeout": 300, "stop_grace": 15, "tee": False,
    }
    base.update(over)
    return base


# ------------------------------------------------------------------ reading Slurm

def test_parse_sinfo_recorded_cpu_cluster():
    parts = sl.parse_sinfo(text("sinfo_cpu.txt"))
    assert list(parts) == ["debug"]
    assert parts["debug"]["nodes"] == ["launch_slurm-node1", "launch_slurm-node2"]
    assert parts["debug"]["usable"] == parts["debug"]["nodes"]
    assert parts["debug"]["gpus_per_node"] == 0


def test_parse_sinfo_gpu_cluster_counts_usable_nodes_and_min_gpus():
    parts = sl.parse_sinfo(text("sinfo_gpu.txt"))
    assert sorted(parts) == ["cpu", "debug", "gpu"]
    assert parts["gpu"]["usable"] == ["g1001", "g1002", "g1004"]
    assert parts["gpu"]["gpus_per_node"] == 4
    assert parts["cpu"]["usable"] == ["c01"]
    assert parts["debug"]["gpus_per_node"] == 0


@pytest.mark.parametrize("gres, gpus", [
    ("gpu:8", 8), ("gpu:a100:4(S:0-1),shard:8", 4), ("(null)", 0), ("", 0), ("gpu", 1),
    ("gpu:a100:2,gpu:v100:2", 4), ("shard:8", 0),
])
def test_gpus_in_gres(gres, gpus):
    assert sl.gpus_in_gres(gres) == gpus


def test_default_partition_and_scontrol_line():
    assert sl.default_partition(text("scontrol_partition.txt")) == "debug"
    fields = sl.parse_scontrol_line(text("scontrol_partition.txt"))
    assert fields["TotalNodes"] == "2"
    assert fields["Nodes"] == "launch_slurm-node[1-2]"


def test_parse_job_recorded_states():
    done = sl.parse_job(text("scontrol_job_completed.txt"))
    assert done["state"] == "COMPLETED" and done["nodes"] == "launch_slurm-node[1-2]"
    assert done["exit_code"] == "0:0" and done["reason"] is None
    pending = sl.parse_job(text("scontrol_job_pending.txt"))
    assert pending["state"] == "PENDING" and pending["reason"] == "Resources" and pending["nodes"] is None
    running = sl.parse_job(text("scontrol_job_running.txt"))
    assert running["state"] == "RUNNING" and running["num_nodes"] == "2"
    assert sl.parse_job("slurm_load_jobs error: Invalid job id specified") is None


@pytest.mark.parametrize("out, job", [("42\n", "42"), ("42;cluster\n", "42"), ("warning\n43\n", "43")])
def test_parse_sbatch(out, job):
    assert sl.parse_sbatch(out) == job


def test_parse_sbatch_refuses_garbage():
    with pytest.raises(sl.SlurmError, match="no job id"):
        sl.parse_sbatch("sbatch: error: Batch job submission failed")


@pytest.mark.parametrize("hostlist, hosts", [
    ("launch_slurm-node[1-2]", ["launch_slurm-node1", "launch_slurm-node2"]),
    ("g[001-003,010],c01", ["g001", "g002", "g003", "g010", "c01"]),
    ("single", ["single"]), ("", []),
])
def test_expand_hostlist(hostlist, hosts):
    assert sl.expand_hostlist(hostlist) == hosts


def test_srun_failures():
    log = ("srun: error: launch_slurm-node2: task 1: Exited with exit code 2\n"
           "srun: error: node3: tasks 0-1: Killed\n")
    assert sl.srun_failures(log) == [
        {"node": "launch_slurm-node2", "task": "1", "rc": 2, "what": "Exited with exit code 2"},
        {"node": "node3", "task": "0-1", "rc": None, "what": "Killed"}]


# ------------------------------------------------------------------ bad requests

@pytest.mark.parametrize("partition, nnodes, gpus, fragment", [
    ("nope", "2", 0, "train_slurm_partition=nope: the cluster has no such partition; valid: debug"),
    ("debug", "3", 0, "train_nnodes=3: partition debug has 2 node(s), 2 usable"),
    ("debug", "1:4", 0, "train_nnodes=1:4: partition debug has 2 node(s)"),
    ("debug", "2", 1, "partition debug has no GPUs"),
    ("debug", "", 0, "train_nnodes is empty: with train_launcher=slurm"),
    ("", "2", 0, None),
])
def test_check_request_cpu_cluster(partition, nnodes, gpus, fragment):
    parts = sl.parse_sinfo(text("sinfo_cpu.txt"))
    if fragment is None:
        assert sl.check_request(parts, partition, nnodes, gpus, "debug") == "debug"
        return
    with pytest.raises(sl.SlurmError) as err:
        sl.check_request(parts, partition, nnodes, gpus, "debug")
    assert fragment in str(err.value)


def test_check_request_gpu_cluster_names_node_states_and_gpu_counts():
    parts = sl.parse_sinfo(text("sinfo_gpu.txt"))
    with pytest.raises(sl.SlurmError, match="g1003 drained"):
        sl.check_request(parts, "gpu", "4", 0)
    with pytest.raises(sl.SlurmError, match="has 4 GPU"):
        sl.check_request(parts, "gpu", "2", 8)
    assert sl.check_request(parts, "gpu", "3", 4) == "gpu"
    with pytest.raises(sl.SlurmError, match="no default partition; valid: cpu, debug, gpu"):
        sl.check_request(parts, "", "1", 0)


@pytest.mark.parametrize("gres, gpus, expected", [
    ("", 0, ("", 0)), ("", 8, ("gpu:8", 8)), ("gpu:a100:4", 0, ("gpu:a100:4", 4)),
])
def test_gres_request(gres, gpus, expected):
    assert sl.gres_request(gres, gpus) == expected


def test_gres_request_refuses_both():
    with pytest.raises(sl.SlurmError, match="set one of them"):
        sl.gres_request("gpu:8", 8)


def test_resolve_nproc():
    assert sl.resolve_nproc("auto", 0, 0, 2) == 2
    assert sl.resolve_nproc("auto", 8, 4, 2) == 8
    assert sl.resolve_nproc("auto", 0, 4, 2) == 4
    assert sl.resolve_nproc("3", 8, 4, 2) == 3
    for bad in ("zero", "0", None):
        with pytest.raises(sl.SlurmError, match="train_nproc_per_node=%r: valid: auto or a positive integer" % bad):
            sl.resolve_nproc(bad, 0, 0, 2)


# ------------------------------------------------------------------ the batch script

def test_sbatch_options_and_refusals():
    lines = sl.sbatch_options(spec(gres="gpu:8", time="2:00:00", account="proj", constraint="a100",
                                   extra_args=["--exclusive", "--comment=run-42"], nodes=(1, 4)))
    assert lines == ["--job-name=multinode-training", "--nodes=1-4", "--ntasks-per-node=1",
                     "--output=/shared/jobs/slurm-%j.out", "--open-mode=append", "--partition=debug",
                     "--account=proj", "--gres=gpu:8", "--time=2:00:00", "--constraint=a100",
                     "--exclusive", "--comment=run-42"]
    with pytest.raises(sl.SlurmError, match=r"train_slurm_extra_args\[0\]"):
        sl.sbatch_options(spec(extra_args=["--comment=a b"]))
    with pytest.raises(sl.SlurmError, match=r"train_slurm_extra_args\[0\]"):
        sl.sbatch_options(spec(extra_args=["exclusive"]))
    with pytest.raises(sl.SlurmError, match="train_slurm_partition"):
        sl.sbatch_options(spec(partition="de bug"))


def test_render_has_one_job_with_preflight_and_one_torchrun_per_node():
    script = sl.render_batch_script(spec())
    assert script.startswith("#!/bin/bash\n")
    assert script.count("\nsrun ") == 2
    assert script.count("--kill-on-bad-exit=1") == 2
    assert "--ntasks-per-node=1" in script
    flat = script.replace(" \\\n  ", " ")
    assert '--rdzv_id "slurm-${SLURM_JOB_ID}"' in flat
    assert '--rdzv_endpoint "${rdzv_addr}:29400"' in flat
    for line in script.splitlines():
        if line.startswith("#SBATCH"):
            assert len(line.split()) == 2, line
    subprocess.run(["bash", "-n"], input=script, universal_newlines=True, check=True)


def run_rendered(tmp_path, script, python3='python3() { echo 10.0.0.11; }', check=True):
    """Run the rendered script with stand-ins for the Slurm commands and the helper's check; the stand-in
    srun writes the argv it receives, NUL-separated, as srun would hand it to the task (execve)."""
    calls = tmp_path / "calls"
    calls.mkdir()
    stubs = (
        'scontrol() { printf "%s\\n" launch_slurm-node1 launch_slurm-node2; }\n'
        + python3 + '\n'
        'srun() { n=$(ls "$CALLS" | wc -l); printf "%s\\0" "$@" > "$CALLS/$n"; }\n'
    )
    body = script.replace("set -euo pipefail\n", "set -euo pipefail\n" + stubs, 1)
    env = dict(os.environ, SLURM_JOB_ID="42", SLURM_JOB_NODELIST="launch_slurm-node[1-2]",
               SLURM_JOB_NUM_NODES="2", CALLS=str(calls), HOME="/home/someone")
    subprocess.run(["bash", "-c", body], env=env, check=check, cwd=str(tmp_path))
    return [(calls / str(i)).read_bytes().split(b"\0")[:-1] for i in range(len(os.listdir(calls)))]


# The helper's batch-host commands, stood in for: the first node's address, the probe's arguments, and a
# verdict that keeps launch_slurm-node2 only (exit 0) or refuses the job (VERDICT_RC=3).
FABRIC_PYTHON3 = """python3() {
  case "$2" in
    check) [ "$4" = launch_slurm-node2 ] && echo 10.0.0.12 || echo 10.0.0.11 ;;
    fabric-nodes) shift 2; printf '["%s","%s"]\\n' "$@" ;;
    fabric-schedule) echo '[[[0, 1]]]' ;;
    fabric-verdict) printf '%s\\n' "$*" > "$CALLS/../verdict_args"; [ "${VERDICT_RC:-0}" = 0 ] || return "$VERDICT_RC"
                    echo launch_slurm-node2 ;;
  esac
}"""


def test_fabric_gate_probes_every_node_then_runs_the_job_on_the_nodes_kept(tmp_path):
    s = spec(job_base=str(tmp_path / "jobs"), nnodes="1:2", nodes=(1, 2), fabric_check="gate", fabric_ratio=0.4,
             fabric_min_gbps=5, fabric_seconds=0.5, fabric_line_ratio=0.1, interface="eth1")
    script = sl.render_batch_script(s)
    subprocess.run(["bash", "-n"], input=script, universal_newlines=True, check=True)
    calls = [[a.decode() for a in call] for call in run_rendered(tmp_path, script, FABRIC_PYTHON3)]
    assert len(calls) == 3
    probe, run = calls[1], calls[2]
    # the probe: every allocated node, one rank each, its own rendezvous id on the first node's address
    assert probe[:5] == ["--nodes=2", "--ntasks-per-node=1", "--kill-on-bad-exit=1", "--job-name=fabric",
                         s["python"]]
    assert probe[6:8] == ["run", str(tmp_path / "jobs" / "42" / "fabric")]
    assert probe[probe.index("--timeout") + 1] == "240"  # the floor (_fabric/schedule.TIMEOUT_FLOOR) at 2 nodes
    torchrun = probe[probe.index("--") + 1:]
    assert torchrun[torchrun.index("--nnodes") + 1] == "2"
    assert torchrun[torchrun.index("--nproc_per_node") + 1] == "1"
    assert torchrun[torchrun.index("--rdzv_id") + 1] == "slurm-42-fabric"
    assert torchrun[torchrun.index("--rdzv_endpoint") + 1] == "10.0.0.11:29400"
    # the line rate of train_interface (the probe reads the default route's where it is unset)
    assert torchrun[-9:] == ["/shared/bin/fabric_probe.py", "--probe-nodes",
                             '["launch_slurm-node1","launch_slurm-node2"]', "--schedule", "[[[0, 1]]]",
                             "--seconds", "0.5", "--probe-iface", "eth1"]
    verdict_args = (tmp_path / "verdict_args").read_text().split()
    assert verdict_args[3:] == ["--mode", "gate", "--ratio", "0.4", "--min-gbps", "5.0", "--line-ratio", "0.1",
                                "--nnodes", "1:2", "launch_slurm-node1", "launch_slurm-node2"]
    # the job: on the node the verdict kept, which now hosts the rendezvous
    assert run[:2] == ["--nodes=1", "--nodelist=launch_slurm-node2"]
    assert run[run.index("--first") + 1] == "launch_slurm-node2"
    assert run[run.index("--timeout") + 1] == "300"
    job = run[run.index("--") + 1:]
    assert job[job.index("--rdzv_endpoint") + 1] == "10.0.0.12:29400"
    assert job[job.index("--rdzv_id") + 1] == "slurm-42"


def test_fabric_gate_refusal_ends_the_batch_script_before_torchrun(tmp_path):
    script = sl.render_batch_script(spec(job_base=str(tmp_path / "jobs"), fabric_check="gate"))
    os.environ["VERDICT_RC"] = "3"
    try:
        calls = run_rendered(tmp_path, script, FABRIC_PYTHON3, check=False)
    finally:
        del os.environ["VERDICT_RC"]
    assert [c[3] for c in calls] == [b"--job-name=preflight", b"--job-name=fabric"]


def test_no_fabric_step_when_off(tmp_path):
    script = sl.render_batch_script(spec(job_base="/shared/jobs"))
    assert "fabric" not in script and "--nodelist" not in script


def _helper_dir(tmp_path):
    """slurm_node.py (the train role copies it) and the helpers module slurm_job writes beside it."""
    import shutil
    from ansible_collections.multinode.training.plugins.module_utils._launch.slurm_job import write_helpers
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shutil.copy(str(ROOT / "roles" / "train" / "files" / "slurm_node.py"), str(bin_dir))
    write_helpers(str(bin_dir), True)
    return bin_dir


def _verdict(tmp_path, result, mode, nnodes, nodes=("node1", "node2", "node3"), options=()):
    import json
    import sys
    bin_dir = _helper_dir(tmp_path)
    job = tmp_path / "job"
    for node in nodes:
        (job / "fabric" / node).mkdir(parents=True)
    if result is not None:
        text = result if isinstance(result, dict) else json.loads((FIXTURES / "fabric" / result).read_text())
        (job / "fabric" / nodes[1] / "fabric.json").write_text(json.dumps(text))
    proc = subprocess.run([sys.executable, str(bin_dir / "slurm_node.py"), "fabric-verdict", str(job), "--mode", mode,
                           "--nnodes", nnodes] + list(options) + list(nodes),
                          capture_output=True, text=True, check=False)
    written = job / "fabric.json"
    return proc, json.loads(written.read_text()) if written.exists() else None


def test_node_helper_fabric_verdict_gate_refuses_naming_the_node(tmp_path):
    # delay1.json: node1's links at 0.3 Gbit/s against 9.1
    proc, written = _verdict(tmp_path, "delay1.json", "gate", "3")
    assert proc.returncode == 3 and proc.stdout == ""
    assert "train_fabric_check=gate: the job is not started; slow: node1:" in proc.stderr
    assert written["action"] == "fail" and list(written["flagged"]) == ["node1"] and written["mode"] == "gate"


def test_node_helper_fabric_verdict_elastic_drops_the_slow_node(tmp_path):
    proc, written = _verdict(tmp_path, "delay1.json", "gate", "2:3")
    assert proc.returncode == 0 and proc.stdout.split() == ["node2", "node3"]
    assert "dropped: node1" in proc.stderr and written["drop"] == ["node1"]


def test_node_helper_fabric_verdict_warn_keeps_every_node_and_no_result_is_flagged(tmp_path):
    proc, written = _verdict(tmp_path, "delay1.json", "warn", "3")
    assert proc.returncode == 0 and proc.stdout.split() == ["node1", "node2", "node3"]
    (tmp_path / "none").mkdir()
    proc, written = _verdict(tmp_path / "none", None, "gate", "3")
    assert proc.returncode == 3 and "no fabric result (the probe failed or hung there" in proc.stderr
    assert set(written["flagged"]) == {"node1", "node2", "node3"}


def test_node_helper_fabric_verdict_judges_two_nodes_by_the_line_rate(tmp_path):
    # two nodes, node1's egress at 50 Mbit/s: no median; the line rate (10 Gbit/s each) names the link
    result = {"nodes": ["node1", "node2"], "backend": "gloo", "device": "cpu", "allreduce_busbw_gbps": 0.05,
              "links": [{"a": "node1", "b": "node2", "gbps": 0.048, "latency_ms": 0.1},
                        {"a": "node2", "b": "node1", "gbps": 9.1, "latency_ms": 0.1}],
              "compute": {"node1": {"gflops": 40.0}, "node2": {"gflops": 41.0}},
              "line": {n: {"gbps": 10.0, "via": "eth0", "transport": "socket"} for n in ("node1", "node2")}}
    proc, written = _verdict(tmp_path, result, "gate", "2", nodes=("node1", "node2"))
    assert proc.returncode == 3
    assert "link node1 -> node2: 0.048 Gbit/s < 0.25 x line rate (node1 eth0 10 Gbit/s)" in proc.stderr
    assert sorted(written["flagged"]) == ["node1", "node2"] and written["line_ratio"] == 0.25
    (tmp_path / "off").mkdir()
    proc, written = _verdict(tmp_path / "off", result, "gate", "2", nodes=("node1", "node2"),
                             options=["--line-ratio", "0"])
    assert proc.returncode == 0 and written["flagged"] == {}


def test_node_helper_fabric_schedule_and_nodes(tmp_path):
    import json
    import sys
    bin_dir = _helper_dir(tmp_path)
    out = subprocess.run([sys.executable, str(bin_dir / "slurm_node.py"), "fabric-schedule", "4"],
                         capture_output=True, text=True, check=True).stdout
    assert len(json.loads(out)) == 3
    out = subprocess.run([sys.executable, str(bin_dir / "slurm_node.py"), "fabric-nodes", "a", "b c"],
                         capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == ["a", "b c"]


def test_train_args_reach_srun_verbatim_through_bash(tmp_path):
    """spaces, quotes, ';', '$', backquotes, empty, tab, newline, glob: each item one argument, unchanged."""
    s = spec(job_base=str(tmp_path / "jobs"))
    calls = run_rendered(tmp_path, sl.render_batch_script(s))
    assert len(calls) == 2
    preflight, run = [[a.decode() for a in call] for call in calls]
    assert preflight[:4] == ["--nodes=2", "--ntasks-per-node=1", "--kill-on-bad-exit=1", "--job-name=preflight"]
    assert preflight[4:8] == ["python3", "/shared/bin/slurm_node.py", "preflight", str(tmp_path / "jobs" / "42")]
    torchrun = run[run.index("--") + 1:]
    expected = sl.torchrun_argv(s)
    expected[expected.index(sl.RDZV_ID_SENTINEL)] = "slurm-42"
    expected[expected.index("%s:29400" % sl.RDZV_HOST_SENTINEL)] = "10.0.0.11:29400"
    assert torchrun == expected
    assert torchrun[-len(NASTY_ARGS):] == NASTY_ARGS
    # every rank under the rank wrapper (the job report's records and samples), then the script
    assert torchrun[-len(NASTY_ARGS) - 2:-len(NASTY_ARGS)] == ["/shared/bin/mt_rank.py", s["script"]]
    assert run[run.index("--first") + 1] == "launch_slurm-node1"
    assert run[run.index("--env-file") + 1] == "/etc/multinode-training/nccl.env"
    assert (tmp_path / "jobs" / "42").is_dir()


def test_render_module_and_elastic_nodes(tmp_path):
    s = spec(script=None, module="mypkg.train", args=[], nnodes="1:2", nodes=(1, 2), rdzv_conf="join_timeout=120",
             job_base=str(tmp_path / "jobs"), tee=True, chdir="/shared/work dir")
    script = sl.render_batch_script(s)
    assert "#SBATCH --nodes=1-2" in script
    run = [a.decode() for a in run_rendered(tmp_path, script)[1]]
    assert run[run.index("--rdzv-conf") + 1] == "join_timeout=120"
    assert run[run.index("--chdir") + 1] == "/shared/work dir"
    assert "--tee" in run
    torchrun = run[run.index("--") + 1:]
    assert torchrun[torchrun.index("--nnodes") + 1] == "1:2"
    assert torchrun[-2:] == ["-m", "mypkg.train"]


def test_local_rank_arg_reaches_the_rank_wrapper_through_bash(tmp_path):
    """train_local_rank_arg under Slurm: the wrapper's option before the script, as under ssh."""
    run = [a.decode() for a in run_rendered(tmp_path, sl.render_batch_script(
        spec(job_base=str(tmp_path / "jobs"), local_rank_arg=True)))[1]]
    torchrun = run[run.index("--") + 1:]
    assert torchrun[-len(NASTY_ARGS) - 3:-len(NASTY_ARGS)] == [
        "/shared/bin/mt_rank.py", "--local-rank-arg", "/shared/code/smoke_train.py"]


def test_render_refuses_bad_torchrun_options():
    with pytest.raises(sl.SlurmError, match="one of script or module"):
        sl.render_batch_script(spec(script=None))


# ------------------------------------------------------------------ slurm_node.py (node side)

def load_node_helper():
    path = ROOT / "roles" / "train" / "files" / "slurm_node.py"
    loaded = importlib.util.spec_from_file_location("slurm_node", str(path))
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    return module


def test_node_helper_default_interface_and_ipv6():
    node = load_node_helper()
    route = ("Iface\tDestination\tGateway\tFlags\n"
             "eth0\t00000000\t010011AC\t0003\n"
             "eth0\t000011AC\t00000000\t0001\n")
    assert node.default_interface(route) == "eth0"
    assert node.default_interface("Iface\tDestination\n") == ""
    inet6 = ("fe800000000000000042acfffe110002 2b 40 20 80 eth0\n"
             "fd000000000000000000000000000011 2b 40 00 80 eth0\n")
    assert node.ipv6_global(inet6, "eth0") == "fd00::11"
    assert node.ipv6_global(inet6, "ib0") == ""


def test_node_helper_names_a_node_without_an_address():
    node = load_node_helper()
    good = {"address": "10.0.0.11", "interface": "", "ip_version": 4}
    records = {"n1": dict(good, address="", interface="ib0", used_interface="ib0", interfaces=["eth0", "lo"]),
               "n2": good}
    assert node.address_problems(records, ["n1", "n2", "n3"]) == [
        'n1: no IPv4 address on train_interface="ib0" (used: ib0); valid: one of eth0, lo']


def _node_preflight(bin_dir, job, node, extra_env=None):
    """slurm_node.py preflight as srun runs it on ``node`` (SLURMD_NODENAME), with the system's python."""
    env = dict(os.environ, SLURMD_NODENAME=node, **(extra_env or {}))
    subprocess.run(["python3", str(bin_dir / "slurm_node.py"), "preflight", str(job)], env=env, check=True)


def test_slurm_preflight_refuses_what_the_ssh_launcher_refuses_in_its_words(tmp_path):
    """The five checks the ssh launcher makes and the Slurm preflight once lacked - env files, train_chdir,
    the code against the controller's manifest, the package sets, the DeepSpeed config's ops - each
    refused by slurm_node.py's preflight and check, with the very lines filter train_preflight_problems
    gives for the same nodes. Each node's probe runs for real (this interpreter is the job's python)."""
    import json
    import shutil
    import sys
    from ansible_collections.multinode.training.plugins.filter.train_preflight_problems import (
        train_deepspeed_config, train_preflight_problems)
    from ansible_collections.multinode.training.plugins.module_utils._train.preflight import code_manifest
    bin_dir = _helper_dir(tmp_path)
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("print('train')\n")
    (src / "ds.json").write_text(json.dumps({"optimizer": {"type": "Adam"}}))
    code = {n: tmp_path / n / "code" for n in ("n1", "n2")}
    for n, dest in code.items():
        shutil.copytree(str(src), str(dest))
    (code["n2"] / "train.py").write_text("print('stale')\n")                 # the copy differs on n2
    (tmp_path / "job.env").write_text("A=1\n")
    for n in ("n1", "n2"):      # torch and a DeepSpeed with cpu_adam prebuilt only, as its RECORD lists them
        for name, version, record in (("torch", "2.13.0+cpu", ""),
                                      ("deepspeed", "0.19.8", "deepspeed/ops/adam/cpu_adam_op.cpython-311.so,,\n")):
            info = tmp_path / n / ("%s-%s.dist-info" % (name, version))
            info.mkdir(parents=True)
            (info / "METADATA").write_text("Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (name, version))
            (info / "RECORD").write_text(record)
    job = tmp_path / "job"
    job.mkdir()
    config = train_deepspeed_config({"text": (src / "ds.json").read_text(), "path": "/c/ds.json"})
    checks = {"venv": "/venv", "require_deepspeed": True, "deepspeed_config": config, "allow_jit": False,
              "chdir": str(tmp_path / "nowhere"),
              "env_files": [{"var": "train_env_files", "path": str(tmp_path / "job.env")},
                            {"var": "train_nccl", "path": str(tmp_path / "nccl.env")}],
              "code": {"dest": str(tmp_path / "code"), "manifest": code_manifest(str(src) + "/")}}
    probes = {}
    for n in ("n1", "n2"):
        # each node sees its own copy of the code and script at the same path, as nodes do
        dest = tmp_path / "code"
        if dest.exists():
            dest.unlink()
        dest.symlink_to(code[n])
        if n == "n2":
            (tmp_path / "job.env").rename(tmp_path / "job.env.away")                   # an env file missing on n2
        spec = sl.preflight_spec({"python": sys.executable, "script": str(dest / "train.py"), "preflight": checks})
        (job / sl.PREFLIGHT_SPEC).write_text(spec)
        _node_preflight(bin_dir, job, n, {"PYTHONPATH": str(tmp_path / n)})
        probes[n] = json.loads((job / "preflight" / (n + ".json")).read_text())["probe"]
    # a package on one node only: as n2's env probe would list it (one interpreter here)
    probes["n2"]["environment"]["packages"].append("extra-pkg==1.0")
    (job / "preflight" / "n2.json").write_text(json.dumps(dict(
        json.loads((job / "preflight" / "n2.json").read_text()), probe=probes["n2"])))
    run = subprocess.run(["python3", str(bin_dir / "slurm_node.py"), "check", str(job), "n1", "n2"],
                         capture_output=True, text=True, check=False)
    ssh = train_preflight_problems(probes, ["n1", "n2"], "n1", "/venv", True, "", config, False)
    assert run.returncode == 3, run.stderr
    assert json.loads((job / "preflight.json").read_text())["errors"] == ssh
    assert run.stderr.splitlines() == ["multinode.training preflight: " + line for line in ssh]
    joined = "\n".join(ssh)
    # the lock of this run (tag prepare): every node's venv must be exactly it, as filter package_lock_problems says
    from ansible_collections.multinode.training.plugins.filter.package_set_diff import package_lock_problems
    lock = sorted(probes["n1"]["environment"]["packages"])
    (job / sl.PREFLIGHT_SPEC).write_text(sl.preflight_spec({"python": sys.executable, "preflight": dict(
        checks, lock=lock)}))
    run = subprocess.run(["python3", str(bin_dir / "slurm_node.py"), "check", str(job), "n1", "n2"],
                         capture_output=True, text=True, check=False)
    locked = package_lock_problems(probes, "/venv", lock)
    assert locked == ["n2: the venv /venv does not hold the job requirements' lock: extra-pkg==1.0 installed, not in "
                      "the lock; valid: the venv that multinode.training.wheel_distribute installs from "
                      "train_requirements (run with tag prepare)"]
    assert json.loads((job / "preflight.json").read_text())["errors"] == ssh + locked, run.stderr
    for says in ('n2: train_env_files="%s": missing on this node' % (tmp_path / "job.env"),
                 'n1: train_nccl="%s": missing on this node' % (tmp_path / "nccl.env"),
                 'n1: train_chdir="%s": not a directory on this node' % (tmp_path / "nowhere"),
                 'n2: train_code_dir="%s": 1 file(s) differ from the controller\'s train_code_src (train.py)'
                 % (tmp_path / "code"),
                 "n2: train_script=", "the venvs (/venv) differ between the nodes: extra-pkg: extra-pkg==1.0 on n2; "
                 "not installed on n1",
                 "train_deepspeed_config=/c/ds.json: optimizer \"Adam\" without offload_optimizer makes DeepSpeed "
                 "load op fused_adam"):
        assert says in joined, says


def _probe(env):
    return {"python": {"path": "/v/bin/python", "executable": True}, "environment": env, "probe_error": None,
            "script": None, "chdir": None, "env_files": [], "code": None, "connect": None}


def test_node_helper_check_prints_first_address(tmp_path):
    node = load_node_helper()
    env = {"python": "3.11.2", "torch": "2.13.0+cpu", "deepspeed": None, "ops": []}
    (tmp_path / "preflight").mkdir()
    for name, addr in (("n1", "fd00::11"), ("n2", "fd00::12")):
        (tmp_path / "preflight" / (name + ".json")).write_text(
            '{"address": "%s", "probe": %s}' % (addr, __import__("json").dumps(_probe(env))))
    (tmp_path / sl.PREFLIGHT_SPEC).write_text(sl.preflight_spec({"python": "/v/bin/python",
                                                                 "preflight": {"require_deepspeed": False}}))
    bin_dir = _helper_dir(tmp_path)
    out = subprocess.run(["python3", str(bin_dir / "slurm_node.py"), "check", str(tmp_path),
                          "n1", "n2"], stdout=subprocess.PIPE, universal_newlines=True, check=True).stdout
    assert out.strip() == "[fd00::11]"


def test_node_helper_check_warns_of_limited_locked_memory_on_an_rdma_node(tmp_path):
    """A node with RDMA devices whose step gets 8 MiB of locked memory (the hard limit recorded by its
    preflight): a warning naming it and the Slurm settings, in preflight.json and on stderr; no error."""
    import json
    env = {"python": "3.11.2", "torch": "2.13.0+cpu", "deepspeed": None, "ops": []}
    (tmp_path / "preflight").mkdir()
    memlock = {"n1": {"rdma": ["mlx5_0", "mlx5_1"], "limit": None}, "n2": {"rdma": ["mlx5_0"], "limit": 8 << 20},
               "n3": {"rdma": [], "limit": 64 << 10}}
    for name, addr in (("n1", "10.0.0.11"), ("n2", "10.0.0.12"), ("n3", "10.0.0.13")):
        (tmp_path / "preflight" / (name + ".json")).write_text(json.dumps(
            {"address": addr, "probe": _probe(env), "memlock": memlock[name]}))
    (tmp_path / sl.PREFLIGHT_SPEC).write_text(sl.preflight_spec({"python": "/v/bin/python",
                                                                 "preflight": {"require_deepspeed": False}}))
    bin_dir = _helper_dir(tmp_path)
    run = subprocess.run(["python3", str(bin_dir / "slurm_node.py"), "check", str(tmp_path), "n1", "n2", "n3"],
                         capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "10.0.0.11"
    warnings = json.loads((tmp_path / "preflight.json").read_text())["warnings"]
    assert warnings == [
        "n2: NCCL over InfiniBand/RoCE (mlx5_0) registers the job's buffers as locked memory, and the job gets 8 MiB "
        "of it here (the hard limit slurmd gives the job's steps): NCCL may fail registering memory (ibv_reg_mr) or "
        "fall back to sockets; valid: PropagateResourceLimitsExcept=MEMLOCK in slurm.conf (the submit shell's "
        "limit is not carried over) and slurmd started with LimitMEMLOCK=infinity"]
    assert "multinode.training preflight: warning: " + warnings[0] in run.stderr


# ------------------------------------------------------------------ env mode (platforms)

SENSECORE = {"MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "29500", "WORLD_SIZE": "2", "RANK": "0"}
AISTATION = {"MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456", "NNODES": "4", "NPROC_PER_NODE": "1",
             "RDZV_ID": "task-medical-qwen"}


def test_sensecore_mapping():
    mapped = pe.map_environment(SENSECORE)
    assert mapped["platform"] == "sensecore"
    assert mapped["nnodes"] == "2" and mapped["rdzv_endpoint"] == "10.1.2.3:29500"
    assert mapped["is_host"] is True and mapped["nproc_per_node"] is None
    worker = pe.map_environment(dict(SENSECORE, RANK="1"))
    assert worker["is_host"] is False
    assert worker["rdzv_id"] == mapped["rdzv_id"] and mapped["rdzv_id"].startswith("env-")
    nxt = pe.map_environment(dict(SENSECORE, MASTER_ADDR="10.1.9.9"))
    assert nxt["rdzv_id"] != mapped["rdzv_id"]


def test_aistation_mapping_and_elastic():
    mapped = pe.map_environment(AISTATION)
    assert (mapped["platform"], mapped["nnodes"], mapped["rdzv_id"], mapped["nproc_per_node"]) == \
        ("aistation", "4", "task-medical-qwen", "1")
    assert mapped["rdzv_endpoint"] == "job-master-0:23456" and mapped["is_host"] is None
    elastic = dict(AISTATION, MIN_NNODES="2", MAX_NNODES="4")
    del elastic["NNODES"]
    assert pe.map_environment(elastic)["nnodes"] == "2:4"
    assert pe.map_environment(SENSECORE, nnodes="1:2", rdzv_id="mine")["nnodes"] == "1:2"
    assert pe.map_environment(SENSECORE, rdzv_id="mine")["rdzv_id"] == "mine"


@pytest.mark.parametrize("environ, platform, fragment", [
    ({"MASTER_ADDR": "a", "WORLD_SIZE": "2"}, "auto",
     "platform sensecore): MASTER_PORT is not set; valid: the platform sets MASTER_ADDR and MASTER_PORT; "
     "this container has MASTER_ADDR, WORLD_SIZE"),
    ({"MASTER_ADDR": "a", "MASTER_PORT": "1"}, "sensecore", "WORLD_SIZE is not set"),
    ({"MASTER_ADDR": "a", "MASTER_PORT": "1"}, "aistation", "NNODES is not set"),
    ({"MASTER_ADDR": "a", "MASTER_PORT": "1", "MIN_NNODES": "2"}, "auto", "MAX_NNODES is not set"),
    ({"MASTER_ADDR": "a", "MASTER_PORT": "1", "MIN_NNODES": "4", "MAX_NNODES": "2"}, "auto", "greater than"),
    ({"MASTER_ADDR": "a", "MASTER_PORT": "1", "NNODES": "zwei"}, "auto", "NNODES='zwei' is not a positive"),
    ({}, "auto", "MASTER_ADDR is not set; valid: the platform sets MASTER_ADDR, MASTER_PORT and WORLD_SIZE "
                 "(SenseCore) or NNODES (AIStation); this container has none of"),
    ({"MASTER_ADDR": "a", "MASTER_PORT": "99999", "NNODES": "2"}, "auto", "outside 1-65535"),
    (SENSECORE, "kubernetes", "platform='kubernetes'"),
])
def test_platform_refusals_name_the_variable(environ, platform, fragment):
    with pytest.raises(pe.PlatformError) as err:
        pe.map_environment(environ, platform)
    assert fragment in str(err.value)
