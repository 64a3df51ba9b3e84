# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The semantic checks that argument specs cannot say, per variable, for every role of the collection.

``meta/argument_specs.yml`` gives type, elements and choices (checked by ``_validate.engine.check_option_typed``);
this table adds ranges, forms, names written into files and the controller-side files (manifest,
code to sync). A variable that is only in an argument spec is still type-checked and one-line
checked: a new role variable needs an entry here only for a rule beyond its type.

Each rule is ``rule(variable, value, values, ctx) -> [Problem]``: ``values`` holds every variable of
the roles being validated for this host (templated), ``ctx`` the play's hosts and the host name.
Rules run only on values whose type is right.
"""
from __future__ import annotations

import json
import os
import re

from ansible_collections.multinode.training.plugins.module_utils._build import manifest as manifest_schema
from ansible_collections.multinode.training.plugins.module_utils._fabric import verdict as fabric_verdict
from ansible_collections.multinode.training.plugins.module_utils._report import straggler
from ansible_collections.multinode.training.plugins.module_utils._report.steps import pattern_problem as steps_pattern_problem
from ansible_collections.multinode.training.plugins.module_utils._validate.engine import (
    Problem,
    as_bool,
    check_env_mapping,
    check_pattern,
    check_range,
    check_type,
    is_int,
    show,
)
from ansible_collections.multinode.training.plugins.module_utils._wheel.requirements import included_file

VERSION_RE = r"^v?[0-9]+(\.[0-9]+)*([a-zA-Z0-9.+-]*)$"
USERNAME_RE = r"^[a-z_][a-z0-9_-]{0,30}\$?$"
CUDA_ARCH_TOKEN_RE = re.compile(r"^(\d+)\.(\d+)([af]?)(\+PTX)?$")


def _range(low=None, high=None, number=int):
    def rule(variable, value, values, ctx):
        return check_range(variable, value, low, high, number)
    return rule


def _pattern(pattern, valid, what="not in the expected form"):
    def rule(variable, value, values, ctx):
        return check_pattern(variable, value, pattern, valid, what)
    return rule


def _not_empty(valid):
    def rule(variable, value, values, ctx):
        if str(value).strip() == "":
            return [Problem(variable, value, "empty", valid)]
        return []
    return rule


def _env(key_re=r"^[A-Za-z_][A-Za-z0-9_]*$", key_valid=None, allow_null=False):
    def rule(variable, value, values, ctx):
        kwargs = {"key_re": key_re, "allow_null": allow_null}
        if key_valid:
            kwargs["key_valid"] = key_valid
        problems, notes = check_env_mapping(variable, value, **kwargs)
        ctx.setdefault("notes", []).extend(notes)
        return problems
    return rule


def _scalar_items(variable, value, values, ctx):
    """List items that reach a command line: strings or numbers (never null, true, a list or a mapping)."""
    problems = []
    for index, item in enumerate(value):
        problems.extend(check_type("%s[%d]" % (variable, index), item, "scalar"))
    return problems


def _node_paths(variable, value, values, ctx):
    """Absolute paths on the nodes (the job's data): the access check reads each as the job's account."""
    problems = []
    for index, item in enumerate(value):
        if not isinstance(item, str) or not item.startswith("/") or item.rstrip("/") == "":
            problems.append(Problem("%s[%d]" % (variable, index), item, "not an absolute path below /",
                                    "absolute paths on the nodes, e.g. /data/tokenized or /shared/hf-cache"))
    return problems


DATA_SYNC_VALID = ("a list of {src: <file or directory on the controller>, dest: <absolute path on the nodes>}, "
                   "each dest its own (none inside another)")


def _data_sync(variable, value, values, ctx):
    """train_data_sync: {src, dest} items, src on the controller, dests absolute and apart."""
    problems, dests = [], []
    launcher = str(values.get("train_launcher", "ssh"))
    if value and launcher != "ssh":
        return [Problem(variable, value, "set with train_launcher=%s: only the ssh launcher brings data to the nodes"
                        % launcher, "[] (put the data on the storage the nodes share, e.g. below train_slurm_dir, "
                        "and list it in train_data_paths)")]
    for index, item in enumerate(value):
        name = "%s[%d]" % (variable, index)
        if not isinstance(item, dict) or set(item) != {"src", "dest"}:
            problems.append(Problem(name, item, "not a mapping of exactly src and dest", DATA_SYNC_VALID))
            continue
        src, dest = item["src"], item["dest"]
        if not isinstance(src, str) or not src or not os.path.exists(src):
            problems.append(Problem(name + "[src]", src, "does not exist on the controller", DATA_SYNC_VALID))
        if not isinstance(dest, str) or not dest.startswith("/") or dest.rstrip("/") == "" \
                or "/../" in dest + "/" or "/./" in dest + "/":
            problems.append(Problem(name + "[dest]", dest, "not an absolute path below /", DATA_SYNC_VALID))
            continue
        clean = dest.rstrip("/")
        for other_index, other in dests:
            if clean == other or clean.startswith(other + "/") or other.startswith(clean + "/"):
                problems.append(Problem(name + "[dest]", dest, "the same as or inside %s[%d][dest]=%s"
                                        % (variable, other_index, other), DATA_SYNC_VALID))
        dests.append((index, clean))
    return problems


def _nnodes(variable, value, values, ctx):
    text = str(value).strip()
    match = re.match(r"^([0-9]+)(?::([0-9]+))?$", text)
    # With train_launcher=slurm or env the nodes are not the play's hosts: Slurm's partition
    # (checked with sinfo before sbatch) or the platform's node count decide.
    hosts = (ctx.get("hosts") or []) if str(values.get("train_launcher", "ssh")) == "ssh" else []
    count = len(hosts)
    if text == "":
        return []
    valid = "empty (one per host), N or MIN:MAX"
    if count:
        valid = "%d (the hosts of the play), or MIN:MAX with 1 <= MIN <= %d <= MAX" % (count, count)
    if not match:
        return [Problem(variable, value, "not a node count", valid)]
    low = int(match.group(1))
    high = int(match.group(2)) if match.group(2) is not None else low
    if low < 1 or low > high:
        return [Problem(variable, value, "MIN must be 1 or more and at most MAX", valid)]
    if count and not low <= count <= high:
        return [Problem(variable, value, "does not fit the %d host(s) of the play (%s)"
                        % (count, ", ".join(hosts[:8]) + (", ..." if count > 8 else "")), valid)]
    return []


def _max_restarts(variable, value, values, ctx):
    """Restarts that cannot happen: under Slurm, srun --kill-on-bad-exit ends the step on every node at
    the first failure."""
    if not is_int(value) or int(value) <= 0:
        return []
    if str(values.get("train_launcher", "ssh")) == "slurm":
        return [Problem(variable, value, "train_launcher=slurm ends the step on every node at the first failure "
                        "(srun --kill-on-bad-exit), restarts cannot help", "0 with train_launcher slurm")]
    return []


def _detach(variable, value, values, ctx):
    if value is not True and str(value).lower() not in ("true", "yes", "1"):
        return []
    problems = []
    if str(values.get("train_attach", "") or ""):
        problems.append(Problem(variable, value, "train_attach follows a job, train_detach starts one",
                                "one of train_detach and train_attach"))
    if str(values.get("train_launcher", "ssh")) != "ssh":
        problems.append(Problem(variable, value, "only train_launcher=ssh detaches",
                                "false with train_launcher %s" % values.get("train_launcher")))
    return problems


def _nproc(variable, value, values, ctx):
    if str(value) == "auto" or (is_int(value) and int(value) > 0):
        return []
    return [Problem(variable, value, "not a process count", "auto (GPU count) or a positive integer")]


def _rdzv_conf(variable, value, values, ctx):
    problems = []
    for key, item in value.items():
        where = "%s[%s]" % (variable, json.dumps(str(key)))
        if not re.match(r"^[A-Za-z0-9_]+$", str(key)):
            problems.append(Problem(where, item, "the key %s is not a name" % show(key),
                                    "keys of letters, digits and _"))
        elif isinstance(item, (list, dict)) or item is None:
            problems.append(Problem(where, item, "not a single value", "a string, number or boolean"))
        elif any(c in str(item) for c in ",="):
            problems.append(Problem(where, item, "holds ',' or '=' (torchrun's key=value,key=value)",
                                    "a value without ',' and '='"))
    return problems


def _code_src(variable, value, values, ctx):
    if not value:
        return []
    if not str(value).startswith("/"):
        return []  # resolved by the copy module against the play's files/ directories
    if not os.path.exists(str(value)):
        return [Problem(variable, value, "does not exist on the controller (it is copied to every node)",
                        "an existing controller file or directory, or empty (the code is on the nodes already)")]
    return []


def _controller_file(variable, value, values, ctx):
    if not value or os.path.isfile(str(value)):
        return []
    return [Problem(variable, value, "no such file on the controller",
                    "the path of a readable file on the controller, or empty")]


REQUIREMENTS_VALID = ("PEP 508 requirements such as accelerate>=1.0, and -r <path> of a readable requirements file "
                      "on the controller (relative: from the directory ansible-playbook runs in)")


def _requirements(variable, value, values, ctx):
    """Job requirements: PEP 508 strings (pip judges them, naming the item, in wheel_distribute's lock step) and
    pip's ``-r <path>``, whose file must be on the controller; another pip option is refused here already."""
    problems = []
    for index, item in enumerate(value):
        path = included_file(item)
        if path is not None and not os.path.isfile(path):
            problems.append(Problem("%s[%d]" % (variable, index), item, "no such file on the controller",
                                    REQUIREMENTS_VALID))
        elif path is None and str(item).strip().startswith("-"):
            problems.append(Problem("%s[%d]" % (variable, index), item, "a pip option other than -r <path> (index "
                                    "options go in pip's configuration: pip.conf, PIP_INDEX_URL)", REQUIREMENTS_VALID))
    return problems


def _cuda_arch(variable, value, values, ctx):
    text = str(value).strip()
    if text == "auto":
        return []
    tokens = [t for t in re.split(r"[;\s]+", text) if t]
    bad = [t for t in tokens if not CUDA_ARCH_TOKEN_RE.match(t)]
    if not tokens or bad:
        what = "empty" if not tokens else ", ".join("'%s' is" % t for t in bad) + \
            " not a compute capability"
        return [Problem(variable, value, what, "auto, or compute capabilities such as 7.5;8.0;9.0+PTX")]
    return []


def _gcc_version(variable, value, values, ctx):
    if str(value) == "auto" or re.match(r"^[0-9]+$", str(value)):
        return []
    return [Problem(variable, value, "not a gcc major version", "auto or a major such as 12")]


def _nvcc(variable, value, values, ctx):
    if value in ("", "none") or str(value).startswith("/"):
        return []
    return [Problem(variable, value, "neither empty, none nor an absolute path",
                    "\"\" (search PATH, $CUDA_HOME/bin, /usr/local/cuda/bin), none, or the absolute path of nvcc")]


def _not_root(variable, value, values, ctx):
    if str(value).rstrip("/") == "":
        return [Problem(variable, value, "the root directory", "an absolute path below /")]
    return []


def _ssh_port(variable, value, values, ctx):
    """A rendezvous port that is ssh's (22, or this host's ansible_port): the job would not bind it, and the
    rendezvous guard (train_firewall) would lock the other hosts out of ssh."""
    ssh = sorted(set([22] + [int(p) for p in ctx.get("ssh_ports") or [] if is_int(p)]))
    if is_int(value) and int(value) in ssh:
        return [Problem(variable, value, "collides with ssh (port %s)" % ", ".join(str(p) for p in ssh),
                        "a free port in 1024-65535 other than ssh's, e.g. 29400")]
    return []


def _train_user(variable, value, values, ctx):
    """root needs train_allow_root; any other name must be able to be an account."""
    name = str(value).strip()
    allow = values.get("train_allow_root", False)
    if name == "root" and not as_bool(allow):
        return [Problem(variable, value, "the job (your script and everything it imports) would run as root",
                        "an unprivileged account (empty: mtrain, created by the role), or train_allow_root: true")]
    if name and name != "root" and not re.match(USERNAME_RE, name):
        return [Problem(variable, value, "cannot be created, not a valid account name",
                        "empty (mtrain) or 1-32 of lower-case letters, digits, _ and -, starting with a letter or _")]
    return []


def _existing_env(*requirements):
    """An existing environment (train_venv_existing, wheel_distribute_venv_existing) is the user's: job
    requirements are not installed into it."""
    def rule(variable, value, values, ctx):
        if not as_bool(value):
            return []
        given = [name for name in requirements if values.get(name)]
        if not given:
            return []
        return [Problem(variable, value, "job requirements (%s) are not installed into an existing environment"
                        % ", ".join("%s=%s" % (name, show(values[name])) for name in given),
                        "install them into your environment and leave %s empty, or %s: false (the "
                        "collection's own venv, which installs them)" % (" and ".join(given), variable))]
    return rule


def _firewall(variable, value, values, ctx):
    if str(value).strip().lower() not in ("auto", "true", "false", "yes", "no", "on", "off", "1", "0"):
        return [Problem(variable, value, "not auto or a boolean",
                        "auto (on where nftables works), true (required), false (off)")]
    return []


def _fabric_ratio(variable, value, values, ctx):
    """A fraction of the median strictly between 0 and 1 (0 flags nothing, 1 flags half the nodes)."""
    if not 0 < float(value) < 1:
        return [Problem(variable, value, "out of range",
                        "a fraction between 0 and 1 (both excluded), such as %g" % fabric_verdict.RATIO)]
    return []


def _fabric_line_ratio(variable, value, values, ctx):
    """0 (off) or a fraction of the line rate below 1."""
    if not 0 <= float(value) < 1:
        return [Problem(variable, value, "out of range",
                        "0 (off) or a fraction below 1, such as %g" % fabric_verdict.LINE_RATIO)]
    return []


def _step_pattern(variable, value, values, ctx):
    """Empty (the built-in step lines) or a regex with the named group ``step`` (_report.steps)."""
    problem = steps_pattern_problem(str(value)) if value else None
    if problem:
        return [Problem(variable, value, problem, "empty or a regular expression with (?P<step>...), such as "
                        "'step (?P<step>\\d+) loss (?P<loss>\\S+)'")]
    return []


def _stream_ranks(variable, value, values, ctx):
    """Global ranks (a list, or a comma-separated string from the command line) or all."""
    valid = "a list of global ranks (integers >= 0) such as [0] or [0, 8], [] for none, or all"
    items = [item.strip() for item in value.split(",")] if isinstance(value, str) else value
    if items == ["all"]:
        return []
    if not isinstance(items, list):
        return [Problem(variable, value, "neither a list of global ranks nor all", valid)]
    bad = [item for item in items if not (is_int(item) and int(item) >= 0)]
    if bad:
        return [Problem(variable, value, "%s is not a global rank" % show(bad[0]), valid)]
    return []


def _checkpoint_shared(variable, value, values, ctx):
    """Shared storage is proven on train_checkpoint_dir: there must be one."""
    if as_bool(value) and not str(values.get("train_checkpoint_dir") or "").strip():
        return [Problem(variable, value, "there is no train_checkpoint_dir to prove shared",
                        "false, or true with train_checkpoint_dir a directory on storage every node mounts")]
    return []


def _straggler_ratio(variable, value, values, ctx):
    """Over 1: a node this many times the median time per step is a straggler."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = 0.0
    if isinstance(value, bool) or not number > 1:
        return [Problem(variable, value, "not over 1", "a ratio over 1, such as %g" % straggler.RATIO)]
    return []


def _deepspeed_source(variable, value, values, ctx):
    """What each source type needs (checked on deepspeed_build_source, naming the variable at fault)."""
    problems = []
    version = values.get("deepspeed_build_version")
    if value == "pypi" and isinstance(version, str) and not re.match(VERSION_RE, version):
        problems.append(Problem("deepspeed_build_version", version, "not a version (deepspeed_build_source=pypi "
                                "downloads that sdist)", "a version such as 0.19.8"))
    if value == "git":
        for name in ("deepspeed_build_git_repo", "deepspeed_build_git_ref"):
            if str(values.get(name, "")).strip() == "":
                problems.append(Problem(name, values.get(name), "empty with deepspeed_build_source=git",
                                        "a repository URL and a branch, tag or commit"))
    if value == "local" and values.get("deepspeed_build_local_path", "") == "":
        problems.append(Problem("deepspeed_build_local_path", "", "empty with deepspeed_build_source=local",
                                "the absolute path of a DeepSpeed tarball or directory on the build host"))
    return problems


def _manifest(variable, value, values, ctx):
    """wheel_distribute: the manifest on the controller exists and is schema 1 JSON, naming the file."""
    manifest = values.get("wheel_distribute_manifest") or ""
    dist_dir = values.get("wheel_distribute_dist_dir") or ""
    if not all(isinstance(v, str) and (v == "" or v.startswith("/")) for v in (manifest, dist_dir)):
        return []  # the path checks report it
    if manifest:
        name, path = "wheel_distribute_manifest", manifest
    else:
        name = "wheel_distribute_dist_dir"
        try:
            found = [os.path.join(dist_dir, f) for f in os.listdir(dist_dir) if f.endswith(".whl.manifest.json")]
        except OSError as exc:
            return [Problem(name, dist_dir, "cannot be read on the controller (%s)" % (exc.strerror or exc),
                            "the directory build_deepspeed.yml fetched the wheel to")]
        if not found:
            return [Problem(name, dist_dir, "holds no *.whl.manifest.json on the controller",
                            "run build_deepspeed.yml first, or point wheel_distribute_manifest at a manifest")]
        path = max(found, key=lambda p: (os.path.getmtime(p), p))
    return check_manifest_file(name, path)


NCCL_TESTS_KEYS = ("bin", "args", "gpus", "min_bw")


def _nccl_tests(variable, value, values, ctx):
    """nccl_tuning_tests: the keys bin (absolute path), args (strings or numbers), gpus (0 or more) and
    min_bw (GB/s, 0 or more), each optional."""
    problems = []
    for key, item in value.items():
        where = "%s[%s]" % (variable, json.dumps(str(key)))
        if key not in NCCL_TESTS_KEYS:
            problems.append(Problem(where, item, "the key %s is not one of the check's" % show(key),
                                    "keys among %s" % ", ".join(NCCL_TESTS_KEYS)))
        elif key == "bin":
            problems.extend(check_type(where, item, "path"))
        elif key == "args":
            problems.extend(check_type(where, item, "list") or _scalar_items(where, item, values, ctx))
        else:
            number = int if key == "gpus" else float
            problems.extend(check_type(where, item, "int" if key == "gpus" else "float")
                            or check_range(where, item, 0, None, number))
    return problems


def check_manifest_file(name, path):
    valid = "a wheel manifest written by build_deepspeed.yml (docs/manifest.md)"
    try:
        data = manifest_schema.read(path)
    except manifest_schema.ManifestError as exc:
        # "manifest <path> <what>": the Problem names the path itself.
        return [Problem(name, path, str(exc).replace("manifest %s " % path, "", 1).replace(
            "cannot be read (", "cannot be read on the controller ("), valid)]
    missing = manifest_schema.missing_keys(data)
    if missing or data.get("schema") != manifest_schema.SCHEMA:
        what = "is not a schema 1 manifest (missing: %s; schema %s)" % (
            ", ".join(missing) or "none", show(data.get("schema")))
        return [Problem(name, path, what, valid)]
    return []


# Per variable: rules beyond the argument spec's type, elements and choices.
RULES = {
    # train
    "train_nnodes": [_nnodes],
    "train_nproc_per_node": [_nproc],
    "train_rdzv_port": [_range(1, 65535), _ssh_port],
    "train_user": [_train_user],
    "train_group": [_pattern(r"^([a-z_][a-z0-9_-]{0,30}\$?)?$", "empty (the account's own) or a group name")],
    "train_firewall": [_firewall],
    "train_rdzv_conf": [_rdzv_conf],
    "train_interface": [_pattern(r"^[^\s/,:]*$", "empty (the default route's) or an interface name such as eth0")],
    "train_job_id": [_pattern(r"^([A-Za-z0-9][A-Za-z0-9_.-]{0,127})?$",
                              "empty (generated) or 1-128 of letters, digits, _ . - (it names a directory)")],
    "train_module": [_pattern(r"^([A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*)?$",
                              "empty (run train_script) or a module name such as pkg.train")],
    "train_args": [_scalar_items],
    "train_env": [_env()],
    "train_max_restarts": [_range(0), _max_restarts],
    "train_max_no_progress_restarts": [_range(0)],
    "train_hang_timeout": [_range(0)],
    "train_detach": [_detach],
    "train_attach": [_pattern(r"^([A-Za-z0-9][A-Za-z0-9_.-]{0,127})?$",
                              "empty, or the id of a job a launch printed (letters, digits, _ . -)")],
    "train_lease": [_range(0)],
    "train_poll_slack": [_range(1)],
    "train_progress_interval": [_range(1)],
    "train_stream_ranks": [_stream_ranks],
    "train_timeout": [_range(0)],
    "train_stop_grace": [_range(0)],
    "train_code_src": [_code_src],
    "train_requirements": [_requirements],
    "train_accelerate_config": [_controller_file],
    "train_deepspeed_config": [_controller_file],
    "train_venv": [_not_root],
    "train_venv_existing": [_existing_env("train_requirements")],
    "train_data_sync": [_data_sync],
    "train_data_paths": [_node_paths],
    "train_checkpoint_min_free": [_range(0, number=float)],
    "train_checkpoint_shared": [_checkpoint_shared],
    "train_fabric_ratio": [_fabric_ratio],
    "train_fabric_min_gbps": [_range(0, number=float)],
    "train_fabric_line_ratio": [_fabric_line_ratio],
    "train_step_pattern": [_step_pattern],
    "train_straggler_ratio": [_straggler_ratio],
    # deepspeed_build
    "deepspeed_build_source": [_deepspeed_source],
    "deepspeed_build_cuda_arch_list": [_cuda_arch],
    "deepspeed_build_ops": [lambda v, value, values, ctx: [
        p for i, op in enumerate(value) for p in check_pattern(
            "%s[%d]" % (v, i), op, r"^[A-Za-z0-9_]+$", "op names such as cpu_adam, fused_adam (or the DS_BUILD_* "
            "suffix)", "not an op name")]],
    "deepspeed_build_jobs": [_range(0)],
    "deepspeed_build_gcc": [_pattern(r"^([0-9]+)?$", "empty (the default gcc) or a gcc major such as 12")],
    "deepspeed_build_env": [_env()],
    "deepspeed_build_python": [_not_empty("python3 or the absolute path of an interpreter on the build host")],
    # toolchain
    "toolchain_gcc_version": [_gcc_version],
    "toolchain_nvcc": [_nvcc],
    # wheel_distribute
    "wheel_distribute_venv": [_not_root],
    "wheel_distribute_venv_existing": [_existing_env("wheel_distribute_requirements",
                                                     "wheel_distribute_requirements_file")],
    "wheel_distribute_index_url": [_pattern(r"^((https?|file)://\S+)?$", "empty (offline, --no-index) or an "
                                            "http(s):// or file:// URL")],
    "wheel_distribute_dist_dir": [_manifest],
    "wheel_distribute_requirements": [_requirements],
    "wheel_distribute_requirements_file": [_controller_file],
    # nccl_tuning
    "nccl_tuning_nccl_version": [_pattern(r"^(auto|v?[0-9]+\.[0-9]+(\.[0-9]+)?([+-].*)?)$",
                                          "auto or a version such as 2.18.6")],
    "nccl_tuning_overrides": [_env(key_re=r"^NCCL_[A-Z0-9_]+$", key_valid="NCCL_* names in capitals",
                                   allow_null=True)],
    "nccl_tuning_env": [_env(allow_null=True)],
    "nccl_tuning_socket_ifname": [_pattern(r"^[^\s/]*$", "empty or NCCL_SOCKET_IFNAME syntax such as eth0 or ^lo")],
    "nccl_tuning_user": [_pattern(r"^([A-Za-z_][A-Za-z0-9_.-]*\$?)?$", "empty (the connecting user) or a user name")],
    "nccl_tuning_tests": [_nccl_tests],
}

# Variables whose empty value means "none" although the default is not empty.
MAY_BE_EMPTY = ("wheel_distribute_wheelhouse",)
