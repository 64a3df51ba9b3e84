"""Make `ansible_collections.multinode.training` importable from a clone; fixtures the unit tests share.

`.collections/ansible_collections/multinode/training` is a symlink to the
repository root, so putting `.collections` on sys.path lets the unit tests
import module_utils exactly as modules do on a target.
"""
import os
import pathlib
import shutil
import sys
import tempfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / ".collections"))
FIXTURES = ROOT / "tests" / "fixtures"


@pytest.fixture
def shared_dir():
    """A directory anyone may enter (pytest's tmp_path is below root's 0700 /tmp/pytest-of-root): where
    the tests put what another account (the job's, nobody) must reach or be refused."""
    path = tempfile.mkdtemp(prefix="mt-shared-")
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path)
