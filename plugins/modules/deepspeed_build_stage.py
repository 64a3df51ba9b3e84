#!/usr/bin/python
# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: deepspeed_build_stage
short_description: Stage one DeepSpeed build and read the torch it compiles against, in one round trip
version_added: 0.3.0
description:
  - Run by role deepspeed_build after torch is installed into the build venv, right before C(setup.py bdist_wheel).
  - Makes a clean staging folder C(<workdir>/staging) (C(src) a copy of the source tree, symlinks kept; C(dist) empty),
    writes the build helper C(<workdir>/run_logged.py) (it keeps the compiler output in a log file and prints its
    errors on failure) and reads the build venv's torch as C(import torch) would say it (C(torch.__version__),
    e.g. C(2.13.0+cu130), and C(torch.version.cuda)) from C(torch/version.py), without importing torch.
  - Fails naming the venv when it holds no torch.
author: multinode.training maintainers (@multinode)
options:
  workdir:
    description: The role's work folder (C(venv/), C(staging/)).
    type: path
    required: true
  source_tree:
    description: The unpacked DeepSpeed source to build.
    type: path
    required: true
attributes:
  check_mode:
    description: Can run in check mode and return changed status prediction without modifying target.
    support: partial
    details: Reads the torch; stages nothing.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check mode), when in diff mode.
    support: none
  idempotent:
    description: When run twice in a row outside check mode, with the same arguments, the second invocation indicates no change.
    support: none
    details: Every build starts from a fresh copy; the role stages only when it builds.
"""

EXAMPLES = r"""
- name: Stage the build
  multinode.training.deepspeed_build_stage:
    workdir: /var/tmp/multinode-training/deepspeed-build
    source_tree: /var/tmp/multinode-training/deepspeed-build/src/tree-0123456789abcdef
  register: staged
"""

RETURN = r"""
torch:
  description: C({version, cuda}) of the venv's torch (C(torch.__version__), C(torch.version.cuda)).
  returned: always
  type: dict
  sample: {version: 2.13.0+cpu, cuda: null}
staging:
  description: The staging folder (C(src/), C(dist/)).
  returned: always
  type: str
helper:
  description: Path of the build helper.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.multinode.training.plugins.module_utils._build.stage import STAGE_SPEC, run_stage


def main():
    run_stage(AnsibleModule(argument_spec=STAGE_SPEC, supports_check_mode=True))


if __name__ == "__main__":
    main()
