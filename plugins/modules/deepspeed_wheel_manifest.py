#!/usr/bin/python
# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: deepspeed_wheel_manifest
short_description: Check that a freshly built DeepSpeed wheel holds every requested op, and write its manifest
version_added: 0.1.0
description:
  - Opens the wheel, looks for the compiled extension of each requested op and fails naming every
    missing op with the reason found in the build log (DeepSpeed's C(setup.py) skips an op it cannot
    build with only a warning; the op would then be JIT-compiled on every node at run time).
  - For cuda builds, reads the GPU code inside each op's extension (the ELF C(.nv_fatbin) section, without
    any NVIDIA tool), records it per op as C(cuda.sass) and C(cuda.ptx), and fails naming the op and the arch
    when an arch of C(info.cuda.arch_list) is missing from its binary.
  - Writes C(<wheel>.manifest.json) beside the wheel (see docs/manifest.md), atomically, after the
    checks pass. The manifest records the wheel's sha256, python tag and platform, and everything in
    O(info).
  - With O(publish_to), then moves the wheel, its build log (as C(<wheel>.build.log)) and the manifest, in that
    order, into that folder, after removing the older wheels, manifests and build logs there (manifests first),
    so that a manifest there always names a whole wheel beside it. O(remove) (the staging folder) is deleted after.
author: multinode.training maintainers (@multinode)
options:
  wheel:
    description: Path of the wheel on this host, or of the folder holding it (exactly one C(deepspeed-*.whl)).
    type: path
    required: true
  ops:
    description: The requested ops as returned by M(multinode.training.deepspeed_build_plan) (name, builder, build_var, module).
    type: list
    elements: dict
    required: true
  build_log:
    description: The build's log file, searched for the reason an op is missing.
    type: path
  info:
    description: Fields merged into the manifest (deepspeed, accelerator, torch, cuda, cpu, compiler, build...).
    type: dict
    default: {}
  wheelhouse_inputs:
    description:
      - C({torch_requirement, pip_args}) of the wheelhouse collected beside the wheel; with them the module
        returns RV(wheelhouse_key), the stamp that wheelhouse must carry (module_utils/_build/deepspeed.py).
    type: dict
  publish_to:
    description: Folder the checked wheel, its build log and its manifest move into (the role's C(out/)).
    type: path
  remove:
    description: Folder deleted once the wheel is published (the build's staging folder).
    type: path
attributes:
  check_mode:
    support: full
    description: Checks the wheel; does not write the manifest or move anything.
  diff_mode:
    support: none
    description: Reports no differences.
"""

EXAMPLES = r"""
- name: Check the ops and write the manifest
  multinode.training.deepspeed_wheel_manifest:
    wheel: /var/tmp/build/staging/deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl
    ops: "{{ plan.ops }}"
    build_log: /var/tmp/build/staging/build.log
    info:
      accelerator: cpu
      deepspeed: {version: 0.19.8}
"""

RETURN = r"""
manifest:
  description: The manifest written (docs/manifest.md).
  returned: always
  type: dict
manifest_path:
  description: Where the manifest is (in O(publish_to) when given).
  returned: always
  type: str
  sample: /var/tmp/build/staging/deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl.manifest.json
manifest_sha256:
  description: sha256 of the manifest file's text.
  returned: always
  type: str
wheelhouse_key:
  description: The wheelhouse stamp for this wheel.
  returned: when O(wheelhouse_inputs) is given
  type: str
published:
  description: C({wheel, manifest_path, build_log, removed}) with O(publish_to); C(removed) are the older files' names.
  returned: when O(publish_to) is given
  type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.multinode.training.plugins.module_utils._build import deepspeed as _deepspeed_build
from ansible_collections.multinode.training.plugins.module_utils._build import ops as _deepspeed_ops
from ansible_collections.multinode.training.plugins.module_utils._build import manifest as _manifest


def wheel_tags(filename):
    """deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl -> (cp311, cp311, linux_x86_64)."""
    parts = filename[:-len(".whl")].split("-")
    if len(parts) < 5:
        raise ValueError("%s is not a wheel file name (name-version-python-abi-platform.whl)" % filename)
    return parts[-3], parts[-2], parts[-1]


def main():
    module = AnsibleModule(
        argument_spec=dict(
            wheel=dict(type="path", required=True),
            ops=dict(type="list", elements="dict", required=True),
            build_log=dict(type="path"),
            info=dict(type="dict", default={}),
            wheelhouse_inputs=dict(type="dict"),
            publish_to=dict(type="path"),
            remove=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    wheel = module.params["wheel"]
    if os.path.isdir(wheel):
        wheel = _deepspeed_build.find_wheel(wheel) or os.path.join(wheel, "deepspeed-*.whl")
    if not os.path.isfile(wheel):
        module.fail_json(msg="no wheel at %s: the build did not produce one" % wheel)
    log = ""
    if module.params["build_log"] and os.path.isfile(module.params["build_log"]):
        with open(module.params["build_log"], errors="replace") as handle:
            log = handle.read()
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
    path = _manifest.path_for(wheel)
    found_problems = _manifest.problems(manifest, path)
    if found_problems:
        module.fail_json(msg="; ".join(found_problems), manifest=manifest)
    changed = _manifest.write(path, manifest, module.check_mode)
    result = dict(changed=changed, manifest=manifest, manifest_path=path,
                  manifest_sha256=_manifest.sha256_text(_manifest.dumps(manifest)))
    if module.params["publish_to"] and not module.check_mode:
        try:
            result["published"] = _deepspeed_build.publish(wheel, path, module.params["build_log"],
                                                           module.params["publish_to"], module.params["remove"])
        except (IOError, OSError) as exc:
            module.fail_json(msg="cannot move the wheel into %s: %s" % (module.params["publish_to"], exc))
        result.update(changed=True, manifest_path=result["published"]["manifest_path"])
    inputs = module.params["wheelhouse_inputs"]
    if inputs is not None:
        result["wheelhouse_key"] = _deepspeed_build.wheelhouse_key(
            os.path.basename(path), (manifest.get("build") or {}).get("key"),
            inputs.get("torch_requirement"), inputs.get("pip_args") or [])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
