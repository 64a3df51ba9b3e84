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

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.multinode.training.plugins.module_utils._build.wheel_manifest import ARGUMENT_SPEC, run_module


def main():
    run_module(AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True))


if __name__ == "__main__":
    main()
