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
from ansible_collections.multinode.training.plugins.module_utils._wheel import dist as _wheel_dist


def main():
    module = AnsibleModule(
        argument_spec=dict(
            dist_dir=dict(type="path", required=True),
            manifest=dict(type="str", default=""),
            wheel=dict(type="str", default=""),
            wheelhouse=dict(type="str", default=""),
            index_url=dict(type="str", default=""),
            requirements_lock=dict(type="str", default=""),
            requirement_wheels=dict(type="list", elements="str", default=[]),
            checksum_cache=dict(type="path", default="~/.cache/multinode-training/wheel-sha256.json"),
            node=dict(type="str", default=""),
        ),
        supports_check_mode=True,
    )
    p = module.params
    path = _wheel_dist.choose_manifest(p["dist_dir"], p["manifest"], p["wheel"])
    cache_path = p["checksum_cache"] or ""
    cache = _wheel_dist.load_cache(cache_path) if cache_path else None
    before = dict(cache or {})
    try:
        found = _wheel_dist.source(p["dist_dir"], path, p["wheel"], p["wheelhouse"], p["index_url"],
                                   p["requirements_lock"], p["requirement_wheels"], cache)
    except _wheel_dist.DistError as exc:
        module.fail_json(msg="%s%s" % (p["node"] + ": " if p["node"] else "", exc), manifest_path=path)
    if cache_path and cache != before and not module.check_mode:
        _wheel_dist.save_cache(cache_path, cache)
    module.exit_json(changed=False, record=_wheel_dist.expected_record(found["files"]), **found)


if __name__ == "__main__":
    main()
