# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Lookup plugin: the source of a file of module_utils/_node, for a task that writes it onto a node."""
from __future__ import annotations

DOCUMENTATION = r"""
---
name: node_source
short_description: The source text of a file the collection runs on the nodes
version_added: "0.2.0"
author:
  - multinode.training maintainers (@multinode)
description:
  - Returns the text of C(plugins/module_utils/_node/<name>.py), the files the collection runs on the
    nodes from their source (standard library only), so that a task writes it with
    C(ansible.builtin.copy) O(ansible.builtin.copy#module:content) as the torchrun and slurm_job
    modules write the same files themselves. Each such file is kept once in the collection, none
    in a role's C(files/).
  - The text is the one the controller's collection holds; C(copy) leaves a node's file unchanged when
    it already has that text.
options:
  _terms:
    description: Names of files of C(module_utils/_node), without C(.py), for example C(fabric_probe).
    required: true
    type: list
    elements: str
"""

EXAMPLES = r"""
- name: The fabric check's probe on every node
  ansible.builtin.copy:
    content: "{{ lookup('multinode.training.node_source', 'fabric_probe') }}"
    dest: /var/log/train/fabric_probe.py
    mode: "0644"
"""

RETURN = r"""
_raw:
  description: The text of each file named, in the order named.
  type: list
  elements: str
"""

import importlib
import inspect
import re

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

PACKAGE = "ansible_collections.multinode.training.plugins.module_utils._node"
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def node_source(name):
    """The source of module_utils/_node/<name>.py; AnsibleLookupError for a name that is not one of them."""
    if not _NAME.match(str(name)):
        raise AnsibleLookupError("node_source: %r is not the name of a file of module_utils/_node (a module "
                                 "name such as fabric_probe, without .py)" % (name,))
    try:
        module = importlib.import_module("%s.%s" % (PACKAGE, name))
    except ImportError as exc:
        raise AnsibleLookupError("node_source: module_utils/_node has no %s.py (%s)" % (name, exc)) from exc
    return inspect.getsource(module)


class LookupModule(LookupBase):
    """multinode.training.node_source"""

    def run(self, terms, variables=None, **kwargs):
        return [node_source(term) for term in terms]
