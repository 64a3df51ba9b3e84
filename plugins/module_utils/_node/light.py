# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A module of this collection run without Ansible's module machinery (standard library only).

An Ansible module call costs about 0.3 CPU-seconds on the node whatever the module does: Ansible
imports ``ansible.module_utils.basic`` and what it needs from a zip without bytecode. Every node pays
it at the same moment, on the CPUs the job is about to use. The collection's node-side modules that
matter for the launch (train_access, torchrun) keep their logic in module_utils files that need only
the standard library and an object with AnsibleModule's few members they use (``params``,
``check_mode``, ``no_log_values``, ``exit_json``, ``fail_json``, ``warn``, ``run_command``,
``get_bin_path``). Their action plugins (plugins/plugin_utils/_light_exec.py) validate the arguments
on the controller with Ansible's own validator and send this file to the node's python on stdin,
followed by a call of ``main`` with the module_utils sources and the validated arguments. ``main``
makes those sources importable under their usual names (``inspect.getsource`` works on them too:
the torchrun module ships some of them into the job directory), builds a ``LightModule`` and calls
the entry's ``run_module(module)``; the module's answer is one JSON line on stdout, as a module's.

The controller also sends those sources compiled (``compile_source``, marshalled, with its Python's
bytecode magic number): where the node's Python has the same magic, they run without being compiled
again on every node (torchrun's sources: about 30 ms of a node's CPU per call); elsewhere the sources
are compiled here, as before.
"""
from __future__ import annotations

import base64
import importlib
import importlib.util
import json
import marshal
import os
import shutil
import subprocess
import sys
import zlib

# The prefix of the collection's module_utils, as the modules import them.
PACKAGE = "ansible_collections.multinode.training.plugins.module_utils"
# Not a path on the node: the name inspect and tracebacks show for a shipped source.
ORIGIN = "<multinode.training light>/"
SBIN = ("/sbin", "/usr/sbin", "/usr/local/sbin")
MASK = "********"


class _Exit(Exception):
    """exit_json / fail_json: the answer is written, unwind to main."""


def remove_values(value, secrets):
    """``value`` with every secret replaced by ******** wherever it appears in a string (as
    AnsibleModule does with its no_log values before answering)."""
    secrets = sorted((s for s in secrets if s), key=len, reverse=True)
    return _masked(value, secrets) if secrets else value


def _masked(value, secrets):
    """remove_values' walk; ``secrets``: non-empty, longest first (a secret inside another one)."""
    if isinstance(value, dict):
        return dict((_masked(k, secrets), _masked(v, secrets)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [_masked(v, secrets) for v in value]
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, MASK)
    return value


class LightModule(object):
    """The members of AnsibleModule that the collection's light modules use, on the standard library.

    ``params`` are already validated (the controller ran Ansible's ArgumentSpecValidator with the
    module's argument spec); ``answer`` receives the result dict instead of it being printed, for
    tests."""

    def __init__(self, params, check_mode=False, no_log_values=(), answer=None):
        self.params = params
        self.check_mode = bool(check_mode)
        self.no_log_values = set(no_log_values)
        self._warnings = []
        self._answer = answer if answer is not None else {}

    def warn(self, warning):
        self._warnings.append(str(warning))

    def exit_json(self, **result):
        self._finish(result)

    def fail_json(self, msg, **result):
        result.update(failed=True, msg=msg)
        self._finish(result)

    def _finish(self, result):
        if self._warnings:
            result["warnings"] = list(result.get("warnings") or []) + self._warnings
        self._answer.clear()
        self._answer.update(remove_values(result, self.no_log_values))
        raise _Exit()

    def get_bin_path(self, name, required=False, opt_dirs=None):
        """``name`` on PATH or in the sbin directories (AnsibleModule looks there too), else None."""
        path = os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep)
        found = shutil.which(name, path=os.pathsep.join(list(opt_dirs or []) + path + list(SBIN)))
        if found is None and required:
            self.fail_json(msg="Failed to find required executable \"%s\" in paths: %s"
                           % (name, os.pathsep.join(path + list(SBIN))))
        return found

    def run_command(self, args, check_rc=False, data=None, binary_data=False, cwd=None, environ_update=None,
                    expand_user_and_vars=True, handle_exceptions=True, **_ignored):
        """argv -> (rc, stdout, stderr) as text, as AnsibleModule.run_command with a list and no shell:
        ``~`` and ``$VAR`` expanded in each argument, None dropped, ``data`` to stdin (with a newline
        unless ``binary_data``), a command that cannot start fails the module (``handle_exceptions``)."""
        if isinstance(args, (str, bytes)):
            raise TypeError("run_command: a light module passes an argv list")
        args = [str(a) for a in args if a is not None]
        if expand_user_and_vars:
            args = [expand(a) for a in args]
        env = dict(os.environ)
        env.update(environ_update or {})
        if data is not None:
            data = data if isinstance(data, bytes) else data.encode("utf-8", "surrogateescape")
            if not binary_data:
                data += b"\n"
        try:
            proc = subprocess.Popen(args, stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, env=env, close_fds=True)
            out, err = proc.communicate(data)
        except OSError as exc:
            if handle_exceptions:
                self.fail_json(rc=exc.errno, stdout="", stderr="", msg="Error executing command.", cmd=args,
                               exception=str(exc))
            raise
        rc = proc.returncode
        out = out.decode("utf-8", "surrogateescape")
        err = err.decode("utf-8", "surrogateescape")
        if rc != 0 and check_rc:
            self.fail_json(msg=err.strip() or "command failed", cmd=args, rc=rc, stdout=out, stderr=err)
        return rc, out, err


def origin(fullname):
    """The file name a shipped module shows (``__file__``, tracebacks)."""
    return ORIGIN + fullname.replace(".", "/") + ".py"


def compile_source(fullname, source):
    """A shipped module's code object: the same on the controller (``_light_exec.packed_code``) and
    here (the compile flags are this file's on both sides)."""
    return compile(source, origin(fullname), "exec")


def magic():
    """This Python's bytecode magic number: marshalled code runs only where it is the same."""
    return importlib.util.MAGIC_NUMBER.hex()


def pack_code(sources):
    """``{dotted name: source}`` -> (magic, the code objects marshalled, zlib, base64)."""
    code = dict((name, compile_source(name, source)) for name, source in sources.items())
    return magic(), base64.b64encode(zlib.compress(marshal.dumps(code), 6)).decode("ascii")


def unpack_code(packed):
    """``pack_code``'s answer -> {dotted name: code object}; {} where this Python's magic differs (or
    the blob does not read): the sources are compiled here then."""
    if not packed or packed[0] != magic():
        return {}
    try:
        code = marshal.loads(zlib.decompress(base64.b64decode(packed[1])))
    except (ValueError, TypeError, EOFError, zlib.error):
        return {}
    return code if isinstance(code, dict) else {}


class SourceImporter(object):
    """sys.meta_path finder and loader for ``{dotted name: source}``; the packages above them exist
    empty. A module keeps its source for ``inspect.getsource`` (``get_source``). ``code``: {dotted
    name: code object} compiled already (unpack_code), run instead of compiling the source."""

    def __init__(self, sources, code=None):
        self.sources = dict(sources)
        self.code = dict(code or {})
        self.packages = set()
        for name in self.sources:
            parts = name.split(".")
            for i in range(1, len(parts)):
                self.packages.add(".".join(parts[:i]))

    def find_spec(self, fullname, path=None, target=None):
        if fullname in self.sources:
            return importlib.util.spec_from_loader(fullname, self, origin=origin(fullname))
        if fullname in self.packages:
            spec = importlib.util.spec_from_loader(fullname, self, is_package=True)
            spec.submodule_search_locations = []
            return spec
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        name = module.__name__
        if name not in self.sources:
            return
        module.__file__ = origin(name)
        code = self.code.get(name)
        if code is None or code.co_filename != module.__file__:
            code = compile_source(name, self.sources[name])
        exec(code, module.__dict__)

    def get_source(self, fullname):
        return self.sources.get(fullname)

    def is_package(self, fullname):
        return fullname in self.packages and fullname not in self.sources


def expand(text):
    """``$VAR`` then ``~`` expanded, as AnsibleModule expands a path option and run_command's argv."""
    return os.path.expanduser(os.path.expandvars(text))


def expand_paths(params, names):
    """The ``path`` options (and lists of paths) expanded here, as AnsibleModule's path type does on
    the node (``~`` and ``$VAR``); the controller checked them as strings."""
    for name in names:
        value = params.get(name)
        if isinstance(value, str):
            params[name] = expand(value)
        elif isinstance(value, list):
            params[name] = [expand(v) if isinstance(v, str) else v for v in value]
    return params


def readable_cwd():
    """Stay in the current directory when it can be read, else go home or to the temporary
    directory, as AnsibleModule does (a become user may start in a directory it cannot read; the
    processes the module starts inherit it) -> the directory."""
    try:
        cwd = os.getcwd()
        if os.access(cwd, os.F_OK | os.R_OK):
            return cwd
    except OSError:
        pass
    import tempfile
    for folder in (os.path.expandvars("$HOME"), tempfile.gettempdir()):
        try:
            if os.access(folder, os.F_OK | os.R_OK):
                os.chdir(folder)
                return folder
        except OSError:
            continue
    return None


def pack(payload):
    """The controller's payload -> the literal ``main`` takes (zlib, base64)."""
    return base64.b64encode(zlib.compress(json.dumps(payload).encode("utf-8"), 6)).decode("ascii")


def unpack(blob):
    return json.loads(zlib.decompress(base64.b64decode(blob)).decode("utf-8"))


def run(payload, answer=None, code=None):
    """Run ``payload['entry']``'s ``run_module`` with a LightModule -> the answer dict.

    payload: sources ({dotted name: source}), entry (dotted name), params, paths (the path options,
    expanded here), check_mode, no_log_values. ``code``: unpack_code's {dotted name: code object}."""
    answer = {} if answer is None else answer
    sys.meta_path.insert(0, SourceImporter(payload["sources"], code))
    readable_cwd()
    params = expand_paths(payload["params"], payload.get("paths") or ())
    module = LightModule(params, payload.get("check_mode"), payload.get("no_log_values") or (), answer)
    try:
        entry = importlib.import_module(payload["entry"])
        entry.run_module(module)
        module.fail_json(msg="%s: run_module returned without an answer" % payload["entry"])
    except _Exit:
        pass
    return answer


def main(blob, sources=None, code=None):
    """The node's side: one JSON line on stdout (exit code 0, failed or not; 1 for a crash, whose
    traceback goes to stderr as a module's would). ``sources``: the payload's sources packed apart
    (the controller packs them once per entry, not once per call); ``code``: the same compiled
    (pack_code), used where this Python's magic number is the controller's."""
    payload = unpack(blob)
    if sources is not None:
        payload["sources"] = unpack(sources)
    answer = run(payload, code=unpack_code(code))
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()
