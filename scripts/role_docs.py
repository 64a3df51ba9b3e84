"""Role READMEs' entry points and variables, generated from each role's meta/argument_specs.yml.

    python scripts/role_docs.py            # rewrite the generated part of roles/*/README.md
    python scripts/role_docs.py --check    # exit 1 naming the role and variable when a README is out of date

The generated part lies between BEGIN and END below; the prose around it is the README's own.
A role whose README lacks the markers is refused by --check (and left alone by a rewrite).
"""
import argparse
import json
import pathlib
import re
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
BEGIN = "<!-- BEGIN role_docs: generated from meta/argument_specs.yml by scripts/role_docs.py; do not edit -->"
END = "<!-- END role_docs -->"
_MARKUP = re.compile(r"\b([CIBMUVO])\(([^()]*)\)")


def text(value):
    """One table cell from an argument_specs description: C(x) -> `x`, I(x) -> *x*, one line, `|` escaped."""
    if isinstance(value, list):
        value = " ".join(str(item) for item in value)

    def markup(match):
        kind, inner = match.groups()
        return "*%s*" % inner if kind == "I" else "`%s`" % inner
    return _MARKUP.sub(markup, " ".join(str(value or "").split())).replace("|", "\\|")


def kind(option):
    """The option's type as a reader writes it: `list of str`, `int`, ..."""
    name = option.get("type", "str")
    if name == "list" and option.get("elements"):
        return "list of %s" % option["elements"]
    return name


def default(option):
    """The default in backticks, JSON-spelled (a YAML reader's value); empty when there is none."""
    if "default" not in option:
        return "required" if option.get("required") else ""
    value = option["default"]
    shown = value if isinstance(value, str) else json.dumps(value)
    if isinstance(value, str) and (value == "" or value != value.strip()):
        shown = json.dumps(value)
    return "`%s`" % shown.replace("|", "\\|").replace("`", "'")


def row(name, option, entries=None):
    """One variable's table row; `entries` adds the entry points column (roles with more than one)."""
    meaning = text(option.get("description"))
    if option.get("choices"):
        meaning += " One of %s." % ", ".join("`%s`" % c for c in option["choices"])
    cells = ["`%s`" % name, kind(option), default(option)]
    if entries is not None:
        cells.append(", ".join("`%s`" % e for e in entries))
    cells.append(meaning.strip())
    return "| " + " | ".join(cells) + " |"


def render(role, specs):
    """The generated block (markers included) for a role's argument_specs mapping."""
    names = list(specs)
    lines = [BEGIN, "", "| entry point | what it does |", "|---|---|"]
    lines += ["| `%s` | %s |" % (entry, text(specs[entry].get("short_description"))) for entry in names]
    options = {}
    for entry in names:
        for var, option in (specs[entry].get("options") or {}).items():
            options.setdefault(var, (option, []))[1].append(entry)
    several = len(names) > 1
    header = ["variable", "type", "default"] + (["entry points"] if several else []) + ["description"]
    lines += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += [row(var, option, entries if several else None) for var, (option, entries) in options.items()]
    return "\n".join(lines + ["", END])


def role_specs(role_dir):
    return yaml.safe_load((role_dir / "meta" / "argument_specs.yml").read_text())["argument_specs"]


def problems(role_dir, readme_text, block):
    """Why the README's generated part is not `block`: each line names the role, and the variable where one is."""
    role = role_dir.name
    if BEGIN not in readme_text or END not in readme_text:
        return ["%s: README.md has no generated block (%s ... %s)" % (role, BEGIN, END)]
    current = readme_text[readme_text.index(BEGIN):readme_text.index(END) + len(END)]
    if current == block:
        return []
    rows = {}
    for version, source in (("readme", current), ("specs", block)):
        for line in source.splitlines():
            match = re.match(r"^\| `([^`]+)` \|", line)
            if match:
                rows.setdefault(match.group(1), {})[version] = line
    found = []
    for name, versions in rows.items():
        if "readme" not in versions:
            found.append("%s: %s is in meta/argument_specs.yml but not in README.md" % (role, name))
        elif "specs" not in versions:
            found.append("%s: %s is in README.md but not in meta/argument_specs.yml" % (role, name))
        elif versions["readme"] != versions["specs"]:
            found.append("%s: %s differs from meta/argument_specs.yml" % (role, name))
    return found or ["%s: README.md's generated block differs from meta/argument_specs.yml (order or layout)" % role]


def run(root, check):
    """Rewrite (or, with check, compare) every role's README; return the problems found."""
    found = []
    for role_dir in sorted((root / "roles").iterdir()):
        if not (role_dir / "meta" / "argument_specs.yml").is_file():
            continue
        readme = role_dir / "README.md"
        if not readme.is_file():
            found.append("%s: no README.md" % role_dir.name)
            continue
        readme_text = readme.read_text()
        block = render(role_dir.name, role_specs(role_dir))
        role_problems = problems(role_dir, readme_text, block)
        if not role_problems:
            continue
        if check or BEGIN not in readme_text or END not in readme_text:
            found += role_problems
            continue
        start, end = readme_text.index(BEGIN), readme_text.index(END) + len(END)
        readme.write_text(readme_text[:start] + block + readme_text[end:])
        print("rewrote roles/%s/README.md" % role_dir.name)
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a README is out of date")
    parser.add_argument("--root", type=pathlib.Path, default=ROOT, help="the collection's root (holds roles/)")
    args = parser.parse_args(argv)
    found = run(args.root, args.check)
    for line in found:
        print(line, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
