#!/usr/bin/python
# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: train_probe
short_description: Everything a training job's preflight compares, from one node in one round trip
version_added: 0.1.0
description:
  - Reads, without changing anything, what role multinode.training.train compares across the nodes
    before it starts a job - whether O(python) exists and is executable, what it holds (python,
    torch and DeepSpeed versions, DeepSpeed's prebuilt ops and every installed package, read from
    package metadata by O(python) itself, no torch import), the sha256 of O(script), whether O(chdir)
    is a directory, whether each of O(env_files) exists, whether the node's copy of the training code
    is the controller's (O(code)) and whether this node reaches the rendezvous address over TCP
    (O(connect_host)).
  - Never fails for what it finds; filter P(multinode.training.train_preflight_problems#filter) compares
    the nodes' results and names every problem.
author:
  - multinode.training maintainers (@multinode)
options:
  python:
    description: The job's python (train_python).
    type: path
    required: true
  script:
    description: The training script (train_script); unset - a module job, nothing to checksum.
    type: path
  chdir:
    description: The job's working directory (train_chdir); unset - none to check.
    type: path
  env_files:
    description: Files the job reads its environment from - dicts with C(var) (the variable, for messages) and C(path).
    type: list
    elements: dict
    default: []
  code:
    description:
      - The controller's train_code_src to compare this node's copy with - C(dest) (train_code_dir),
        C(manifest) (filter P(multinode.training.code_manifest#filter)), C(owner) and C(group) (empty - not
        compared). RV(code) says whether a copy is needed.
    type: dict
  connect_host:
    description: The rendezvous address to reach over TCP from this node; unset - no connect.
    type: str
  connect_port:
    description: Its port (train_rdzv_port).
    type: int
  connect_timeout:
    description: Seconds to keep trying (every second).
    type: int
    default: 15
extends_documentation_fragment:
  - multinode.training.attributes.read_only
"""

EXAMPLES = r"""
- name: Probe every node
  multinode.training.train_probe:
    python: /opt/multinode-training/venv/bin/python
    script: /opt/multinode-training/code/smoke_train.py
    env_files:
      - {var: train_nccl_env_file, path: /etc/multinode-training/nccl.env}
  register: probe
"""

RETURN = r"""
python:
  description: O(python) and whether it is an executable file.
  returned: always
  type: dict
  sample: {"path": "/opt/multinode-training/venv/bin/python", "executable": true}
environment:
  description: What O(python) holds; null when it cannot run or its probe failed (see RV(probe_error)).
  returned: always
  type: dict
  sample: {"python": "3.11.2", "torch": "2.13.0+cpu", "deepspeed": "0.19.8", "ops": ["cpu_adam_op"],
           "packages": ["torch==2.13.0+cpu"]}
probe_error:
  description: Why RV(environment) is null when O(python) is executable.
  returned: always
  type: str
script:
  description: O(script), whether it exists and its sha256; null without O(script).
  returned: always
  type: dict
chdir:
  description: O(chdir) and whether it is a directory; null without O(chdir).
  returned: always
  type: dict
env_files:
  description: Each of O(env_files) with C(exists).
  returned: always
  type: list
  elements: dict
code:
  description:
    - C(same) (the node's copy under C(dest) has every file of the manifest with its content, mode and owner),
      C(differ) (up to 20 paths that differ); null without O(code).
  returned: always
  type: dict
connect:
  description: Whether the TCP connect to O(connect_host):O(connect_port) succeeded (C(ok), C(error), C(seconds)); null without O(connect_host).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.multinode.training.plugins.module_utils._train.preflight import PROBE_REQUIRED_BY, PROBE_SPEC, run_probe_module


def main():
    run_probe_module(AnsibleModule(argument_spec=PROBE_SPEC, required_by=PROBE_REQUIRED_BY, supports_check_mode=True))


if __name__ == "__main__":
    main()
