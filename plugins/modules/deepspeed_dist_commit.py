#!/usr/bin/python
# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: deepspeed_dist_commit
short_description: Move fetched files from dist/.incoming into dist/, in order, and remove .incoming
version_added: 0.3.0
description:
  - Run on the controller (C(delegate_to) localhost) by role deepspeed_build after it fetched the wheel and its
    manifest into C(<dist_dir>/.incoming). Renames each of O(names) into O(dist_dir) in the order given (the wheel
    before its manifest, so that a manifest in dist/ always has its whole wheel beside it), then removes C(.incoming).
  - Fails naming the file when one of O(names) was not fetched.
author: multinode.training maintainers (@multinode)
options:
  dist_dir:
    description: The controller folder that receives the wheel and its manifest.
    type: path
    required: true
  names:
    description: File names in C(<dist_dir>/.incoming), in the order they are moved.
    type: list
    elements: str
    required: true
attributes:
  check_mode:
    description: Can run in check mode and return changed status prediction without modifying target.
    support: full
    details: Reports the change; moves nothing.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check mode), when in diff mode.
    support: none
  idempotent:
    description: When run twice in a row outside check mode, with the same arguments, the second invocation indicates no change.
    support: none
    details: The role runs it only after a fetch; the second run finds nothing in C(.incoming) and fails.
"""

EXAMPLES = r"""
- name: Move into dist/, wheel first
  multinode.training.deepspeed_dist_commit:
    dist_dir: "{{ playbook_dir }}/dist"
    names: [deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl, deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl.manifest.json]
  delegate_to: localhost
"""

RETURN = r"""
moved:
  description: The names moved, in order.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.multinode.training.plugins.module_utils._build.stage import DIST_COMMIT_SPEC, run_dist_commit


def main():
    run_dist_commit(AnsibleModule(argument_spec=DIST_COMMIT_SPEC, supports_check_mode=True))


if __name__ == "__main__":
    main()
