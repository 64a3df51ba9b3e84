# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node's name in the messages of the fabric modules (nccl_fabric, nccl_log_check)."""
from __future__ import annotations


class ModuleDocFragment:
    # Both read it as params["node_name"] or socket.gethostname().
    DOCUMENTATION = r"""
options:
  node_name:
    description: Name of the node in messages (the inventory hostname); defaults to the node's hostname.
    type: str
"""
