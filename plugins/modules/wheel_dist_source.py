#!/usr/bin/python
# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: wheel_dist_source
short_description: What role wheel_distribute sends to every node, read and checked on the controller in one call
version_added: 0.2.0
description:
  - Chooses the manifest (explicit, beside an explicit wheel, or the newest in O(dist_dir)), reads and
    validates it (module_utils C(_build.manifest)), checks that the wheel exists, is the one named and has the
    manifest's sha256, and lists the wheelhouse's C(*.whl) with sha256 and size. Without O(index_url),
    the wheelhouse must hold the manifest's torch.
  - Fails with one message naming the file and what is wrong; the role prefixes the node.
  - Read-only; never reports a change. Run on the controller (C(delegate_to) localhost, C(run_once)).
author: multinode.training maintainers (@multinode)
options:
  dist_dir:
    description: Where the build left the wheel and its manifest.
    type: path
    required: true
  manifest:
    description: An explicit manifest; empty chooses as described above.
    type: str
    default: ''
  wheel:
    description: An explicit wheel; empty is the manifest's wheel beside it.
    type: str
    default: ''
  wheelhouse:
    description: Folder of wheels copied to every node; empty for none.
    type: str
    default: ''
  index_url:
    description: The index nodes may use; empty means offline (the wheelhouse must hold torch).
    type: str
    default: ''
  requirements_lock:
    description: The job requirements' lock on the controller (module wheel_requirements_lock), sent to C(dist/).
    type: str
    default: ''
  requirement_wheels:
    description: The wheels that lock adds, sent to C(wheelhouse/).
    type: list
    elements: str
    default: []
  checksum_cache:
    description:
      - Controller file that remembers each file's sha256 with its size and modification time, so that an
        unchanged wheelhouse is not read again on every run. Empty disables it.
    type: path
    default: ~/.cache/multinode-training/wheel-sha256.json
  node:
    description: Prefix of the failure message.
    type: str
    default: ''
extends_documentation_fragment:
  - multinode.training.attributes.read_only
"""

EXAMPLES = r"""
- name: What goes to the nodes
  multinode.training.wheel_dist_source:
    dist_dir: "{{ playbook_dir }}/dist"
    wheelhouse: "{{ playbook_dir }}/dist/wheelhouse"
  delegate_to: localhost
  run_once: true
  register: source
"""

RETURN = r"""
manifest:
  description: The manifest.
  returned: success
  type: dict
manifest_path:
  description: Its path on the controller.
  returned: success
  type: str
wheel_path:
  description: The wheel's path on the controller.
  returned: success
  type: str
files:
  description: Every file each node gets, C(dist/<name>) or C(wheelhouse/<name>) mapped to its C(sha256), C(size) and C(src).
  returned: success
  type: dict
record:
  description: RV(files) without the controller paths, as a node records them after a verified copy.
  returned: success
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.multinode.training.plugins.module_utils._wheel.dist import ARGUMENT_SPEC, run_module


def main():
    run_module(AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True))


if __name__ == "__main__":
    main()
