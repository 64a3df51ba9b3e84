# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters: which account runs the training job on a node (see train_run_user.yml), its one uid on every
node (train_account_uid.yml), and the steps of a run that need root (train_root_needed.yml)."""
from __future__ import annotations

from ansible_collections.multinode.training.plugins.module_utils._train.account import decide_uid
from ansible_collections.multinode.training.plugins.module_utils._train.privilege import root_needed
from ansible_collections.multinode.training.plugins.module_utils._train.security import (
    DEFAULT_ACCOUNT,
    SecurityError,
    decide_user,
)


def train_run_user(requested, effective_user, effective_uid, allow_root=False, default_account=DEFAULT_ACCOUNT):
    """train_user + the play's user -> {user, create, drop, error}; error is "" or the refusal."""
    try:
        decision = decide_user(requested, effective_user, effective_uid, allow_root, default_account)
    except SecurityError as exc:
        return {"user": "", "create": False, "drop": False, "error": str(exc)}
    decision["error"] = ""
    return decision


def train_account_uid(accounts, create=False):
    """{node: multinode_training_account fact} -> {uid, error} (_train.account.decide_uid)."""
    return decide_uid(accounts, bool(create))


def train_root_needed(nodes, writes, run_tags=None, skip_tags=None):
    """{node: facts} + the run's writes -> the refusal, "" when none (_train.privilege.root_needed)."""
    return root_needed(nodes, writes, run_tags, skip_tags)


class FilterModule:
    """multinode.training job-user filter."""

    def filters(self):
        return {"train_run_user": train_run_user, "train_account_uid": train_account_uid,
                "train_root_needed": train_root_needed}
