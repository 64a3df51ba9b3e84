# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Module wheel_distribute's lock step: read the requirements, let pip resolve them against the
pinned wheelhouse for the nodes' platform, build what has only an sdist, download what is added, write
the lock.

plugins/modules/wheel_distribute.py documents it and runs ``run_module`` as its lock step (module_utils/_stepped.py).
The decisions on text (parsing, pinning, pip's verdict, the lock's format) are _wheel/requirements.py; the
nodes' platform tags _wheel/node_platform.py; whether and how an sdist is built here _wheel/sdist.py.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile

from ansible_collections.multinode.training.plugins.module_utils._wheel import node_platform
from ansible_collections.multinode.training.plugins.module_utils._wheel import requirements as reqs
from ansible_collections.multinode.training.plugins.module_utils._wheel import sdist
from ansible_collections.multinode.training.plugins.module_utils._wheel.node_probe import INTERPRETER_SCRIPT

ARGUMENT_SPEC = dict(
    requirements=dict(type="list", elements="str", default=[]),
    requirements_file=dict(type="path"),
    wheelhouse=dict(type="path", required=True),
    deepspeed_wheel=dict(type="path", required=True),
    wheel_sha256=dict(type="str", required=True),
    python_version=dict(type="str", required=True),
    dest=dict(type="path", required=True),
    lock=dict(type="path", required=True),
    pip_args=dict(type="list", elements="str", default=[]),
    python=dict(type="path"),
    nodes=dict(type="dict", default={}),
    build_dir=dict(type="path", default="~/.cache/multinode-training/sdist-build"),
)
REFUSED = "job requirements refused before any node was touched: "


def reusable(sha256_of, lock_path, digest, dest, wheelhouse, wheel_dir):
    """True when the lock records this digest and every wheel it names is present with its sha256."""
    if not os.path.isfile(lock_path):
        return None
    with open(lock_path) as handle:
        recorded, entries = reqs.read_lock(handle.read())
    if recorded != digest or not entries:
        return None
    for entry in entries:
        for base in (dest, wheelhouse, wheel_dir):
            path = os.path.join(base, entry["filename"])
            if os.path.isfile(path):
                break
        else:
            return None
        if base == dest and sha256_of(path) != entry["sha256"]:
            return None
    return entries


def read_text(path):
    with open(path) as handle:
        return handle.read()


def read_requirements(module):
    """The variable's requirements, the files its ``-r <path>`` items include, then the file's, merged; a bad
    line or a missing file fails the module."""
    p = module.params
    for index, item in enumerate(p["requirements"]):
        path = reqs.included_file(item)
        if path is not None and not os.path.isfile(path):
            module.fail_json(msg="wheel_distribute_requirements[%d]=%s: no such file on the controller; valid: "
                                 "-r <path of a readable requirements file>" % (index, json.dumps(item)))
    try:
        groups = [reqs.parse_requirements(lines, source) for source, lines in
                  reqs.requirement_groups(p["requirements"], "wheel_distribute_requirements", read_text)]
        if p["requirements_file"]:
            if not os.path.isfile(p["requirements_file"]):
                module.fail_json(msg="wheel_distribute_requirements_file=%s: no such file on the controller; "
                                     "valid: a readable requirements file" % p["requirements_file"])
            groups.append(reqs.parse_requirements(read_text(p["requirements_file"]).splitlines(),
                                                  p["requirements_file"]))
        return reqs.merge_requirements(*groups)
    except reqs.RequirementsError as exc:
        module.fail_json(msg=str(exc))


def pinned_wheels(files, wheelhouse, deepspeed_wheel):
    """The wheelhouse's and DeepSpeed's wheels: ({name: pinned version}, {name: the pinned wheel's path})."""
    pinned = reqs.pinned_set(files + [os.path.basename(deepspeed_wheel)])
    pinned_files = {}
    for path in [os.path.join(wheelhouse, f) for f in files] + [deepspeed_wheel]:
        name_version = reqs.wheel_name_version(os.path.basename(path))
        if name_version and pinned.get(name_version[0]) == name_version[1]:
            pinned_files[name_version[0]] = path
    return pinned, pinned_files


def find_links(p, built):
    """The local folders pip looks in: the wheelhouse, the DeepSpeed wheel's, the wheels built here (if any)."""
    args = ["--find-links", p["wheelhouse"], "--find-links", os.path.dirname(p["deepspeed_wheel"])]
    return args + (["--find-links", built] if built and os.path.isdir(built) else [])


def binary_args(p, platform_tags):
    """Wheels only, for the nodes' python and (when known) their platform."""
    return (["--only-binary=:all:", "--python-version", p["python_version"]]
            + node_platform.platform_args(platform_tags))


def resolve_cmd(python, p, tmp, constraints, report, pinned, requirements, platform_tags=(), built=None):
    """pip's dry-run resolution of DeepSpeed, torch's pin and the requirements, offline-first, as argv."""
    torch = pinned.get("torch")
    return ([python, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-input",
             "--disable-pip-version-check"] + binary_args(p, platform_tags)
            + ["--target", os.path.join(tmp, "target"), "--report", report, "-c", constraints]
            + find_links(p, built)
            + p["pip_args"]
            + [p["deepspeed_wheel"]] + (["torch==%s" % torch] if torch else [])
            + [r["text"] for r in requirements])


def sdist_query_cmd(python, p, tmp, spec, platform_tags, built):
    """The same binary-only question for one requirement, alone and verbose: pip names the sdists it skips."""
    return ([python, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-deps", "--no-input",
             "--disable-pip-version-check", "-vv"] + binary_args(p, platform_tags)
            + ["--target", os.path.join(tmp, "query")] + find_links(p, built) + p["pip_args"] + [spec])


def constraints_file(tmp, pinned):
    path = os.path.join(tmp, "constraints.txt")
    with open(path, "w") as handle:
        handle.write(reqs.constraints_text(pinned))
    return path


def resolve(module, python, tmp, pinned, pinned_files, requirements, result, platform=None, built=None):
    """Run pip's resolution; its report -> the lock's entries (a pin names the wheelhouse file).

    A requirement pip finds no wheel of but an sdist is built here (build_sdist) and the resolution runs
    again with it; None in check mode when something would be built."""
    p = module.params
    platform_tags = platform["tags"] if platform else []
    constraints = constraints_file(tmp, pinned)
    report = os.path.join(tmp, "report.json")
    for _round in range(sdist.MAX_BUILDS + 1):
        cmd = resolve_cmd(python, p, tmp, constraints, report, pinned, requirements, platform_tags, built)
        result["cmd"] = cmd
        rc, out, err = module.run_command(cmd)
        if rc == 0:
            break
        buildable = sdists_of(module, python, tmp, out + "\n" + err, platform_tags, built, pinned)
        if not buildable or _round == sdist.MAX_BUILDS:
            module.fail_json(msg=REFUSED + "; ".join(reqs.pip_failure(out + "\n" + err, requirements, pinned)),
                             **result)
        if module.check_mode:
            result.update(changed=True, would_build=["%s==%s" % b[1:] for b in buildable])
            return None
        for spec, name, version in buildable:
            again = [f for f in result["built"] if reqs.wheel_name_version(f) == (name, version)]
            if again:  # built in this run, and still no wheel for pip: its tags are not the nodes'
                module.fail_json(msg=REFUSED + "%s: %s built from its sdist, but pip does not take it for the nodes' "
                                 "platform (%s); valid: a wheel tagged for the nodes" % (
                                     sdist.where(spec, requirements), again[0], ", ".join(platform_tags) or "none"),
                                 **result)
            build_sdist(module, python, tmp, constraints, pinned, requirements, platform, built, spec, name, version,
                        result)
    with open(report) as handle:
        entries, problems = reqs.report_entries(json.load(handle), pinned)
    # A pinned package is installed from the wheelhouse file (pip may have looked at an index copy
    # with other tags): the lock names that file and its sha256.
    for entry in entries:
        local = pinned_files.get(entry["name"])
        if entry["pinned"] and local and os.path.basename(local) != entry["filename"]:
            entry.update(filename=os.path.basename(local), sha256=module.sha256(local))
    if problems:
        module.fail_json(msg=REFUSED + "; ".join(problems), **result)
    return entries


def sdists_of(module, python, tmp, output, platform_tags, built, pinned):
    """The requirements pip found no wheel for that have an sdist -> [(spec, name, version to build)];
    empty when one of them has none, or is pinned (torch, DeepSpeed and their dependencies come from the
    wheelhouse as built, never from a build here): pip's failure stands."""
    found = []
    for spec in sdist.missing_specs(output):
        if sdist.spec_name(spec) in pinned:
            return []
        rc, out, err = module.run_command(sdist_query_cmd(python, module.params, tmp, spec, platform_tags, built))
        version = sdist.pick_version(sdist.sdist_versions(out + "\n" + err, sdist.spec_name(spec)), spec)
        if version is None:
            return []
        found.append((spec, sdist.spec_name(spec), version))
    return found


def build_python(module, python_version):
    """The controller's python that builds for the nodes: the module's ``python`` (or this one) when it is
    their X.Y, else ``python<X.Y>`` on PATH; INTERPRETER_SCRIPT's answer."""
    candidates = [module.params["python"] or sys.executable]
    other = module.get_bin_path("python%s" % python_version) if hasattr(module, "get_bin_path") else None
    if other:
        candidates.append(other)
    facts = None
    for candidate in candidates:
        rc, out, err = module.run_command([candidate, "-c", INTERPRETER_SCRIPT])
        try:
            facts = dict(json.loads(out), executable=candidate) if rc == 0 else None
        except ValueError:
            facts = None
        if facts is None:
            facts = {"executable": candidate, "error": (err or out).strip()[-300:] or "rc %d" % rc}
        elif ".".join(facts["version"].split(".")[:2]) == python_version:
            return facts
    return facts


def build_sdist(module, python, tmp, constraints, pinned, requirements, platform, built, spec, name, version,
                result):
    """``pip wheel --no-deps`` of name==version on the controller, checked against the nodes, into ``built``.

    First with pip's build isolation (the sdist's declared build requirements; the pinned torch as
    PIP_CONSTRAINT, which reaches the isolated environment); an sdist that imports torch without
    declaring it (flash-attn, apex) is built again without isolation in a venv of the pinned torch and build
    tools from the wheelhouse, made once per build key. A failure is refused naming the requirement and why."""
    p = module.params
    where = "%s: %s==%s has no wheel for the nodes (python %s%s) and its sdist cannot be built on the " \
            "controller: " % (sdist.where(spec, requirements), name, version, p["python_version"],
                              ", %s" % platform["tags"][0] if platform else "")
    host = build_python(module, p["python_version"])
    problems = sdist.build_host_problems(host, platform, p["python_version"])
    if problems:
        module.fail_json(msg=REFUSED + where + "; ".join(problems) + "; valid: the controller (where the lock runs) "
                         "with python %s, the nodes' arch and a glibc no newer than theirs, or a wheel of %s on the "
                         "index" % (p["python_version"], name), **result)
    out_dir = os.path.join(tmp, "built-%s" % name)
    argv = ["-m", "pip", "wheel", "--no-deps", "--no-input", "--disable-pip-version-check", "--no-binary", name,
            "-w", out_dir, "--find-links", p["wheelhouse"]] + p["pip_args"] + ["%s==%s" % (name, version)]
    build_pins = os.path.join(tmp, "build-constraints.txt")
    with open(build_pins, "w") as handle:
        handle.write(sdist.build_constraints(pinned))
    env = {"PIP_CONSTRAINT": build_pins}
    rc, out, err = module.run_command([host["executable"]] + argv, environ_update=env)
    if rc != 0 and sdist.needs_torch(out + "\n" + err) and "torch" in pinned:
        env_python = build_env(module, host["executable"], constraints, pinned, os.path.dirname(built), result)
        rc, out, err = module.run_command([env_python] + argv[:3] + ["--no-build-isolation"] + argv[3:],
                                          environ_update=env)
    if rc != 0:
        module.fail_json(msg=REFUSED + where + sdist.build_failure(out + "\n" + err), **result)
    wheels = sorted(f for f in os.listdir(out_dir) if f.endswith(".whl")) if os.path.isdir(out_dir) else []
    if len(wheels) != 1:
        module.fail_json(msg=REFUSED + where + "pip wheel left %d wheels (%s); valid: one" % (
            len(wheels), ", ".join(wheels)), **result)
    problems = sdist.runs_on_nodes(wheels[0], p["nodes"], p["python_version"])
    if problems:
        module.fail_json(msg=REFUSED + where + "; ".join(problems) + "; valid: a controller like the nodes",
                         **result)
    if not os.path.isdir(built):
        os.makedirs(built, 0o755)
    shutil.move(os.path.join(out_dir, wheels[0]), os.path.join(built, wheels[0]))
    result["built"].append(wheels[0])


def build_env(module, python, constraints, pinned, key_dir, result):
    """The venv (made once per build key) that builds without isolation: the pinned torch and build tools."""
    venv = os.path.join(key_dir, "venv")
    env_python = os.path.join(venv, "bin", "python")
    if os.path.isfile(os.path.join(venv, ".complete")):
        return env_python
    shutil.rmtree(venv, ignore_errors=True)
    for cmd in ([python, "-m", "venv", venv],
                [env_python, "-m", "pip", "install", "--no-input", "--disable-pip-version-check", "--no-index",
                 "--find-links", module.params["wheelhouse"], "-c", constraints]
                + sdist.build_env_requirements(pinned)):
        rc, out, err = module.run_command(cmd)
        if rc != 0:
            module.fail_json(msg=REFUSED + "the build environment with the pinned torch (%s) could not be made: %s"
                             % (venv, (err or out).strip()[-600:]), **result)
    open(os.path.join(venv, ".complete"), "w").close()
    return env_python


def download(module, python, tmp, entries, result, platform=None, built=None):
    """Fetch the added wheels dest lacks (or holds with another sha256) into dest, checked against pip's report."""
    p, sha256_of = module.params, module.sha256
    added = [e for e in entries if not e["pinned"]]
    missing = [e for e in added if not (os.path.isfile(os.path.join(p["dest"], e["filename"]))
                                        and sha256_of(os.path.join(p["dest"], e["filename"]))
                                        == e["sha256"])]
    if not missing or module.check_mode:
        return
    if not os.path.isdir(p["dest"]):
        os.makedirs(p["dest"], 0o755)
    fetch = os.path.join(tmp, "download")
    dl = ([python, "-m", "pip", "download", "--no-deps", "--no-input", "--disable-pip-version-check"]
          + binary_args(p, platform["tags"] if platform else []) + ["-d", fetch]
          + (["--find-links", built] if built and os.path.isdir(built) else [])
          + p["pip_args"] + ["%s==%s" % (e["name"], e["version"]) for e in missing])
    rc, _out, err = module.run_command(dl)
    if rc != 0:
        module.fail_json(msg="downloading the requirement wheels failed: %s" % err.strip()[-800:],
                         dl_cmd=dl, **result)
    for entry in missing:
        got = os.path.join(fetch, entry["filename"])
        if not os.path.isfile(got) or sha256_of(got) != entry["sha256"]:
            module.fail_json(msg="%s: downloaded file %s is missing or its sha256 differs from pip's "
                                 "report (%s)" % (entry["name"], entry["filename"], entry["sha256"]),
                             **result)
        shutil.move(got, os.path.join(p["dest"], entry["filename"]))
        result["downloaded"].append(entry["filename"])


def write_lock(module, entries, digest, result):
    """Write the lock when its text changes (not in check mode); changed also when a wheel was downloaded."""
    lock = module.params["lock"]
    text = reqs.lock_text(entries, digest)
    old = open(lock).read() if os.path.isfile(lock) else None
    if old != text:
        result["changed"] = True
        if not module.check_mode:
            with open(lock + ".tmp", "w") as handle:
                handle.write(text)
            os.rename(lock + ".tmp", lock)
    result["changed"] = result["changed"] or bool(result["downloaded"]) or bool(result["built"])


def nodes_platform(module):
    """The nodes' arch, lowest glibc and pip's platform tags for them; None without node facts."""
    try:
        platform = node_platform.nodes_platform(module.params["nodes"])
        if platform:
            platform["tags"] = node_platform.platform_tags(platform["arch"], platform["glibc"])
    except node_platform.PlatformError as exc:
        module.fail_json(msg=REFUSED + "wheel_distribute (the nodes' platform): %s" % exc)
    return platform


def run_module(module):
    p = module.params
    requirements = read_requirements(module)
    platform = nodes_platform(module)
    platform_tags = platform["tags"] if platform else []
    wheel_dir = os.path.dirname(p["deepspeed_wheel"])
    files = sorted(f for f in os.listdir(p["wheelhouse"]) if f.endswith(".whl"))
    pinned, pinned_files = pinned_wheels(files, p["wheelhouse"], p["deepspeed_wheel"])
    digest = reqs.input_digest(requirements, pinned, p["python_version"], p["pip_args"], p["wheel_sha256"],
                               platform_tags)
    # the wheels built here from sdists, for these pins, this python and platform (sdist.build_key)
    built = os.path.join(p["build_dir"], sdist.build_key(p["python_version"], pinned, platform_tags)[:16], "wheels")
    result = dict(changed=False, lock=p["lock"], requirements=requirements, downloaded=[], built=[],
                  platform=platform_tags)

    entries = reusable(module.sha256, p["lock"], digest, p["dest"], p["wheelhouse"], wheel_dir)
    if entries is None:
        python = p["python"] or sys.executable
        tmp = tempfile.mkdtemp(prefix="mt-requirements-")
        try:
            entries = resolve(module, python, tmp, pinned, pinned_files, requirements, result, platform, built)
            if entries is None:  # check mode, an sdist would be built: nothing more to say
                module.exit_json(**dict(result, entries=[], added=[], lock_sha256=""))
            download(module, python, tmp, entries, result, platform, built)
            write_lock(module, entries, digest, result)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    for entry in entries:  # a reused lock does not record which entries are pins
        entry["pinned"] = entry["name"] in pinned
    result["entries"] = entries
    result["added"] = [os.path.join(p["dest"], e["filename"]) for e in entries
                       if not os.path.isfile(os.path.join(p["wheelhouse"], e["filename"]))
                       and e["filename"] != os.path.basename(p["deepspeed_wheel"])]
    result["lock_sha256"] = module.sha256(p["lock"]) if os.path.isfile(p["lock"]) else ""
    module.exit_json(**result)
