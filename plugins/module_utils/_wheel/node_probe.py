# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a node has for the wheel: its interpreter's tags, the venv at the install path (marker, torch,
packages), and whether this wheel with this lock is already installed there.

Run on the node by wheel_distribute (compat) (``run_module`` at the end); the decisions on these facts are
_wheel/compat.py's node_problems and _wheel/dist.py's current_problems.
"""
from __future__ import annotations

import json
import os
import re
import socket

from ansible_collections.multinode.training.plugins.module_utils._build import cuda_arch
from ansible_collections.multinode.training.plugins.module_utils._build.cpu_isa import missing_flags
from ansible_collections.multinode.training.plugins.module_utils._node import env_probe
from ansible_collections.multinode.training.plugins.module_utils._wheel import dist as _wheel_dist
from ansible_collections.multinode.training.plugins.module_utils._wheel import overlay as _overlay
from ansible_collections.multinode.training.plugins.module_utils._wheel import seed as _seed
from ansible_collections.multinode.training.plugins.module_utils._wheel import space as _space
from ansible_collections.multinode.training.plugins.module_utils._wheel.compat import node_problems
from ansible_collections.multinode.training.plugins.module_utils._wheel.driver import parse_driver
from ansible_collections.multinode.training.plugins.module_utils._wheel.gpu import gpu_notes

MARKER_NAME = ".multinode-training.json"


def parse_dist_info_version(metadata_text):
    """Version field of a dist-info METADATA file."""
    for line in (metadata_text or "").splitlines():
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
        if not line.strip():
            break
    return None


def parse_torch_cuda(version_py_text):
    """torch/version.py -> the CUDA version torch was built with, or None (CPU build)."""
    match = re.search(r"^cuda\s*(?::\s*[^=]+)?=\s*(['\"]([^'\"]*)['\"]|None)", version_py_text or "", re.M)
    if not match or match.group(1) == "None":
        return None
    return match.group(2) or None


# Runs under the interpreter that will create the venv: what wheels it accepts, and whether it can make a
# venv with pip. ensurepip: the test venv itself makes when ``ensurepip --upgrade`` fails (stdlib's
# venv/__init__.py, _setup_pip): Debian and Ubuntu ship ensurepip/__main__.py in python3.X-venv, which
# stock server images lack.
INTERPRETER_SCRIPT = r'''
import json, os, platform, sys, sysconfig
impl = {"cpython": "cp", "pypy": "pp"}.get(sys.implementation.name, sys.implementation.name)
tag = "%s%d%d" % (impl, sys.version_info[0], sys.version_info[1])
abi = tag
if impl == "cp":
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        abi += "t"
    if sysconfig.get_config_var("Py_DEBUG"):
        abi += "d"
try:
    glibc = os.confstr("CS_GNU_LIBC_VERSION").split()[-1]
except (AttributeError, ValueError, OSError, IndexError):
    glibc = None
stdlib = sysconfig.get_path("stdlib")
print(json.dumps({"version": platform.python_version(), "implementation": impl, "tag": tag, "abi": abi,
                  "platform": sysconfig.get_platform().replace("-", "_").replace(".", "_"),
                  "glibc": glibc, "executable": sys.executable, "stdlib": stdlib,
                  "ensurepip": os.path.exists(os.path.join(stdlib, "ensurepip", "__main__.py"))}))
'''


def _read(path):
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read()


def path_state(path):
    """{state: directory, file, other (with detail) or absent} of what is at path."""
    if os.path.isdir(path):
        return {"state": "directory"}
    if os.path.isfile(path):
        return {"state": "file"}
    if os.path.lexists(path):
        return {"state": "other",
                "detail": "dangling symlink to %s" % os.readlink(path) if os.path.islink(path) else "special file"}
    return {"state": "absent"}


def venv_facts(path):
    """What is at the venv path: state, marker of a previous install, torch already in it."""
    import glob

    facts = {"path": path, "state": "absent", "symlink": os.path.islink(path), "marker": None,
             "torch": None, "torch_cuda": None, "target": None}
    if os.path.islink(path):
        facts["target"] = os.path.realpath(path)
    facts.update(path_state(path))
    if facts["state"] == "absent":
        parent = os.path.dirname(os.path.abspath(path))
        while parent and not os.path.lexists(parent):
            parent = os.path.dirname(parent)
        if parent and not os.path.isdir(parent):
            facts["blocked_by"] = parent
        return facts
    if facts["state"] != "directory":
        return facts
    facts["marker"] = read_marker(os.path.join(path, MARKER_NAME))
    for meta in sorted(glob.glob(os.path.join(path, "lib", "python*", "site-packages", "torch-*.dist-info", "METADATA"))):
        facts["torch"] = parse_dist_info_version(_read(meta))
        version_py = os.path.join(os.path.dirname(os.path.dirname(meta)), "torch", "version.py")
        if os.path.isfile(version_py):
            facts["torch_cuda"] = parse_torch_cuda(_read(version_py))
        break
    facts["packages"] = venv_packages(path)
    return facts


# Runs under an existing environment's own python (wheel_distribute_venv_existing): where it installs and
# keeps DeepSpeed, its torch (version and the CUDA release from torch/version.py, torch not imported) and
# every distribution it sees, read through importlib.metadata as that python resolves them (a conda env,
# an NGC container's dist-packages: no path is guessed).
EXISTING_ENV_SCRIPT = r'''
import importlib.metadata as md, importlib.util as iu, json, os, site, sysconfig
paths = sysconfig.get_paths()
sites = []
for where in list(site.getsitepackages()) + [paths["purelib"], paths["platlib"]]:
    if where not in sites and os.path.isdir(where):
        sites.append(where)
out = {"site": paths["purelib"], "torch": None, "version_py": None, "packages": [], "sites": sites}
for dist in md.distributions():
    name = dist.metadata["Name"]
    if name:
        out["packages"].append("%s==%s" % (name, dist.version))
try:
    out["site"] = str(md.distribution("deepspeed").locate_file(""))
except md.PackageNotFoundError:
    pass
try:
    out["torch"] = md.version("torch")
except md.PackageNotFoundError:
    pass
spec = iu.find_spec("torch") if out["torch"] else None
for where in (spec and spec.submodule_search_locations) or []:
    path = os.path.join(where, "version.py")
    if os.path.isfile(path):
        with open(path, encoding="utf-8", errors="replace") as handle:
            out["version_py"] = handle.read()
        break
print(json.dumps(out))
'''


def read_marker(path):
    """The JSON marker of a verified install at path, None where there is none."""
    if not os.path.isfile(path):
        return None
    try:
        return json.loads(_read(path))
    except ValueError:
        return {"error": "unreadable marker %s" % path}


def existing_env_facts(module, path, marker_path, overlay=None):
    """An existing environment (a venv, a conda env, an NGC container's prefix: its python is
    <path>/bin/python), asked through its own python, or through its overlay's once there is one
    (_wheel.overlay: what the job runs): the same keys as venv_facts, plus existing, site (where its
    DeepSpeed is), sites (the environment's site directories, which the overlay reads), overlay (its
    path, null without one) and error (the python cannot say). Its marker is the file at marker_path
    (the node directory: nothing of this collection is written into the environment)."""
    facts = {"path": path, "state": "absent", "symlink": os.path.islink(path), "marker": None, "torch": None,
             "torch_cuda": None, "target": os.path.realpath(path), "existing": True, "site": None,
             "packages": [], "sites": [], "overlay": None}
    facts.update(path_state(path))
    if facts["state"] != "directory":
        return facts
    python = os.path.join(path, "bin", "python")
    if overlay and os.path.isfile(os.path.join(overlay, "pyvenv.cfg")):
        facts["overlay"], python = overlay, os.path.join(overlay, "bin", "python")
    try:
        rc, out, err = module.run_command([python, "-c", EXISTING_ENV_SCRIPT], handle_exceptions=False)
    except OSError as exc:
        rc, out, err = 127, "", exc.strerror or "cannot be run"
    try:
        answer = json.loads(out.strip().splitlines()[-1]) if rc == 0 else None
    except (ValueError, IndexError):
        answer = None
    if answer is None:
        facts["error"] = "%s: %s" % (python, " ".join(((err or out).strip() or "exit status %d" % rc).split())[-300:])
        return facts
    if facts["overlay"]:
        # the environment's site directories, as the overlay's .pth names them
        facts["sites"] = _overlay.pth_sites(answer.get("sites") or [])
    else:
        facts["sites"] = answer.get("sites") or [answer["site"]]
    facts.update(site=answer["site"], torch=answer["torch"], packages=sorted(answer["packages"]),
                 torch_cuda=parse_torch_cuda(answer["version_py"]) if answer["version_py"] else None,
                 # asked for an overlay that is not there (yet): no verified install, whatever an
                 # install into the environment itself (before overlays) left as its marker
                 marker=read_marker(marker_path) if facts["overlay"] or not overlay else None)
    return facts


def venv_packages(path):
    """Every distribution installed in the venv's site-packages, as sorted name==version (the Name and
    Version headers of each dist-info, read as preflight's environment probe reads them, nothing
    imported): what the wheel_distribute guard compares with the job requirements' lock."""
    import glob

    packages = set()
    for dist_info in glob.glob(os.path.join(path, "lib", "python*", "site-packages", "*.dist-info")):
        meta = env_probe.headers(dist_info)
        if meta["name"]:
            packages.add("%s==%s" % (meta["name"], meta["version"] or ""))
    return sorted(packages)


def installed(manifest, venv, lock_sha256="", lock_packages=None):
    """True when the venv already holds this exact wheel, verified (the idempotence marker), installed
    with the job requirements' lock of this run (its sha256; empty: no job requirements) and, with a
    lock, holding exactly the lock's packages (lock_packages, name==version): a changed, added or
    removed requirement, or a package changed by hand, makes a new release. The same rules as
    _wheel_dist.current_problems, which also says why."""
    return (venv.get("state") == "directory"
            and _wheel_dist.marker_problem(manifest, venv.get("marker"), lock_sha256) is None
            and not _wheel_dist.package_problems(venv, lock_packages))


def query_driver(run_command, nvidia_smi):
    """The node's NVIDIA driver version from nvidia-smi (None where it gives none), the command run and,
    where nvidia-smi failed, its message (cuda_arch.smi_error)."""
    cmd = [nvidia_smi, "--query-gpu=driver_version", "--format=csv,noheader"]
    rc, out, err = run_command(cmd)
    if rc != 0:
        return None, [cmd], cuda_arch.smi_error(cmd, rc, out, err)
    return parse_driver(out), [cmd], None


# --------------------------------------------------------------------------- the wheel_distribute (compat) module

ARGUMENT_SPEC = dict(
    manifest=dict(type="dict", required=True),
    venv=dict(type="path", required=True),
    python=dict(type="path", default="/usr/bin/python3"),
    cpuinfo_path=dict(type="path", default="/proc/cpuinfo"),
    node=dict(type="str"),
    node_dir=dict(type="path"),
    expected_files=dict(type="dict"),
    lock_sha256=dict(type="str", default=""),
    lock_packages=dict(type="list", elements="str"),
    existing=dict(type="bool", default=False),
    marker=dict(type="path"),
    overlay=dict(type="path"),
    unpacked=dict(type="dict"),
)


def interpreter(module, python_path):
    """INTERPRETER_SCRIPT's answer under python_path, or {executable, error} when it cannot run."""
    cmd = [python_path, "-c", INTERPRETER_SCRIPT]
    try:
        rc, out, err = module.run_command(cmd, handle_exceptions=False)
    except OSError as exc:  # interpreter missing or not executable
        rc, out, err = 127, "", exc.strerror or "cannot be run"
    if rc == 0:
        try:
            return json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return {"executable": python_path, "error": "unreadable output %r" % out[-200:]}
    return {"executable": python_path, "error": (err or out).strip()[-300:] or "exit status %d" % rc}


def current(params, manifest, venv, problems):
    """(whether this wheel with this lock is installed as expected, why not), asked with expected_files only."""
    if params["expected_files"] is None or problems:
        return False, ["not asked (no expected_files)"]
    record = os.path.join(params["node_dir"], _wheel_dist.RECORD_NAME)
    try:
        with open(record) as handle:
            record_text = handle.read()
    except (IOError, OSError):
        record_text = None
    why = _wheel_dist.current_problems(manifest, venv, params["lock_sha256"], params["node_dir"],
                                       params["expected_files"], record_text, params["lock_packages"])
    return not why, why


def space_needs_problems(params, venv, node):
    """Room for the copy (in the node folder) and for what the install unpacks (a new release beside the
    venv; in place in an existing environment), _wheel.space."""
    if params["existing"]:
        # pip installs what the environment lacks into its overlay
        target, kept = params["overlay"] or params["venv"], venv.get("packages")
    else:
        # a new release: what the seed step links over from the active one (both with a lock) takes no room
        target = params["venv"] + ".releases"
        seeded = params["lock_sha256"] and os.path.isfile(os.path.join(params["venv"], _seed.LOCK_NAME))
        kept = venv.get("packages") if seeded else []
    needs = [(params["node_dir"], _space.copy_bytes(params["node_dir"], params["expected_files"]), "of wheels to copy"),
             (target, _space.install_bytes(params["unpacked"], kept), "unpacked")]
    return _space.space_problems(node, needs)


def run_module(module):
    params = module.params
    manifest = params["manifest"]
    node = params["node"] or socket.gethostname()
    # an existing environment: its own python is the one whose tags must fit the wheel
    python_path = os.path.join(params["venv"], "bin", "python") if params["existing"] else params["python"]
    commands = [[python_path, "-c", "<interpreter probe>"]]
    python = interpreter(module, python_path)
    smi = module.get_bin_path("nvidia-smi", required=False)
    gpus, smi_commands, smi_error = cuda_arch.query_gpus(module.run_command, smi)
    commands.extend(smi_commands)
    driver = None
    if gpus:
        driver, driver_commands, smi_error = query_driver(module.run_command, smi)
        commands.extend(driver_commands)
    try:
        with open(params["cpuinfo_path"], encoding="utf-8", errors="replace") as handle:
            cpuinfo = handle.read()
    except OSError as exc:
        module.fail_json(msg="%s: cannot read CPU flags from %s: %s" % (node, params["cpuinfo_path"], exc))
    if params["existing"]:
        if not params["marker"]:
            module.fail_json(msg="compat.existing needs compat.marker (the path of its marker on the node)")
        venv = existing_env_facts(module, params["venv"], params["marker"], params["overlay"])
        commands.append([python_path, "-c", "<existing environment probe>"])
    else:
        venv = venv_facts(params["venv"])
    facts = {"python": python, "venv": venv, "gpus": gpus, "driver": driver, "cpuinfo": cpuinfo,
             "cpuinfo_path": params["cpuinfo_path"], "nvidia_smi_error": smi_error}
    problems = node_problems(manifest, facts, node)
    notes = gpu_notes(manifest, gpus, node)
    for note in notes:
        module.warn(note)
    is_current, why = current(params, manifest, venv, problems)
    if not is_current and params["unpacked"] is not None and params["node_dir"]:
        problems.extend(space_needs_problems(params, venv, node))
    overlay = None
    if params["existing"] and params["overlay"]:
        overlay = _overlay.plan(params["overlay"], python.get("version"), venv.get("sites") or [])
    module.exit_json(
        changed=False,
        overlay=overlay,
        current=is_current,
        current_problems=why,
        env=_wheel_dist.env_from_marker(venv["marker"]) if is_current else {},
        compatible=not problems,
        problems=problems,
        python=python,
        venv=venv,
        installed=installed(manifest, venv, params["lock_sha256"], params["lock_packages"]),
        gpus=gpus,
        notes=notes,
        cpu_flags_missing=missing_flags((manifest.get("cpu") or {}).get("flags") or [], cpuinfo),
        commands=commands,
    )
