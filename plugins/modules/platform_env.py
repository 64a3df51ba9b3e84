#!/usr/bin/python
# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Map a container platform's variables (MASTER_ADDR, MASTER_PORT, WORLD_SIZE/NNODES) to torchrun's options."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: platform_env
short_description: Read the job variables a container platform hands each container and map them to torchrun's options
version_added: 0.2.0
description:
  - For O(platform) V(sensecore) (C(MASTER_ADDR), C(MASTER_PORT), C(WORLD_SIZE) node count, C(RANK) node rank),
    V(aistation) (C(MASTER_ADDR), C(MASTER_PORT), C(NNODES) or C(MIN_NNODES)/C(MAX_NNODES), optional
    C(NPROC_PER_NODE) and C(RDZV_ID)) and V(generic) (like AIStation, with C(NODE_RANK)); V(auto) picks
    V(aistation) when C(NNODES) or C(MIN_NNODES)/C(MAX_NNODES) is set, V(sensecore) when C(WORLD_SIZE) is.
  - Returns the node count, the rendezvous endpoint, a rendezvous id that is the same in every container of one
    job (C(RDZV_ID) when set, else a hash of endpoint and node count) and whether this container hosts the
    rendezvous store (node rank 0 when the platform gives a node rank, else whether C(MASTER_ADDR) is one of its
    addresses).
  - Fails naming the missing or invalid variable and listing the platform variables the container has.
author:
  - multinode.training maintainers (@multinode)
extends_documentation_fragment:
  - multinode.training.attributes.read_only
options:
  platform:
    description: V(auto), V(sensecore), V(aistation) or V(generic).
    type: str
    choices: [auto, sensecore, aistation, generic]
    default: auto
  nnodes:
    description: Node count V(N) or V(MIN:MAX) that overrides the platform's.
    type: str
    default: ''
  rdzv_id:
    description: Rendezvous id that overrides C(RDZV_ID) and the derived one.
    type: str
    default: ''
"""

EXAMPLES = r"""
- name: What the platform gave this container
  multinode.training.platform_env:
    platform: auto
  register: launch
"""

RETURN = r"""
platform:
  description: The platform whose mapping was used.
  returned: success
  type: str
  sample: sensecore
nnodes:
  description: C(N) or C(MIN:MAX).
  returned: success
  type: str
  sample: "2"
rdzv_endpoint:
  description: C(MASTER_ADDR:MASTER_PORT) (IPv6 bracketed).
  returned: success
  type: str
  sample: 10.0.0.11:29500
rdzv_id:
  description: Rendezvous id, the same in every container of the job.
  returned: success
  type: str
  sample: env-3f2a9c0d1e4b
job_id:
  description: Job directory name on this container - the rendezvous id plus this container's start time of the job.
  returned: success
  type: str
nproc_per_node:
  description: C(NPROC_PER_NODE) when set, else null.
  returned: success
  type: str
is_host:
  description:
    - Whether this container hosts the rendezvous store - node rank 0 where the platform gives a rank, else whether
      C(MASTER_ADDR) is one of this container's addresses.
  returned: success
  type: bool
variables:
  description: The platform variables found.
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.multinode.training.plugins.module_utils._launch.platform_env import ARGUMENT_SPEC, run_module


def main():
    run_module(AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True))


if __name__ == "__main__":
    main()
