# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Inventory plugin: DeepSpeed / MPI hostfiles (`host slots=N`) as an Ansible inventory."""
from __future__ import annotations

DOCUMENTATION = r"""
---
name: hostfile
short_description: DeepSpeed / MPI hostfiles (C(host slots=N)) as inventory
version_added: "0.2.0"
author:
  - multinode.training maintainers (@multinode)
description:
  - Reads the hostfile that C(deepspeed --hostfile), C(accelerate) (C(deepspeed_hostfile)) and
    C(mpirun --hostfile) take, so that C(ansible-playbook train.yml -i hostfile) runs on those hosts.
  - One host per line, C(<host> slots=<n>) (OpenMPI's C(max_slots=<n>) is accepted and ignored), C(#)
    comments and blank lines. Every host joins the group O(group) (default C(train), the group
    C(train.yml) runs on); C(slots) becomes that host's C(train_nproc_per_node). A host without C(slots)
    keeps C(train_nproc_per_node=auto).
  - Every bad line is refused with file and line number (C(slots=0), a duplicate host, an unknown
    field, a line that is not C(host [slots=N])). Ansible moves on to the next enabled plugin when one
    fails (C(ini) would read C(slots=0) as a variable), so the plugin also records the error in the
    variable C(multinode_training_inventory_errors) of group C(all); C(train.yml) refuses to run while
    it is set, before any node is touched.
  - The file is accepted when its name is C(hostfile), starts with C(hostfile) or ends with
    C(.hostfile) or C(_hostfile). Enable the plugin in C(ansible.cfg)
    (C([inventory] enable_plugins = multinode.training.hostfile, ...)), as this repository's
    C(ansible.cfg) does, or with C(ANSIBLE_INVENTORY_ENABLED).
  - Host names are used as given (C(ansible_host) is not set); names that SSH resolves, for example
    through C(~/.ssh/config), work as they do for C(pdsh).
options:
  group:
    description: Group every host of the file joins.
    type: str
    default: train
    ini:
      - section: multinode_training_hostfile
        key: group
    env:
      - name: MULTINODE_TRAINING_HOSTFILE_GROUP
"""

EXAMPLES = r"""
# hostfile (the DeepSpeed / pdsh one, unchanged):
#   worker-1 slots=8
#   worker-2 slots=8   # second box
#
# ansible.cfg:
#   [inventory]
#   enable_plugins = multinode.training.hostfile, host_list, script, auto, yaml, ini, toml
#
# ansible-playbook train.yml -i hostfile        # 2 nodes x 8 processes
# ansible-inventory -i hostfile --list          # train: worker-1, worker-2; train_nproc_per_node: 8
"""

import os

from ansible.errors import AnsibleParserError
from ansible.module_utils.common.text.converters import to_bytes, to_native, to_text
from ansible.plugins.inventory import BaseInventoryPlugin
from ansible.utils.display import Display

from ansible_collections.multinode.training.plugins.module_utils._launch.hostfile import HostfileError, parse_hostfile

display = Display()


class InventoryModule(BaseInventoryPlugin):
    """DeepSpeed / MPI hostfile inventory."""

    NAME = "multinode.training.hostfile"

    def verify_file(self, path):
        if not super().verify_file(path):
            return False
        name = os.path.basename(path)
        return name.startswith("hostfile") or name.endswith((".hostfile", "_hostfile"))

    def parse(self, inventory, loader, path, cache=True):
        super().parse(inventory, loader, path, cache)
        self.set_options()
        try:
            with open(to_bytes(path, errors="surrogate_or_strict"), "rb") as handle:
                hosts = parse_hostfile(to_text(handle.read()), path)
        except HostfileError as exc:
            # Another enabled plugin (ini) may still parse the file after this
            # one fails, and Ansible then drops this error: the variable keeps
            # it, and train.yml's validation refuses the play with it.
            self.inventory.set_variable("all", "multinode_training_inventory_errors", [to_native(exc)])
            display.error(to_native(exc))
            raise AnsibleParserError(to_native(exc))
        except OSError as exc:
            raise AnsibleParserError("%s: cannot read: %s" % (path, to_native(exc)))
        group = self.inventory.add_group(self.get_option("group"))
        for entry in hosts:
            self.inventory.add_host(entry["host"], group=group)
            if entry["slots"] is not None:
                self.inventory.set_variable(entry["host"], "train_nproc_per_node", entry["slots"])
