"""Module deepspeed_build's steps stage, dist_check and dist_commit (_build/stage.py)."""
import pytest

from ansible_collections.multinode.training.plugins.module_utils._build import stage

from ..stand_in import Exit, StandInModule


def run(call, spec, **params):
    module = StandInModule(spec, **params)
    with pytest.raises(Exit):
        call(module)
    return module.result


def test_stage_refuses_a_build_venv_without_torch_and_a_tree_without_setup_py(tmp_path):
    result = run(stage.run_stage, stage.STAGE_SPEC, workdir=str(tmp_path), source_tree=str(tmp_path))
    assert result["failed"] and result["msg"] == "no torch in the build venv %s: its install step did not put one there" % (
        tmp_path / "venv")


def test_dist_commit_in_check_mode_moves_nothing_and_fails_on_a_missing_file(tmp_path):
    module = StandInModule(stage.DIST_COMMIT_SPEC, check_mode=True, dist_dir=str(tmp_path), names=["x.whl"])
    with pytest.raises(Exit):
        stage.run_dist_commit(module)
    assert module.result == {"changed": True, "moved": []}
    result = run(stage.run_dist_commit, stage.DIST_COMMIT_SPEC, dist_dir=str(tmp_path / "none"), names=["x.whl"])
    assert result["failed"] and result["msg"]
