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

import os
import socket
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.multinode.training.plugins.module_utils._launch.platform_env import (
    RELEVANT,
    PlatformError,
    map_environment,
)


def owns_address(host):
    """Whether MASTER_ADDR is an address of this container: binding to it only works where it is local."""
    try:
        infos = socket.getaddrinfo(host, None, 0, socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return False
    for family, _type, _proto, _name, sockaddr in infos:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.bind((sockaddr[0], 0))
            return True
        except OSError:
            continue
        finally:
            sock.close()
    return False


def main():
    module = AnsibleModule(
        argument_spec=dict(
            platform=dict(type="str", default="auto", choices=["auto", "sensecore", "aistation", "generic"]),
            nnodes=dict(type="str", default=""),
            rdzv_id=dict(type="str", default=""),
        ),
        supports_check_mode=True,
    )
    p = module.params
    environ = dict(os.environ)
    try:
        mapped = map_environment(environ, p["platform"], p["nnodes"] or None, p["rdzv_id"] or None)
    except PlatformError as exc:
        module.fail_json(msg=str(exc), variables=dict(
            (name, environ[name]) for name in RELEVANT if environ.get(name)))
    if mapped["is_host"] is None:
        # No node rank from the platform: the container that owns MASTER_ADDR hosts the store.
        mapped["is_host"] = owns_address(environ["MASTER_ADDR"])
    # The log directory of this container's share of the job: a job id is never reused on a node.
    mapped["job_id"] = "%s-%s" % (mapped["rdzv_id"], time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
    module.exit_json(changed=False, **mapped)


if __name__ == "__main__":
    main()
