"""Every file of plugins/module_utils/_node/ is shipped to the nodes as source and run there by the
node's python (the job's venv, or the system's): it may import the standard library and its _node/
siblings (side by side on the node), nothing else - not Ansible, not the rest of the collection.

A script that only the job's python runs under torchrun (JOB_SCRIPTS: the fabric check's probe) also
imports torch, inside a function only: importing the file (the module side reads its pure functions)
still needs the standard library alone."""

import ast
import os
import shutil
import subprocess
import sys

from ansible_collections.multinode.training.plugins.module_utils._node import watch
from ansible_collections.multinode.training.plugins.module_utils._torchrun import jobdir

NODE_DIR = os.path.dirname(os.path.abspath(watch.__file__))
# file -> the packages of the job's python it may import inside a function
JOB_SCRIPTS = {"fabric_probe.py": {"torch"}}


def imported(node, siblings):
    """The modules an import statement names; a sibling imported relatively (``from .watchlib import``:
    in the collection, where the node imports it by its name beside the file) by its own name."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not node.level:
        return [node.module]
    if node.level == 1 and node.module in siblings:
        return [node.module]
    if node.level == 1 and not node.module and all(alias.name in siblings for alias in node.names):
        return [alias.name for alias in node.names]
    return ["." * node.level + (node.module or "")]


def foreign_imports(folder):
    """``[(file, line, module)]``: the imports of ``folder``'s .py files that are neither the standard
    library nor a sibling file of ``folder`` (at any depth: inside functions too), nor, inside a function
    of a JOB_SCRIPTS file, one of its packages."""
    siblings = {name[:-3] for name in os.listdir(folder) if name.endswith(".py")}
    found = []
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".py"):
            continue
        with open(os.path.join(folder, name)) as handle:
            tree = ast.parse(handle.read(), name)
        in_functions = {id(inner) for function in ast.walk(tree)
                        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
                        for inner in ast.walk(function)}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for module in imported(node, siblings):
                top = module.split(".")[0]
                job_python = id(node) in in_functions and top in JOB_SCRIPTS.get(name, ())
                if top not in sys.stdlib_module_names and top not in siblings and not job_python:
                    found.append((name, node.lineno, module))
    return found


def test_node_files_import_only_the_standard_library_and_their_siblings():
    names = [name for name in os.listdir(NODE_DIR) if name.endswith(".py") and name != "__init__.py"]
    assert len(names) >= 6, names
    assert foreign_imports(NODE_DIR) == []


def test_a_planted_import_is_found(tmp_path):
    copy = tmp_path / "_node"
    shutil.copytree(NODE_DIR, str(copy))
    with open(str(copy / "watch.py"), "a") as handle:
        handle.write("\n\ndef later():\n    from ansible.module_utils.basic import AnsibleModule\n    return AnsibleModule\n")
    (copy / "extra.py").write_text("import yaml\nfrom .. import _torchrun\nfrom . import nothere\nfrom .nothere import x\n"
                                   "import supervisor\nfrom . import watch\nfrom .watchlib import read_bytes\nimport json\n")
    # torch: only the probe, only inside a function
    with open(str(copy / "fabric_probe.py"), "a") as handle:
        handle.write("\nimport torch.distributed\n")
    (copy / "other.py").write_text("def run():\n    import torch\n    return torch\n")
    found = foreign_imports(str(copy))
    assert [(name, module) for name, _line, module in found] == [
        ("extra.py", "yaml"), ("extra.py", ".."), ("extra.py", "."), ("extra.py", ".nothere"),
        ("fabric_probe.py", "torch.distributed"), ("other.py", "torch"), ("watch.py", "ansible.module_utils.basic")]


def test_the_job_directory_runs_alone(tmp_path):
    """The job directory as the torchrun module fills it (supervisor, rank wrapper, sampler, watcher and
    its library): each python file there imports in an isolated python (-I: no site-packages, no
    ansible, not even its own directory on the path) from an empty working directory, with nothing but
    what was shipped beside it - the watcher finds its library by itself, in its own directory."""
    job_dir = str(tmp_path / "job")
    fd = jobdir.make_job_dir(job_dir)
    try:
        params = {"watch": {"node": "n1", "token": "t" * 32}, "nnodes": "1", "max_restarts": 0}
        for log_fd in jobdir.fill_job_dir(fd, params, "j", "n1", None):
            os.close(log_fd)
    finally:
        os.close(fd)
    shipped = sorted(name for name in os.listdir(job_dir) if name.endswith(".py"))
    # the files that are run or loaded by name (the rank wrapper loads the sampler only where it is there);
    # what they import is found by importing them
    assert {"mt_watch.py", "mt_rank.py", "mt_sample.py", "supervisor.py"} <= set(shipped)
    empty = tmp_path / "cwd"
    empty.mkdir()
    for name in shipped:
        code = "import runpy, sys; runpy.run_path(sys.argv[1], run_name='shipped')"
        done = subprocess.run([sys.executable, "-I", "-c", code, os.path.join(job_dir, name)], cwd=str(empty),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
        assert done.returncode == 0, (name, done.stdout.decode())
