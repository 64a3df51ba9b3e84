# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""DeepSpeed / MPI hostfiles: `host slots=N`, comments, blank lines (inventory plugin hostfile).

DeepSpeed's launcher reads `<host> slots=<n>` per line; OpenMPI also accepts `max_slots=<n>` and a
host without slots (one slot). Pure parsing: every bad line is reported with file and line number.
"""
from __future__ import annotations

import re

_HOST_RE = re.compile(r"^[A-Za-z0-9_]([A-Za-z0-9_.:-]*[A-Za-z0-9_])?$|^\[[0-9A-Fa-f:.]+\]$")
_KEYS = ("slots", "max_slots")


class HostfileError(Exception):
    """Bad hostfile; the message names file and line of every problem."""


def parse_hostfile(text, source):
    """Hostfile text -> [{host, slots (int or None), max_slots (int or None), line}] in file order."""
    hosts, problems, seen = [], [], {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = "%s line %d" % (source, lineno)
        fields = line.split()
        host = fields[0]
        if "=" in host or not _HOST_RE.match(host):
            problems.append("%s: %r: %r is not a host name; valid: '<host> slots=<n>'" % (where, raw.strip(), host))
            continue
        entry = {"host": host, "slots": None, "max_slots": None, "line": lineno}
        bad = False
        for field in fields[1:]:
            key, sep, value = field.partition("=")
            if not sep or key not in _KEYS:
                problems.append("%s: %r: unknown field %r; valid: slots=<n>, max_slots=<n>"
                                % (where, raw.strip(), field))
                bad = True
                continue
            if entry[key] is not None:
                problems.append("%s: %r: %s given twice" % (where, raw.strip(), key))
                bad = True
                continue
            if not re.match(r"^[0-9]+$", value) or int(value) < 1:
                problems.append("%s: %r: %s=%s; valid: a positive integer" % (where, raw.strip(), key, value))
                bad = True
                continue
            entry[key] = int(value)
        if not bad and entry["slots"] and entry["max_slots"] and entry["max_slots"] < entry["slots"]:
            problems.append("%s: %r: max_slots=%s < slots=%s" % (where, raw.strip(), entry["max_slots"],
                                                                 entry["slots"]))
            bad = True
        if host in seen:
            problems.append("%s: %r: duplicate host %s (first at line %d); valid: each host once"
                            % (where, raw.strip(), host, seen[host]))
            continue
        seen[host] = lineno
        if not bad:
            hosts.append(entry)
    if problems:
        raise HostfileError("; ".join(problems))
    if not hosts:
        raise HostfileError("%s: no hosts; valid: one '<host> slots=<n>' per line" % source)
    return hosts
