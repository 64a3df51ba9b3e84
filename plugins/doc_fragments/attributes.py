# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Shared attribute documentation for this collection's modules."""
from __future__ import annotations


class ModuleDocFragment:
    # What each attribute means, for every module: a module's own attributes say only its support and details
    # (Ansible merges them with these; tests/unit/packaging/test_budgets.py holds modules to it).
    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: Can run in check mode and return changed status prediction without modifying target.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check mode), when in diff mode.
  idempotent:
    description: When run twice in a row outside check mode, with the same arguments, the second invocation indicates no change.
"""

    # A module with an action plugin (with DOCUMENTATION).
    ACTION = r"""
options: {}
attributes:
  action:
    description: Indicates this has a corresponding action plugin so some parts of the options can be executed on the controller.
"""

    # A module that says on which systems it runs (with DOCUMENTATION).
    PLATFORM = r"""
options: {}
attributes:
  platform:
    description: Target OS/families that can be operated against.
"""

    # The probing and planning modules: they read the node and report, never change it (with DOCUMENTATION).
    READ_ONLY = r"""
options: {}
attributes:
  check_mode:
    support: full
    details: Read-only; runs the same in check mode.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: Never reports a change.
"""
