# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action multinode.training.validate: every variable of the roles a play will run, on the controller.

Documentation: plugins/modules/validate.py. The checks are in module_utils/_validate/engine.py (types from
each role's meta/argument_specs.yml, without coercion) and _validate/rules.py (ranges, forms,
controller files). This file only gathers the values: per host of the pattern, the inventory and
extra variables over the roles' defaults, templated the way the play will see them.
"""
from __future__ import annotations

import os

from ansible import context
from ansible.errors import AnsibleError, AnsibleUndefinedVariable
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.multinode.training.plugins.module_utils._validate import engine
from ansible_collections.multinode.training.plugins.module_utils._validate.rules import MAY_BE_EMPTY, RULES

display = Display()

COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FACT = "multinode_training_validated"
# Variables of the playbooks themselves (not of a role): which hosts train.yml and fabric_check.yml run on.
PLAYBOOK_VARIABLES = ("train_hosts",)
# Facts the roles return (their READMEs): a playbook that imports build_deepspeed then train has them set
# by the time train's first play validates.
RETURNED = ("deepspeed_build_manifest", "deepspeed_build_plan", "deepspeed_build_torch", "deepspeed_build_torch_choice",
            "nccl_tuning_detected", "nccl_tuning_fabric_comparison", "nccl_tuning_launcher_env", "nccl_tuning_system_files",
            "nccl_tuning_transport", "toolchain_gcc",
            "wheel_distribute_env", "wheel_distribute_lock", "wheel_distribute_python")


class ActionModule(ActionBase):
    """Validate role variables on the controller; never contacts a node."""

    TRANSFERS_FILES = False
    _requires_connection = False
    _VALID_ARGS = frozenset(("roles", "hosts", "hosts_var"))

    def _load_yaml(self, path, template=False):
        if not os.path.exists(path):
            return {}
        data = self._loader.load_from_file(path, trusted_as_template=template)
        return data or {}

    def _role(self, entry):
        if isinstance(entry, str):
            entry = {"name": entry}
        name, _sep, entry_point = entry["name"].partition(":")
        name = name.split(".")[-1]
        path = os.path.join(COLLECTION_ROOT, "roles", name)
        if not os.path.isdir(path):
            raise AnsibleError("multinode.training.validate: no role %s in %s" % (name, COLLECTION_ROOT))
        specs = self._load_yaml(os.path.join(path, "meta", "argument_specs.yml"))
        options = ((specs.get("argument_specs") or {}).get(entry_point or "main") or {}).get("options") or {}
        tags = set(entry.get("tags") or [])
        for task in self._load_yaml(os.path.join(path, "tasks", "main.yml")) or []:
            task_tags = task.get("tags") if isinstance(task, dict) else None
            tags.update([task_tags] if isinstance(task_tags, str) else task_tags or [])
        return {
            "name": name,
            "path": path,
            "options": options,
            "defaults": self._load_yaml(os.path.join(path, "defaults", "main.yml"), template=True),
            "tags": tags,
            "enabled": entry.get("enabled", True),
        }

    def _declared(self):
        """Every variable of every role of the collection (all entry points) -> (names, prefixes)."""
        names, prefixes = set(), []
        roles_dir = os.path.join(COLLECTION_ROOT, "roles")
        for name in sorted(os.listdir(roles_dir)):
            specs = self._load_yaml(os.path.join(roles_dir, name, "meta", "argument_specs.yml"))
            if not specs:
                continue
            prefixes.append(name + "_")
            for entry in (specs.get("argument_specs") or {}).values():
                names.update((entry or {}).get("options") or {})
        return names, prefixes

    def _values(self, roles, raw, pattern_mode):
        """Templated values of every option of ``roles`` for one host (raw: that host's variables)."""
        variables = {}
        for role in roles:
            variables.update(role["defaults"])
        variables.update(raw)
        values, problems, deferred = {}, [], set()
        for role in roles:
            scoped = dict(variables)
            scoped["role_path"] = role["path"]
            scoped.setdefault("role_name", "multinode.training." + role["name"])
            templar = self._templar.copy_with_new_env(available_variables=scoped)
            for name in role["options"]:
                if name not in variables:
                    continue
                try:
                    values[name] = engine.plain(templar.template(variables[name]))
                except Exception as exc:  # any templating error is a message about that variable
                    if pattern_mode and isinstance(exc, AnsibleUndefinedVariable):
                        # e.g. a value built from facts, which the first play has not gathered:
                        # the role's own preflight checks it (the role is left out of the fact)
                        deferred.add(role["name"])
                        continue
                    reason = str(getattr(exc, "message", None) or exc).strip().splitlines()[0][:200]
                    problems.append(engine.Problem(
                        name, variables[name], "cannot be templated (%s)" % reason,
                        "a value whose templates resolve on the controller"))
        return values, problems, deferred

    def _selected_roles(self, entries):
        """The roles this play will run: enabled, and selected by --tags / --skip-tags.

        `--tags validate` (the tag of this task) checks every role without running any."""
        only_tags = context.CLIARGS.get("tags") or ()
        skip_tags = context.CLIARGS.get("skip_tags") or ()
        own_tags = set(self._task.tags or []) - {"always"}
        roles = []
        for entry in entries:
            role = self._role(entry)
            role["tags"].update(own_tags)
            enabled = role["enabled"]
            if not engine.is_bool(enabled) or engine.as_bool(enabled):
                if engine.tags_selected(role["tags"], only_tags, skip_tags):
                    roles.append(role)
        return roles

    def _hosts(self, args, task_vars):
        """The hosts to check and their variables -> (hosts, {host: variables}, problem or None).

        With ``hosts`` (a pattern) its hosts' inventory variables; a pattern matching nothing is
        the problem. Without, this task's host and its task variables."""
        pattern = args.get("hosts")
        if pattern is None:
            host = task_vars.get("inventory_hostname", "localhost")
            return [host], {host: task_vars}, None
        hostvars = task_vars.get("hostvars")
        hosts = [h.name for h in hostvars._inventory.get_hosts(pattern)]
        if hosts:
            return hosts, dict((h, hostvars.raw_get(h)) for h in hosts), None
        groups = sorted(task_vars.get("groups", {}))
        variable = args.get("hosts_var") or "hosts"
        shown = pattern if args.get("hosts_var") else "the host pattern %s" % pattern
        return [], {}, engine.Problem(variable, shown, "matches no host of the inventory%s" % (
            " (with --limit)" if context.CLIARGS.get("subset") else ""),
            "a host pattern matching hosts; the inventory's groups: %s" % ", ".join(groups))

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        args = self._task.args
        entries = args.get("roles") or []
        if not isinstance(entries, list) or not entries:
            return dict(result, failed=True, msg="multinode.training.validate: roles must be a non-empty list")
        roles = self._selected_roles(entries)
        specs = {}
        for role in roles:
            specs.update(role["options"])
        hosts, raws, problem = self._hosts(args, task_vars)
        if problem:
            return dict(result, failed=True, msg=problem.line(), hosts=[])
        pattern_mode = args.get("hosts") is not None
        declared, prefixes = self._declared()
        declared.update(PLAYBOOK_VARIABLES + RETURNED)
        per_host, notes, deferred = {}, [], set()
        for host in hosts:
            values, problems, later = self._values(roles, raws[host], pattern_mode)
            deferred.update(later)
            if pattern_mode:
                # The first play sees the inventory and extra variables before any task set one:
                # every name there with a role's prefix must be a declared variable.
                problems.extend(engine.unknown_variables(raws[host], declared, prefixes))
            ctx = {"hosts": hosts if pattern_mode else list(task_vars.get("ansible_play_hosts_all") or hosts),
                   "host": host, "notes": [], "ssh_ports": [raws[host].get("ansible_port", 22)]}
            problems.extend(engine.validate(specs, values, RULES, ctx, MAY_BE_EMPTY))
            per_host[host] = problems
            notes.extend(n for n in ctx["notes"] if n not in notes)
        merged = engine.merge_hosts(per_host, hosts)
        for note in notes:
            display.warning(note)

        names = [r["name"] for r in roles]
        result.update(changed=False, roles=names, hosts=hosts, notes=notes)
        if merged:
            result.update(failed=True, msg="\n".join(p.line() for p in merged))
        else:
            result.update(msg="valid: %s on %d host(s)" % (", ".join(names) or "nothing to check", len(hosts)),
                          ansible_facts={FACT: [n for n in names if n not in deferred]})
        return result
