#!/usr/bin/python
# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: torch_resolve
short_description: Find out which torch a requirement gives, and whether it is a CUDA build, without installing it
version_added: 0.1.0
description:
  - Answers "is the torch this build would use a CUDA build, and of which CUDA?" before anything
    is installed, so that a CUDA build on a CPU torch is refused up front.
  - Looks, in order, at a torch already installed in O(venv_python), then asks pip to resolve
    O(requirement) with C(pip install --dry-run --report) (the venv's pip, then O(python)'s).
  - When no pip can answer (no venv yet and a system python without a recent pip), returns
    C(resolved=false) and the reason; the caller asks again once the venv exists.
author: multinode.training maintainers (@multinode)
options:
  requirement:
    description: The torch requirement, for example C(torch==2.13.0).
    type: str
    required: true
  python:
    description: Interpreter the build venv is (or will be) made from.
    type: str
    default: python3
  venv_python:
    description: The build venv's interpreter, used when it exists.
    type: path
  pip_args:
    description: Extra pip arguments (indexes, find-links).
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - multinode.training.attributes.read_only
"""

EXAMPLES = r"""
- name: Which torch would the build use?
  multinode.training.torch_resolve:
    requirement: torch==2.13.0
    venv_python: /var/tmp/build/venv/bin/python
  register: torch_info
"""

RETURN = r"""
resolved:
  description: Whether the torch could be determined.
  returned: always
  type: bool
version:
  description: torch version (with its local label, for example C(2.13.0+cpu)).
  returned: when resolved
  type: str
cuda:
  description: CUDA version of the torch build, null for a CPU build.
  returned: when resolved
  type: str
source:
  description: C(installed) (found in the venv) or C(resolved) (pip's dry-run).
  returned: when resolved
  type: str
reason:
  description: Why it could not be determined.
  returned: when not resolved
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.multinode.training.plugins.module_utils import _torch_info


def main():
    module = AnsibleModule(
        argument_spec=dict(
            requirement=dict(type="str", required=True),
            python=dict(type="str", default="python3"),
            venv_python=dict(type="path"),
            pip_args=dict(type="list", elements="str", default=[]),
        ),
        supports_check_mode=True,
    )
    module.exit_json(changed=False, **_torch_info.resolve(module, module.params))


if __name__ == "__main__":
    main()
