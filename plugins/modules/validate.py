#!/usr/bin/python
# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# The work is done by the action plugin plugins/action/validate.py on the controller.
from __future__ import annotations

DOCUMENTATION = r"""
---
module: validate
short_description: Internal only - the roles' first step - refuse bad role variables on the controller before any node is touched
version_added: 0.1.0
description:
  - Checks every variable of the given roles of this collection against the role's
    C(meta/argument_specs.yml) without coercion (a string is never made into a list, null never
    into a string, C(maybe) is not a boolean), plus the semantic rules of
    C(plugins/module_utils/_validate/rules.py) (absolute paths, ranges, names written into files,
    one-line values, the wheel manifest on the controller).
  - With O(hosts), validates the variables of every host the pattern matches (inventory and
    extra variables over the roles' defaults) and fails when the pattern matches no host, naming
    the inventory's groups. Without it, validates the current host's variables.
  - "Every problem is one line C(<variable>=<value>: <what is wrong>; valid: <what would be>),
    prefixed with the hosts it applies to when it does not apply to all of them; all problems
    are reported at once."
  - Roles whose tags are deselected (C(--tags), C(--skip-tags)) or that are disabled are not checked.
  - Numbers given where a string is written into an environment (for example O(roles) C(train)'s
    C(train_env)) are accepted and named in a warning.
  - Internal only - each role of this collection calls it first, and its playbooks before their plays; a play of your
    own calls the roles.
author: multinode.training maintainers (@multinode)
extends_documentation_fragment:
  - multinode.training.attributes
  - multinode.training.attributes.read_only
options:
  roles:
    description:
      - Roles of this collection whose variables are checked, by name (C(train)) or name and entry
        point (C(deepspeed_build:preflight)), or as a mapping with C(name), C(tags) (the tags the
        playbook gives the role) and C(enabled) (false skips the role).
    type: list
    elements: raw
    required: true
  hosts:
    description:
      - Host pattern of the play that will run the roles; every matching host is validated.
        Omit to validate the current host only (inside a role).
    type: str
  hosts_var:
    description: Variable that sets O(hosts), named when the pattern matches no host.
    type: str
notes:
  - Runs on the controller only and never connects to a host; use C(run_once) with O(hosts).
  - Sets the fact C(multinode_training_validated) (the roles checked) when every value is valid.
"""

EXAMPLES = r"""
- name: Validate before any node is touched
  multinode.training.validate:
    hosts: "{{ train_hosts | default('train' if 'train' in groups else 'all') }}"
    hosts_var: train_hosts
    roles:
      - {name: wheel_distribute, tags: [prepare]}
      - {name: nccl_tuning, tags: [nccl], enabled: "{{ train_nccl | default(true) }}"}
      - train
  run_once: true

- name: Inside a role, check its own variables
  multinode.training.validate:
    roles: [wheel_distribute]
"""

RETURN = r"""
roles:
  description: The roles whose variables were checked.
  returned: always
  type: list
  elements: str
  sample: [wheel_distribute, nccl_tuning, train]
hosts:
  description: The hosts whose variables were checked.
  returned: always
  type: list
  elements: str
notes:
  description: Visible conversions, such as a number passed as a string into the job's environment.
  returned: always
  type: list
  elements: str
msg:
  description: The problems, one per line, or a summary when all values are valid.
  returned: always
  type: str
"""
