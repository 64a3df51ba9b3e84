# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Role deepspeed_build's decisions: where the source is, the build key, whether the wheel exists.

Pure functions over paths and plain data (stdlib only), used by module deepspeed_build (probe)
on the build host and unit-tested on temporary trees and recorded manifests.
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import shutil
import tarfile

from ansible_collections.multinode.training.plugins.module_utils._build import manifest as _manifest

# What a DeepSpeed build needs to know about an interpreter (run with it; reads only).
PYTHON_PROBE = r'''
import importlib.util, json, os, sys, sysconfig
print(json.dumps({
    "version": "%d.%d.%d" % sys.version_info[:3],
    "tag": "cp%d%d" % sys.version_info[:2],
    "platform": sysconfig.get_platform().replace("-", "_").replace(".", "_"),
    "pip": importlib.util.find_spec("pip") is not None,
    "venv": importlib.util.find_spec("venv") is not None and importlib.util.find_spec("ensurepip") is not None,
    "headers": os.path.exists(os.path.join(sysconfig.get_paths().get("include") or "", "Python.h")),
    "site_packages": sorted(set(p for p in sys.path if p.endswith("-packages") and os.path.isdir(p))),
}))
'''

AIO_OPS = ("async_io", "aio", "gds")
_SKIP_DIRS = {".git", "build", "dist", "__pycache__"}


def source_digest(root):
    """sha256 over a source tree (relative paths and contents), ignoring build output and .git."""
    digest = hashlib.sha256()
    for base, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.endswith(".egg-info"))
        for name in sorted(files):
            path = os.path.join(base, name)
            rel = os.path.relpath(path, root)
            # setup.py rewrites this file during every build.
            if rel == os.path.join("deepspeed", "git_version_info_installed.py") or name.endswith(".pyc"):
                continue
            digest.update(rel.encode() + b"\0")
            digest.update(bytes.fromhex(_manifest.sha256_file(path)))
    return digest.hexdigest()


def tree_for_archive(src_cache, archive_sha256):
    """Where an archive with this sha256 is unpacked in the source cache."""
    return os.path.join(src_cache, "tree-" + archive_sha256[:16])


def ensure_dir(path, mode=0o755):
    """Create path and its missing parents with `mode` (not the umask's); True when something was created."""
    if os.path.isdir(path):
        return False
    parent = os.path.dirname(path.rstrip(os.sep))
    if parent and parent != path:
        ensure_dir(parent, mode)
    os.mkdir(path)
    os.chmod(path, mode)
    return True


class ArchiveError(ValueError):
    """An archive that cannot be unpacked safely; str() names the archive and the member."""


def unpack_archive(archive, dest):
    """Unpack a source tarball into dest without its top folder (tar --strip-components=1).

    The files go to a temporary sibling folder first, renamed to dest when complete: a dest
    that exists is whole. Members that would land outside dest (absolute paths, `..`, links
    pointing out) are refused before anything is written. Returns dest.
    """
    parent = os.path.dirname(dest)
    ensure_dir(parent)
    if os.path.isdir(dest):
        shutil.rmtree(dest)  # an older, incomplete unpack (no setup.py)
    tmp = "%s.unpacking-%d" % (dest, os.getpid())
    try:
        with tarfile.open(archive) as tar:
            members = []
            for member in tar.getmembers():
                parts = member.name.split("/")
                rel = "/".join(parts[1:]).strip("/")
                if not rel:
                    continue
                bad = member.name.startswith("/") or ".." in rel.split("/") or member.isdev()
                if member.issym():
                    target = os.path.normpath(os.path.join(os.path.dirname(rel), member.linkname))
                    bad = bad or member.linkname.startswith("/") or target.split(os.sep)[0] == ".."
                if bad:
                    raise ArchiveError("%s: member %r would be unpacked outside the source tree" % (archive, member.name))
                if member.islnk():
                    link = "/".join(member.linkname.split("/")[1:])
                    if not link or member.linkname.startswith("/") or ".." in member.linkname.split("/"):
                        raise ArchiveError("%s: hard link %r points outside the source tree" % (archive, member.name))
                    member.linkname = link
                member.name = rel
                members.append(member)
            os.makedirs(tmp)
            if hasattr(tarfile, "data_filter"):
                tar.extractall(tmp, members=members, filter="data")
            else:
                tar.extractall(tmp, members=members)
    except (tarfile.TarError, EOFError, OSError, KeyError) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ArchiveError("%s cannot be unpacked: %s" % (archive, exc))
    except ArchiveError:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    os.chmod(tmp, 0o755)
    os.rename(tmp, dest)
    return dest


def find_source(kind, src_cache, version, local_path, unpack=False):
    """The cached source tree for a request, or why there is none yet (then the role fetches it).

    Returns {ready, tree, archive, sha256, spec, reason, unpacked}. With unpack, an archive in the
    cache (or a local tarball) that is not unpacked yet is unpacked now (ArchiveError when it cannot
    be). git is never ready here: a ref may move.
    """
    found = {"ready": False, "tree": "", "archive": "", "sha256": None, "spec": "", "commit": None, "reason": "",
             "unpacked": False}
    if kind == "pypi":
        found["spec"] = "deepspeed==%s" % version
        archives = sorted(glob.glob(os.path.join(src_cache, "pypi-%s" % version, "deepspeed-*.tar.gz")))
        if not archives:
            found["reason"] = "sdist not downloaded yet"
            return found
        found["archive"] = archives[0]
    elif kind == "local":
        found["spec"] = local_path
        if os.path.isdir(local_path):
            found.update(ready=True, tree=local_path)
            return found
        if not os.path.isfile(local_path):
            found["reason"] = "%s missing" % local_path
            return found
        found["archive"] = local_path
    else:
        found["reason"] = "git checkouts are updated on every run"
        return found
    found["sha256"] = _manifest.sha256_file(found["archive"])
    tree = tree_for_archive(src_cache, found["sha256"])
    if not os.path.isfile(os.path.join(tree, "setup.py")):
        if not unpack:
            found["reason"] = "archive not unpacked yet"
            return found
        unpack_archive(found["archive"], tree)
        if not os.path.isfile(os.path.join(tree, "setup.py")):
            found["reason"] = "%s holds no setup.py under its top folder: not a DeepSpeed source archive" % found["archive"]
            return found
        found["unpacked"] = True
    found.update(ready=True, tree=tree)
    return found


def read_version(tree):
    with open(os.path.join(tree, "version.txt")) as handle:
        return handle.read().strip()


def torch_key_version(torch):
    """torch's version without a +cuXY label matching its CUDA (pip says 2.13.0, the venv 2.13.0+cu130)."""
    label = "+cu" + (torch.get("cuda") or "none").replace(".", "")
    version = torch.get("version") or ""
    return version[:-len(label)] if version.endswith(label) else version


def build_key(source_digest_hex, torch, plan, python, env):
    """sha256 of every input that changes the wheel: the same key means the same wheel."""
    inputs = {
        "source": source_digest_hex,
        "torch": {"version": torch_key_version(torch), "cuda": torch.get("cuda")},
        "accelerator": plan["accelerator"],
        "arch_list": plan["arch_list"],
        "nvcc": (plan.get("nvcc") or {}).get("release") if plan["accelerator"] == "cuda" else None,
        "ops": [op["name"] for op in plan["ops"]],
        "gcc": plan["compiler"]["gcc"],
        "cpu": [plan["cpu"]["march"], plan["cpu"]["flags"]],
        "python": [python["tag"], python["platform"]],
        "env": env,
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode("utf-8")).hexdigest()


def wheelhouse_key(manifest_name, key, torch_requirement, pip_args):
    """The wheelhouse is redone when the wheel, the torch requirement or the pip arguments change."""
    return hashlib.sha256(json.dumps([manifest_name, key, torch_requirement, list(pip_args)]).encode("utf-8")).hexdigest()


def existing_wheel(out_dir, key):
    """Is the wheel for this build key in out_dir, whole? {up_to_date, reason, manifest, manifest_path, manifest_sha256}."""
    result = {"up_to_date": False, "manifest": None, "manifest_path": None, "manifest_sha256": None, "reason": ""}
    path = _manifest.newest(out_dir)
    if path is None:
        result["reason"] = "no manifest in %s" % out_dir
        return result
    try:
        text, digest = _manifest.read_text(path)
        manifest = _manifest.loads(text, path)
    except _manifest.ManifestError as exc:
        result["reason"] = str(exc)
        return result
    result.update(manifest=manifest, manifest_path=path, manifest_sha256=digest)
    problems = _manifest.problems(manifest, path)
    if problems:
        result["reason"] = "; ".join(problems)
    elif (manifest.get("build") or {}).get("key") != key:
        result["reason"] = "the manifest's build key differs (inputs changed)"
    elif not os.path.isfile(_manifest.wheel_path(path, manifest)):
        result["reason"] = "the wheel named by %s is missing" % path
    elif _manifest.sha256_file(_manifest.wheel_path(path, manifest)) != manifest["wheel_sha256"]:
        result["reason"] = "the wheel's sha256 differs from its manifest"
    else:
        result["up_to_date"] = True
    return result


def read_stamp(path):
    try:
        with open(path) as handle:
            return handle.read().strip()
    except (IOError, OSError):
        return None


def installed_torch(venv_python):
    """{version, cuda} of the torch in the venv of venv_python from its dist-info (no import), or None."""
    venv = os.path.dirname(os.path.dirname(venv_python))
    for meta in sorted(glob.glob(os.path.join(venv, "lib", "python*", "site-packages", "torch-*.dist-info", "METADATA"))):
        with open(meta, errors="replace") as handle:
            version = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("Version:")), None)
        version_py = os.path.join(os.path.dirname(os.path.dirname(meta)), "torch", "version.py")
        if not version or not os.path.isfile(version_py):
            return None
        with open(version_py, errors="replace") as handle:
            match = re.search(r"^cuda\s*(?::\s*[^=]+)?=\s*(['\"]([^'\"]*)['\"]|None)", handle.read(), re.M)
        if not match:
            return None
        return {"version": version, "cuda": None if match.group(1) == "None" else (match.group(2) or None)}
    return None


def site_dirs(venv_python):
    """The venv's site-packages, then the folders its .pth files add (as Python's site module reads them:
    lines that are existing directories), such as the environment a build against an installed torch sees."""
    venv = os.path.dirname(os.path.dirname(venv_python))
    found = sorted(glob.glob(os.path.join(venv, "lib", "python*", "site-packages")))
    for site in list(found):
        for pth in sorted(glob.glob(os.path.join(site, "*.pth"))):
            with open(pth, errors="replace") as handle:
                found.extend(line.strip() for line in handle
                             if line.strip() and not line.startswith(("#", "import")) and os.path.isdir(line.strip()))
    return found


def runtime_torch(venv_python):
    """{version, cuda, site_packages} of the torch the venv imports, as `import torch` says (torch.__version__,
    e.g. 2.13.0+cu130, where pip's metadata says 2.13.0), read from torch/version.py without importing torch;
    None when absent. site_packages: the folder it is in (the venv's, or the environment's its .pth adds)."""
    for site in site_dirs(venv_python):
        version_py = os.path.join(site, "torch", "version.py")
        if not os.path.isfile(version_py):
            continue
        with open(version_py, errors="replace") as handle:
            text = handle.read()
        version = re.search(r"^__version__\s*(?::\s*[^=]+)?=\s*['\"]([^'\"]+)['\"]", text, re.M)
        cuda = re.search(r"^cuda\s*(?::\s*[^=]+)?=\s*(['\"]([^'\"]*)['\"]|None)", text, re.M)
        if version and cuda:
            return {"version": version.group(1), "cuda": None if cuda.group(1) == "None" else (cuda.group(2) or None),
                    "site_packages": site}
    return None


def stage(workdir, tree, helper_source):
    """A clean staging folder for one build: staging/src a copy of the source tree (symlinks kept,
    like cp -a), staging/dist empty, and the build helper written to workdir/run_logged.py.
    Returns the staging folder."""
    staging = os.path.join(workdir, "staging")
    if os.path.lexists(staging):
        shutil.rmtree(staging)
    ensure_dir(os.path.join(staging, "dist"))
    shutil.copytree(tree, os.path.join(staging, "src"), symlinks=True)
    helper = os.path.join(workdir, "run_logged.py")
    with open(helper, "w") as handle:
        handle.write(helper_source)
    os.chmod(helper, 0o644)
    return staging


def find_wheel(folder):
    """The one deepspeed-*.whl in folder, or None."""
    wheels = sorted(glob.glob(os.path.join(folder, "deepspeed-*.whl")))
    return wheels[0] if len(wheels) == 1 else None


def publish(wheel, manifest_path, build_log, out_dir, remove=None):
    """Move a checked wheel, its build log and its manifest into out_dir, replacing what is there.

    The older wheels, manifests and build logs in out_dir go first, manifests before their wheels;
    then the wheel, the log (as <wheel>.build.log) and the manifest last: at every moment a manifest
    in out_dir names a wheel that is whole beside it. `remove` (the staging folder) is deleted after.
    Returns {wheel, manifest_path, build_log, removed: [names]}.
    """
    ensure_dir(out_dir)
    suffixes = (".whl", ".whl" + _manifest.SUFFIX, ".whl.build.log")
    names = [n for n in os.listdir(out_dir) if n.startswith("deepspeed-") and n.endswith(suffixes)]
    for name in sorted(names, reverse=True):  # x.whl.manifest.json > x.whl.build.log > x.whl
        os.remove(os.path.join(out_dir, name))
    name = os.path.basename(wheel)
    placed = {"wheel": os.path.join(out_dir, name), "manifest_path": os.path.join(out_dir, name + _manifest.SUFFIX),
              "build_log": None, "removed": sorted(names, reverse=True)}
    shutil.move(wheel, placed["wheel"])
    if build_log and os.path.isfile(build_log):
        placed["build_log"] = os.path.join(out_dir, name + ".build.log")
        shutil.move(build_log, placed["build_log"])
    shutil.move(manifest_path, placed["manifest_path"])
    if remove and os.path.lexists(remove):
        shutil.rmtree(remove)
    return placed


def commit_incoming(dist_dir, names, incoming=".incoming"):
    """Move dist_dir/.incoming/<name> into dist_dir in the given order (wheel before manifest), then
    remove .incoming. Returns the names moved."""
    folder = os.path.join(dist_dir, incoming)
    moved = []
    for name in names:
        src = os.path.join(folder, name)
        if not os.path.isfile(src):
            raise IOError("%s is missing: the fetch did not bring it" % src)
        os.rename(src, os.path.join(dist_dir, name))
        moved.append(name)
    if os.path.isdir(folder):
        shutil.rmtree(folder)
    return moved


def missing_packages(python, source, ops):
    """Distribution packages the build host lacks for this build."""
    return (([] if python.get("venv") else ["python3-venv"]) + ([] if python.get("headers") else ["python3-dev"])
            + (["git"] if source == "git" else []) + (["libaio-dev"] if set(ops or []) & set(AIO_OPS) else []))


def dist_state(dist_dir, manifest, manifest_sha256, stamp):
    """What the controller's dist/ lacks of the build host's output: {wheel, manifest, wheelhouse: needs fetch}."""
    wheel = os.path.join(dist_dir, manifest["wheel"])
    local_manifest = _manifest.path_for(wheel)
    need = {
        "wheel": not os.path.isfile(wheel) or _manifest.sha256_file(wheel) != manifest["wheel_sha256"],
        "manifest": not os.path.isfile(local_manifest) or _manifest.read_text(local_manifest)[1] != manifest_sha256,
        "wheelhouse": stamp is not None and read_stamp(os.path.join(dist_dir, "wheelhouse", ".stamp")) != stamp,
    }
    need["wheel"] = need["wheel"] or need["manifest"]  # fetched as a pair: wheel first, manifest last
    need["manifest"] = need["wheel"]
    return need
