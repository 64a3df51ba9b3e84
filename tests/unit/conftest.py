"""Make `ansible_collections.multinode.training` importable from a clone.

`.collections/ansible_collections/multinode/training` is a symlink to the
repository root, so putting `.collections` on sys.path lets the unit tests
import module_utils exactly as modules do on a target.
"""
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / ".collections"))
FIXTURES = ROOT / "tests" / "fixtures"
