"""deepspeed_build (manifest)'s steps (plugins/module_utils/_build/wheel_manifest.py)."""
import pytest

from ansible_collections.multinode.training.plugins.module_utils._build import wheel_manifest
from tests.unit.plugins.module_utils.stand_in import Exit, StandInModule


def stand_in(**params):
    return StandInModule(wheel_manifest.ARGUMENT_SPEC, **params)


def test_wheel_tags_of_a_wheel_name_and_a_name_that_is_none():
    assert wheel_manifest.wheel_tags("deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl") == \
        ("cp311", "cp311", "linux_x86_64")
    with pytest.raises(ValueError, match="is not a wheel file name"):
        wheel_manifest.wheel_tags("deepspeed-0.19.8.whl")


def test_a_folder_without_a_wheel_fails_naming_what_was_looked_for(tmp_path):
    module = stand_in(wheel=str(tmp_path), ops=[])
    with pytest.raises(Exit):
        wheel_manifest.find_wheel(module)
    assert module.result["msg"] == "no wheel at %s/deepspeed-*.whl: the build did not produce one" % tmp_path


def test_the_wheel_in_a_folder_and_its_build_log_are_found(tmp_path):
    wheel = tmp_path / "deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl"
    wheel.write_bytes(b"")
    (tmp_path / "build.log").write_text("building op cpu_adam\n")
    module = stand_in(wheel=str(tmp_path), ops=[], build_log=str(tmp_path / "build.log"))
    assert wheel_manifest.find_wheel(module) == (str(wheel), "building op cpu_adam\n")
