# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Check role variables against their argument specs, without coercion, and say what is wrong.

Pure logic for the ``multinode.training.validate`` action plugin (which gathers the values)
and for the unit tests. Every problem has one shape::

    <variable>=<value shown safely>: <what is wrong>; valid: <what would be>

``show`` renders a value on one line (JSON: strings quoted, newline and NUL escaped, long
values cut, secrets masked) so that a message never holds a traceback, a repr of bytes or
an Ansible internal type.

Types follow ``meta/argument_specs.yml`` with no coercion, except the spellings that the
command line forces (``-e key=value`` gives strings): ``int`` takes an int or a string of
digits, ``bool`` takes a bool or one of Ansible's boolean words, ``str`` takes a string or
an int. A list is never made from a string, a mapping never from a list, and null is never
a string. ``path`` is a string holding an absolute path (empty only when the default is
empty, which means "unset"). No string anywhere in a value may hold a newline or NUL: every
value ends up in a file, an environment or an argv on a node.
"""
from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping

# The job's own rules: environment names, and which keys hold secrets (masked everywhere).
from ansible_collections.multinode.training.plugins.module_utils._node.torchrun import (
    ENV_NAME_RE,
    MASK,
    SECRET_KEY_RE,
)

BOOLEAN_WORDS = ("yes", "no", "true", "false", "on", "off", "y", "n", "1", "0", "t", "f")
INT_RE = re.compile(r"^[+-]?[0-9]+$")
FLOAT_RE = re.compile(r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$")
SHOW_MAX = 120

VALID_BY_TYPE = {
    "str": "a string",
    "path": "an absolute path",
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "list": "a list",
    "dict": "a mapping",
    "scalar": "a string or a number",
}


class Problem(object):
    """One wrong value: which variable (with the item or key), the value, what is wrong, what is valid."""

    __slots__ = ("variable", "value", "what", "valid", "hosts")

    def __init__(self, variable, value, what, valid, hosts=None):
        self.variable = variable
        self.value = value
        self.what = what
        self.valid = valid
        self.hosts = list(hosts or [])

    def line(self, secret=False):
        return format_problem(self.variable, self.value, self.what, self.valid, self.hosts, secret=secret)

    def as_dict(self):
        return {"variable": self.variable, "value": show(self.value), "what": self.what,
                "valid": self.valid, "hosts": list(self.hosts)}

    def key(self):
        return (self.variable, show(self.value), self.what, self.valid)

    def __repr__(self):
        return "Problem(%s)" % self.line()


# ---------------------------------------------------------------- showing values

def plain(value, _depth=0):
    """Ansible's tagged/lazy containers and scalars -> plain Python (dict, list, str, int, float, bool, None)."""
    if _depth > 20:
        return "..."
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    if isinstance(value, str):
        return str(value)
    if isinstance(value, Mapping):
        return dict((str(plain(k, _depth + 1)), plain(v, _depth + 1)) for k, v in value.items())
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain(v, _depth + 1) for v in value]
    return "<%s>" % type_name(value)


def type_name(value):
    """What a person calls the type of a value: 'a string', 'null', 'a list', ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, (str, bytes)):
        return "a string"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, (list, tuple, set, frozenset)):
        return "a list"
    name = type(value).__name__.lower()
    if "undefined" in name or "marker" in name:
        return "undefined"
    return "a value of another kind"


def show(value, secret=False, limit=SHOW_MAX):
    """One line, JSON, at most ``limit`` characters; ``secret`` masks strings."""
    data = plain(value)
    if secret and data not in (None, ""):
        data = _mask_all(data)
    text = json.dumps(data, ensure_ascii=False, sort_keys=False, separators=(", ", ": "))
    # json escapes \n, \r, \t and NUL; other control characters stay visible as escapes too
    text = "".join(c if c.isprintable() else "\\u%04x" % ord(c) for c in text)
    if len(text) > limit:
        text = text[:limit - 3] + "..."
    return text


def _mask_all(data):
    if isinstance(data, dict):
        return dict((k, _mask_all(v)) for k, v in data.items())
    if isinstance(data, list):
        return [_mask_all(v) for v in data]
    return MASK


def is_secret_name(name):
    return bool(SECRET_KEY_RE.search(str(name)))


def format_problem(variable, value, what, valid, hosts=None, secret=False):
    """``[host, host: ]variable=value: what; valid: valid``; values of secret-looking keys are masked."""
    secret = secret or is_secret_name(variable.rsplit("[", 1)[-1]) if "[" in variable else secret
    text = "%s=%s: %s; valid: %s" % (variable, show(value, secret=secret), what, valid)
    if hosts:
        text = "%s: %s" % (", ".join(hosts), text)
    return text


# ---------------------------------------------------------------- types, without coercion

def is_bool(value):
    if isinstance(value, bool):
        return True
    if isinstance(value, int) and value in (0, 1):
        return True
    return isinstance(value, str) and value.strip().lower() in BOOLEAN_WORDS


def as_bool(value):
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("yes", "true", "on", "y", "1", "t")


def is_int(value):
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, str) and bool(INT_RE.match(value.strip())))


def is_float(value):
    if isinstance(value, bool):
        return False
    return isinstance(value, (int, float)) or (isinstance(value, str) and bool(FLOAT_RE.match(value.strip())))


def check_type(variable, value, kind, default=None):
    """Problems for ``value`` as argument-spec type ``kind`` (str, path, int, float, bool, list, dict, raw, scalar)."""
    valid = VALID_BY_TYPE.get(kind)
    if kind in (None, "raw"):
        return []
    if kind == "str":
        if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
            return []
        hint = " (quote it: YAML reads 0.20 as the number 0.2)" if isinstance(value, float) else ""
        return [Problem(variable, value, "%s, not a string%s" % (type_name(value), hint), valid)]
    if kind == "path":
        if not isinstance(value, str):
            return [Problem(variable, value, "%s, not a path" % type_name(value), valid)]
        if value == "" and default == "":
            return []
        if not value.startswith("/"):
            what = "empty" if value == "" else "a relative path (it would resolve against the directory of the play)"
            return [Problem(variable, value, what, valid + (" (or empty: unset)" if default == "" else ""))]
        return []
    if kind == "int":
        if is_int(value):
            return []
        return [Problem(variable, value, "%s, not an integer" % type_name(value), valid)]
    if kind == "float":
        if is_float(value):
            return []
        return [Problem(variable, value, "%s, not a number" % type_name(value), valid)]
    if kind == "bool":
        if is_bool(value):
            return []
        what = "not a boolean" if isinstance(value, str) else "%s, not a boolean" % type_name(value)
        return [Problem(variable, value, what, valid)]
    if kind == "list":
        if isinstance(value, (list, tuple)):
            return []
        hint = ""
        if isinstance(value, str):
            hint = " (a string is not made into a list: write [%s])" % (value if len(value) < 40 else "...")
        return [Problem(variable, value, "%s, not a list%s" % (type_name(value), hint), valid)]
    if kind == "dict":
        if isinstance(value, Mapping):
            return []
        return [Problem(variable, value, "%s, not a mapping" % type_name(value), valid)]
    if kind == "scalar":
        if isinstance(value, str) or (isinstance(value, (int, float)) and not isinstance(value, bool)):
            return []
        return [Problem(variable, value, "%s, not a string or a number" % type_name(value), valid)]
    return [Problem(variable, value, "unknown type %r in the argument spec" % kind, "a spec type")]


def one_line(variable, value):
    """Every string inside ``value`` (keys too) must be free of newline, carriage return and NUL."""
    problems = []
    for where, text in _strings(variable, value):
        bad = [name for char, name in (("\n", "a newline"), ("\r", "a carriage return"), ("\x00", "a NUL byte"))
               if char in text]
        if bad:
            problems.append(Problem(where, text, "holds %s (it would end up in a file, environment or command "
                                                 "line on the nodes)" % " and ".join(bad),
                                    "a single line without NUL"))
    return problems


def _strings(variable, value, _depth=0):
    if _depth > 20:
        return
    if isinstance(value, (str, bytes)):
        yield variable, plain(value)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            where = item_name(variable, key)
            if isinstance(key, (str, bytes)):
                yield where, plain(key)
            yield from _strings(where, item, _depth + 1)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _strings("%s[%d]" % (variable, index), item, _depth + 1)


def item_name(variable, key):
    """``train_env["OMP_NUM_THREADS"]`` / ``train_args[2]``."""
    if isinstance(key, int) and not isinstance(key, bool):
        return "%s[%d]" % (variable, key)
    return "%s[%s]" % (variable, json.dumps(plain(key), ensure_ascii=False))


# ---------------------------------------------------------------- the argument spec of one option

def check_option_typed(variable, value, spec):
    """Problems of one variable against its argument-spec entry (type, elements, choices), no coercion, and
    ``type_ok``: whether the value has the spec's type (rules may run)."""
    spec = spec or {}
    kind = spec.get("type", "str")
    default = spec.get("default")
    problems = check_type(variable, value, kind, default)
    if problems:
        return problems, False
    elements = spec.get("elements")
    if kind == "list" and elements:
        for index, item in enumerate(value):
            problems.extend(check_type("%s[%d]" % (variable, index), item, elements,
                                       default="" if elements == "path" else None))
            if elements == "path" and isinstance(item, str) and item == "":
                problems.append(Problem("%s[%d]" % (variable, index), item, "empty", "an absolute path"))
    type_ok = not problems
    choices = spec.get("choices")
    if choices and not problems:
        problems.extend(check_choices(variable, value, kind, choices))
    problems.extend(one_line(variable, value))
    return problems, type_ok


def check_choices(variable, value, kind, choices):
    if kind == "list":
        return [p for i, item in enumerate(value)
                for p in check_choices("%s[%d]" % (variable, i), item, "str", choices)]
    if kind == "int" and is_int(value):
        ok = int(value) in [int(c) for c in choices if is_int(c)]
    elif kind == "bool":
        ok = as_bool(value) in [as_bool(c) for c in choices]
    else:
        ok = str(value) in [str(c) for c in choices]
    if ok:
        return []
    return [Problem(variable, value, "not one of the choices", one_of(choices))]


def one_of(choices):
    shown = [json.dumps(plain(c)) if c == "" else str(c) for c in choices]
    return ", ".join(shown) if len(shown) < 3 else "one of " + ", ".join(shown)


# ---------------------------------------------------------------- semantic rules

def check_range(variable, value, low=None, high=None, number=int):
    """An int (or float) between ``low`` and ``high`` (inclusive; None = unbounded)."""
    try:
        n = number(value)
    except (TypeError, ValueError):
        return []  # the type check reports it
    if (low is not None and n < low) or (high is not None and n > high):
        if high is None:
            valid = "%s or more" % low
        elif low is None:
            valid = "%s or less" % high
        else:
            valid = "%s-%s" % (low, high)
        return [Problem(variable, value, "out of range", valid)]
    return []


def check_pattern(variable, value, pattern, valid, what="not in the expected form"):
    if not re.match(pattern, str(value)):
        return [Problem(variable, value, what, valid)]
    return []


def check_env_mapping(variable, value, key_re=ENV_NAME_RE, key_valid="names of letters, digits and _ "
                      "that do not start with a digit", allow_null=False, numbers="allow"):
    """A mapping written as KEY=VALUE: keys are names, values strings (numbers converted), never lists or maps.

    Returns (problems, notes): notes say which numbers become strings, so the conversion is visible.
    """
    problems, notes = [], []
    if not isinstance(value, Mapping):
        return problems, notes  # the type check reports it
    for key, item in value.items():
        where = item_name(variable, key)
        if not isinstance(key, str) or not re.match(key_re, key):
            problems.append(Problem(where, item, "the key %s is not a valid name" % show(key), key_valid))
            continue
        if item is None:
            if not allow_null:
                problems.append(Problem(where, item, "null", "a string or a number"))
            continue
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            null = ", null or \"\" to remove it" if allow_null else ""
            problems.append(Problem(where, item, "%s, not a string" % type_name(item),
                                    "a string or a number%s (quote true/false)" % null))
            continue
        if not isinstance(item, str):
            notes.append("%s=%s is a number: passed as the string %s" % (where, show(item), show(str(item))))
    return problems, notes


# ---------------------------------------------------------------- one host's variables

MISSING = object()


def validate(specs, values, rules=None, ctx=None, may_be_empty=()):
    """Problems of every variable of ``specs`` ({name: argument-spec entry}) in ``values``.

    ``values`` maps names to templated values (a missing required one is reported); ``rules``
    maps names to extra checks, run only when the type is right. ``ctx["notes"]`` collects
    visible conversions (numbers passed as strings).
    """
    ctx = ctx if ctx is not None else {}
    ctx.setdefault("notes", [])
    problems = []
    for name in sorted(specs):
        spec = dict(specs[name] or {})
        value = values.get(name, MISSING)
        if value is MISSING:
            if spec.get("required"):
                problems.append(Problem(name, None, "not set", "required: %s" % VALID_BY_TYPE.get(
                    spec.get("type", "str"), "a value")))
            continue
        if name in may_be_empty and value == "":
            continue
        found, type_ok = check_option_typed(name, value, spec)
        if type_ok:
            for rule in (rules or {}).get(name, ()):
                # one problem per variable or item: a rule adds only what is not reported yet
                found.extend(p for p in rule(name, value, values, ctx)
                             if p.variable not in [f.variable for f in found])
        problems.extend(found)
    return problems


def unknown_variables(values, declared, prefixes):
    """Variables of ``values`` named with a role's prefix (``train_``, ...) that no role declares
    -> [Problem], each naming the closest declared variable.

    A misspelled variable would otherwise be ignored silently and its default used: a job run
    for hours with ``train_timout=60`` meant as a limit. ``declared``: every option of every role
    (all entry points) and the playbooks' own variables; ``prefixes``: the role names with ``_``.
    """
    declared = sorted(set(declared))
    problems = []
    for name in sorted(values):
        if name in declared or not any(name.startswith(prefix) for prefix in prefixes):
            continue
        prefix = max((p for p in prefixes if name.startswith(p)), key=len)
        role = prefix[:-1]
        # compared without the prefix, which every candidate shares
        same_role = dict((d[len(prefix):], d) for d in declared if d.startswith(prefix))
        close = [same_role[s] for s in difflib.get_close_matches(name[len(prefix):], same_role, n=3, cutoff=0.6)]
        valid = ", ".join(close) if close else (
            "a variable of role %s (roles/%s/meta/argument_specs.yml, listed in roles/%s/README.md)"
            % (role, role, role))
        value = _mask_all(plain(values[name])) if is_secret_name(name) else values[name]
        problems.append(Problem(name, value, "not a variable of this collection", valid))
    return problems


def merge_hosts(per_host, all_hosts):
    """{host: [Problem]} -> [Problem] with the hosts each applies to (none named when it applies to all)."""
    merged, order = {}, []
    for host in all_hosts:
        for problem in per_host.get(host, []):
            key = problem.key()
            if key not in merged:
                merged[key] = Problem(problem.variable, problem.value, problem.what, problem.valid)
                order.append(key)
            merged[key].hosts.append(host)
    result = []
    for key in order:
        problem = merged[key]
        if len(problem.hosts) == len(all_hosts):
            problem.hosts = []
        result.append(problem)
    return result


def tags_selected(tags, only_tags, skip_tags):
    """Ansible's tag selection (playbook.taggable.Taggable.evaluate_tags) for a set of task tags."""
    tags = set(tags)
    only_tags = set(only_tags or ()) or {"all"}
    skip_tags = set(skip_tags or ())
    run = ("always" in tags or ("all" in only_tags and "never" not in tags) or bool(tags & only_tags)
           or ("tagged" in only_tags and bool(tags) and "never" not in tags))
    if run and skip_tags:
        if "all" in skip_tags:
            run = "always" in tags and "always" not in skip_tags
        elif tags & skip_tags:
            run = False
        elif "tagged" in skip_tags and tags:
            run = False
    return run
