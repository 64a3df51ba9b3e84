# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Module deepspeed_build's manifest step: check a freshly built wheel's ops (and their GPU code),
write its manifest, publish wheel, build log and manifest.

plugins/modules/deepspeed_build.py documents it and runs ``run_module`` as its manifest step (module_utils/_stepped.py).
The checks are _build/ops.py, the manifest's format _build/manifest.py, publishing _build/deepspeed.py.
"""
from __future__ import annotations

import os

from ansible_collections.multinode.training.plugins.module_utils._build import deepspeed as _deepspeed_build
from ansible_collections.multinode.training.plugins.module_utils._build import ops as _deepspeed_ops
from ansible_collections.multinode.training.plugins.module_utils._build import manifest as _manifest

ARGUMENT_SPEC = dict(
    wheel=dict(type="path", required=True),
    ops=dict(type="list", elements="dict", required=True),
    build_log=dict(type="path"),
    info=dict(type="dict", default={}),
    wheelhouse_inputs=dict(type="dict"),
    publish_to=dict(type="path"),
    remove=dict(type="path"),
)


def wheel_tags(filename):
    """deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl -> (cp311, cp311, linux_x86_64)."""
    parts = filename[:-len(".whl")].split("-")
    if len(parts) < 5:
        raise ValueError("%s is not a wheel file name (name-version-python-abi-platform.whl)" % filename)
    return parts[-3], parts[-2], parts[-1]


def find_wheel(module):
    """The wheel (a folder holds exactly one) and the build log's text ('' without one)."""
    wheel = module.params["wheel"]
    if os.path.isdir(wheel):
        wheel = _deepspeed_build.find_wheel(wheel) or os.path.join(wheel, "deepspeed-*.whl")
    if not os.path.isfile(wheel):
        module.fail_json(msg="no wheel at %s: the build did not produce one" % wheel)
    log = ""
    if module.params["build_log"] and os.path.isfile(module.params["build_log"]):
        with open(module.params["build_log"], errors="replace") as handle:
            log = handle.read()
    return wheel, log


def build_manifest(module, wheel, log):
    """The manifest of a wheel whose every requested op (and, for cuda, every arch) is there; else fail naming them."""
    try:
        found = _deepspeed_ops.check_wheel(wheel, module.params["ops"], log)
        python_tag, abi, platform = wheel_tags(os.path.basename(wheel))
    except (_deepspeed_ops.OpsError, ValueError) as exc:
        module.fail_json(msg=str(exc))
    manifest = {"schema": _manifest.SCHEMA, "wheel": os.path.basename(wheel), "wheel_sha256": _manifest.sha256_file(wheel),
                "wheel_size": os.path.getsize(wheel)}
    manifest.update(module.params["info"])
    manifest["python"] = dict(manifest.get("python") or {}, tag=python_tag, abi=abi, platform=platform)
    ops = [dict(name=op["name"], builder=op["builder"], build_var=op["build_var"],
                module=op["module"], file=found[op["name"]]) for op in module.params["ops"]]
    if manifest.get("accelerator") == "cuda":
        arch_list = [a for a in ((manifest.get("cuda") or {}).get("arch_list") or "").split(";") if a]
        coverage, problems = _deepspeed_ops.wheel_gpu_coverage(wheel, found, arch_list)
        if problems:
            module.fail_json(msg="; ".join(problems), coverage=coverage)
        for op in ops:
            op["cuda"] = coverage[op["name"]]
    manifest["ops"] = ops
    return manifest


def run_module(module):
    p = module.params
    wheel, log = find_wheel(module)
    manifest = build_manifest(module, wheel, log)
    path = _manifest.path_for(wheel)
    found_problems = _manifest.problems(manifest, path)
    if found_problems:
        module.fail_json(msg="; ".join(found_problems), manifest=manifest)
    changed = _manifest.write(path, manifest, module.check_mode)
    result = dict(changed=changed, manifest=manifest, manifest_path=path,
                  manifest_sha256=_manifest.sha256_text(_manifest.dumps(manifest)))
    if p["publish_to"] and not module.check_mode:
        try:
            result["published"] = _deepspeed_build.publish(wheel, path, p["build_log"], p["publish_to"], p["remove"])
        except (IOError, OSError) as exc:
            module.fail_json(msg="cannot move the wheel into %s: %s" % (p["publish_to"], exc))
        result.update(changed=True, manifest_path=result["published"]["manifest_path"])
    inputs = p["wheelhouse_inputs"]
    if inputs is not None:
        result["wheelhouse_key"] = _deepspeed_build.wheelhouse_key(
            os.path.basename(path), (manifest.get("build") or {}).get("key"),
            inputs.get("torch_requirement"), inputs.get("pip_args") or [])
    module.exit_json(**result)
