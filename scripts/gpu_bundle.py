# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GPU check's bundle: what the borrowed GPU machine lacks, for CPython 3.12 on manylinux x86_64.

That machine (scripts/gpu_image.txt) has torch, nvcc, accelerate, ninja, pyyaml and jinja2 and no
package index, so scripts/gpu_check.sh installs everything else offline from this folder:

  wheels/            every wheel the machine lacks: ansible-core, the job report's matplotlib,
                     DeepSpeed's requirements and build backend, and what they need
  deepspeed-*.tar.gz DeepSpeed's source distribution (the version role deepspeed_build builds)
  collections.tar.gz the collections the roles call (community.general), from the controller's
                     `ansible` package
  requirements.txt   what gpu_check.sh installs (the top-level requirements)

  python scripts/gpu_bundle.py build [DIR]   # fill DIR (default .gpu); needs PyPI
  python scripts/gpu_bundle.py check [DIR]   # prove DIR complete, offline

The check proves completeness with pip's own resolver and no index: the image's packages are
stood in by empty wheels of their names and versions (in a temporary folder, never in the
bundle), so pip resolves the top-level requirements and DeepSpeed's own requirements, read
again from its source distribution, from DIR and the image alone. It also refuses a bundle over
60 MiB or one that carries a package the image has.
"""
from __future__ import annotations

import email.parser
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
IMAGE = ROOT / "scripts" / "gpu_image.txt"
LIMIT = 60 * 1024 * 1024
PYTHON_VERSION = "3.12"
# manylinux tags pip should accept for the target (pip does not widen an explicit --platform)
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux_2_12_x86_64", "manylinux2010_x86_64", "manylinux_2_5_x86_64", "manylinux1_x86_64"]
# role deepspeed_build's build backend (roles/deepspeed_build/vars/main.yml)
BUILD_BACKEND = ["setuptools", "wheel", "ninja"]
# controller requirements (requirements.txt) the GPU machine needs; the `ansible` package itself is
# 50 MB, of which the roles call one collection, shipped as collections.tar.gz
CONTROLLER = ["ansible-core", "matplotlib", "jmespath"]
COLLECTIONS = ["community/general"]


def canon(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def image_packages():
    """{canonical name: (name, version)} of scripts/gpu_image.txt."""
    found = {}
    for line in IMAGE.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _sep, version = line.partition("==")
            found[canon(name)] = (name, version)
    return found


def pins(names):
    """The pinned lines of requirements.txt for ``names``."""
    lines = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        name = re.split(r"[<>=!~ ;\[]", line, maxsplit=1)[0]
        if line and canon(name) in [canon(n) for n in names]:
            lines[canon(name)] = line
    missing = [n for n in names if canon(n) not in lines]
    if missing:
        sys.exit("requirements.txt pins no %s" % ", ".join(missing))
    return [lines[canon(n)] for n in names]


def deepspeed_version():
    text = (ROOT / "roles" / "deepspeed_build" / "defaults" / "main.yml").read_text()
    match = re.search(r"^deepspeed_build_version:\s*[\"']?([0-9][^\"'\s]*)", text, re.M)
    if not match:
        sys.exit("roles/deepspeed_build/defaults/main.yml: no deepspeed_build_version")
    return match.group(1)


def sdist_requirements(sdist):
    """Requires-Dist of the source distribution's PKG-INFO, without extras."""
    with tarfile.open(sdist) as tar:
        member = next(m for m in tar.getmembers() if m.name.count("/") == 1 and m.name.endswith("/PKG-INFO"))
        info = email.parser.Parser().parsestr(tar.extractfile(member).read().decode())
    return [r for r in info.get_all("Requires-Dist") or [] if "extra ==" not in r]


def pip(*args, offline=False):
    env = dict(os.environ)
    if not offline:
        env["PIP_CONFIG_FILE"] = os.devnull  # PyPI as it is, not this host's CPU-torch index
    argv = [sys.executable, "-m", "pip", "--disable-pip-version-check"] + list(args)
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
        raise SystemExit("failed: %s" % " ".join(argv))
    return done


def target_args(target=None):
    """pip's arguments for wheels of the GPU machine (CPython 3.12, manylinux x86_64); ``target``:
    the folder pip install needs with them (a dry run writes nothing there)."""
    args = ["--python-version", PYTHON_VERSION, "--implementation", "cp", "--abi", "cp312", "--only-binary=:all:"]
    for platform in PLATFORMS:
        args += ["--platform", platform]
    return args + (["--target", target] if target else [])


def build(out):
    out = pathlib.Path(out)
    if out.exists():
        shutil.rmtree(out)
    (out / "wheels").mkdir(parents=True)
    image = image_packages()
    version = deepspeed_version()
    pip("download", "--no-deps", "--no-binary", ":all:", "-d", str(out), "deepspeed==%s" % version)
    [sdist] = out.glob("deepspeed-*.tar.gz")
    wanted = pins(CONTROLLER) + BUILD_BACKEND + sdist_requirements(sdist)
    (out / "requirements.txt").write_text("\n".join(wanted) + "\n")
    with tempfile.TemporaryDirectory() as tmp:
        # Resolved with the image's versions as constraints, without torch (the image has it, and
        # resolving it would pull the CUDA wheels): what is left after the image is the bundle.
        constraints = pathlib.Path(tmp, "image.txt")
        constraints.write_text("".join("%s==%s\n" % nv for key, nv in image.items() if key != "torch"))
        report = pathlib.Path(tmp, "report.json")
        pip("install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report),
            "-c", str(constraints), *target_args(tmp + "/t"),
            *[w for w in wanted if canon(re.split(r"[<>=!~ ;\[]", w, maxsplit=1)[0]) != "torch"])
        resolved = [(i["metadata"]["name"], i["metadata"]["version"])
                    for i in json.loads(report.read_text())["install"]]
    lacking = ["%s==%s" % (n, v) for n, v in resolved if canon(n) not in image]
    pip("download", "--no-deps", "-d", str(out / "wheels"), *target_args(), *lacking)
    pack_collections(out / "collections.tar.gz")
    print("gpu bundle %s: %d wheels, %s, collections.tar.gz (%s); %.1f MiB" % (
        out, len(list((out / "wheels").glob("*.whl"))), sdist.name, ", ".join(COLLECTIONS), size(out) / 2**20))


def pack_collections(dest):
    """The collections the roles call, from the `ansible` package beside this python's ansible-core."""
    roots = [pathlib.Path(p) for p in sys.path if pathlib.Path(p, "ansible_collections").is_dir()]
    with tarfile.open(dest, "w:gz") as tar:
        for name in COLLECTIONS:
            found = [r for r in roots if (r / "ansible_collections" / name).is_dir()]
            if not found:
                sys.exit("no collection %s beside %s (make venv installs the ansible package)" % (
                    name, sys.executable))
            tar.add(str(found[0] / "ansible_collections" / name), arcname="ansible_collections/" + name,
                    filter=lambda info: None if "__pycache__" in info.name else info)


def size(path):
    return sum(f.stat().st_size for f in pathlib.Path(path).rglob("*") if f.is_file())


def stub_wheel(folder, name, version):
    """An empty wheel that stands in for an installed package of the image."""
    dist = "%s-%s" % (re.sub(r"[-.]+", "_", name), version)
    path = pathlib.Path(folder, "%s-py3-none-any.whl" % dist)
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr(dist + ".dist-info/METADATA", "Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (name, version))
        whl.writestr(dist + ".dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: gpu_bundle\nRoot-Is-Purelib: true\n"
                     "Tag: py3-none-any\n")
        whl.writestr(dist + ".dist-info/RECORD", "")
    return path


def check(out):
    out = pathlib.Path(out)
    problems = []
    if not out.is_dir():
        sys.exit("gpu bundle %s: missing; make gpu-bundle makes it" % out)
    total = size(out)
    if total > LIMIT:
        problems.append("%.1f MiB, over the 60 MiB the GPU machine takes with the repository" % (total / 2**20))
    image = image_packages()
    wheels = sorted((out / "wheels").glob("*.whl"))
    carried = [w.name for w in wheels if canon(w.name.split("-")[0]) in image]
    if carried:
        problems.append("carries what the image has: %s" % ", ".join(carried))
    sdists = sorted(out.glob("deepspeed-*.tar.gz"))
    if len(sdists) != 1:
        problems.append("holds %d DeepSpeed source distributions, not 1" % len(sdists))
    with tarfile.open(out / "collections.tar.gz") as tar:
        names = tar.getnames()
    for name in COLLECTIONS:
        if "ansible_collections/%s/MANIFEST.json" % name not in names:
            problems.append("collections.tar.gz lacks %s" % name)
    if problems:
        sys.exit("gpu bundle %s: %s" % (out, "; ".join(problems)))
    wanted = [line for line in (out / "requirements.txt").read_text().splitlines() if line.strip()]
    ds_requires = sdist_requirements(sdists[0])
    with tempfile.TemporaryDirectory() as tmp:
        for name, version in image.values():
            stub_wheel(tmp, name, version)
        report = pathlib.Path(tmp, "report.json")
        pip("install", "--dry-run", "--ignore-installed", "--quiet", "--no-index", "--report", str(report),
            "--find-links", str(out / "wheels"), "--find-links", tmp, *target_args(tmp + "/t"),
            *(wanted + ds_requires), offline=True)
        resolved = json.loads(report.read_text())["install"]
    from_bundle = [i for i in resolved if "/wheels/" in i["download_info"]["url"]]
    unused = sorted(set(w.name for w in wheels) - set(i["download_info"]["url"].rsplit("/", 1)[-1]
                                                      for i in from_bundle))
    print("gpu bundle %s: %.1f MiB; offline for CPython %s: %d requirements and DeepSpeed %s's %d resolve to "
          "%d bundle wheels and %d image packages%s" % (
              out, total / 2**20, PYTHON_VERSION, len(wanted), sdists[0].name[10:-7], len(ds_requires),
              len(from_bundle), len(resolved) - len(from_bundle),
              "; unused: %s" % ", ".join(unused) if unused else ""))


def main(argv):
    if len(argv) < 2 or argv[1] not in ("build", "check"):
        sys.exit("usage: gpu_bundle.py build|check [DIR]")
    folder = argv[2] if len(argv) > 2 else str(ROOT / ".gpu")
    (build if argv[1] == "build" else check)(folder)


if __name__ == "__main__":
    main(sys.argv)
