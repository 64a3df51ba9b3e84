#!/usr/bin/python
# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: deepspeed_dist_check
short_description: What the controller's dist/ lacks of the build host's wheel, manifest and wheelhouse
version_added: 0.2.0
description:
  - Run on the controller (C(delegate_to) localhost) by role deepspeed_build with what the build host's
    probe reported. Compares, in one call, the wheel's sha256, the manifest file's sha256 and the
    wheelhouse stamp with the copies in O(dist_dir); the role fetches only what differs.
  - Read-only; never reports a change.
author: multinode.training maintainers (@multinode)
options:
  dist_dir:
    description: The controller folder that receives the wheel, its manifest and C(wheelhouse/).
    type: path
    required: true
  manifest:
    description: The build host's manifest.
    type: dict
    required: true
  manifest_sha256:
    description: sha256 of the build host's manifest file.
    type: str
    required: true
  wheelhouse_stamp:
    description: The build host's wheelhouse stamp; omit when no wheelhouse is kept.
    type: str
extends_documentation_fragment:
  - multinode.training.attributes.read_only
"""

EXAMPLES = r"""
- name: What does dist/ lack?
  multinode.training.deepspeed_dist_check:
    dist_dir: "{{ playbook_dir }}/dist"
    manifest: "{{ probe.manifest }}"
    manifest_sha256: "{{ probe.manifest_sha256 }}"
  delegate_to: localhost
  register: dist
"""

RETURN = r"""
fetch:
  description: C({wheel, manifest, wheelhouse}), true for what must be fetched (the wheel and its manifest as a pair).
  returned: always
  type: dict
current:
  description: Nothing to fetch.
  returned: always
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.multinode.training.plugins.module_utils._build.stage import DIST_CHECK_SPEC, run_dist_check


def main():
    run_dist_check(AnsibleModule(argument_spec=DIST_CHECK_SPEC, supports_check_mode=True))


if __name__ == "__main__":
    main()
