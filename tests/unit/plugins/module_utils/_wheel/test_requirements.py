"""Job requirements: parsing, pins, pip's verdict and report, the lock (plugins/module_utils/_wheel/requirements.py).

The pip outputs and the report are recorded from real runs (tests/fixtures/requirements/record.sh).
"""
import json

import pytest

from ansible_collections.multinode.training.plugins.module_utils._wheel import requirements as reqs

from tests.unit.conftest import FIXTURES

REC = FIXTURES / "requirements"
PINNED = reqs.pinned_set((REC / "wheelhouse.txt").read_text().split())


def _reqs(*texts):
    return reqs.parse_requirements(list(texts), "wheel_distribute_requirements")


def test_pinned_set_from_the_wheelhouse_and_the_deepspeed_wheel():
    assert PINNED["torch"] == "2.13.0+cpu"
    assert PINNED["deepspeed"] == "0.19.8"
    assert PINNED["typing-extensions"] == "4.16.0"
    assert reqs.constraints_text(PINNED) == (REC / "constraints.txt").read_text().lower().replace("_", "-")


def test_parse_comments_blank_lines_markers():
    parsed = reqs.parse_requirements(["# mine", "", "Accelerate>=1.0  # hf", 'tabulate; python_version >= "3"'],
                                     "reqs.txt")
    assert [(r["name"], r["line"], r["text"]) for r in parsed] == [
        ("accelerate", 3, "Accelerate>=1.0"), ("tabulate", 4, 'tabulate; python_version >= "3"')]


@pytest.mark.parametrize("line, needle", [
    ("foo bar", "reqs.txt line 2: 'foo bar' is not a valid requirement"),
    ("-r other.txt", "reqs.txt line 2: '-r other.txt': pip options are not supported"),
    ("--index-url https://x", "pip options are not supported"),
    ("pkg @ https://example.com/pkg.whl", "direct URL requirements are not supported"),
    ("accelerate==1.0", "reqs.txt line 2: 'accelerate==1.0': accelerate is already required at reqs.txt line 1"),
])
def test_parse_refuses_naming_file_and_line(line, needle):
    with pytest.raises(reqs.RequirementsError) as err:
        reqs.parse_requirements(["accelerate", line], "reqs.txt")
    assert needle in str(err.value)


def test_merge_refuses_the_same_package_in_list_and_file():
    with pytest.raises(reqs.RequirementsError, match="req.txt line 1: 'tabulate': tabulate is already required "
                                                     "at wheel_distribute_requirements line 1"):
        reqs.merge_requirements(_reqs("tabulate"), reqs.parse_requirements(["tabulate"], "req.txt"))


def test_report_ok_keeps_the_pins_and_adds_accelerate():
    report = json.loads((REC / "ok.report.json").read_text())
    entries, problems = reqs.report_entries(report, PINNED)
    assert problems == []
    by_name = {e["name"]: e for e in entries}
    assert by_name["torch"]["version"] == "2.13.0+cpu" and by_name["torch"]["pinned"]
    assert by_name["deepspeed"]["filename"].startswith("deepspeed-0.19.8-")
    assert by_name["accelerate"]["pinned"] is False
    assert by_name["tabulate"]["version"] == "0.9.0"
    assert all(len(e["sha256"]) == 64 for e in entries)
    assert by_name["torch"]["filename"] == "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"


def test_report_that_would_change_a_pin_is_refused():
    report = json.loads((REC / "ok.report.json").read_text())
    pins = dict(PINNED, numpy="1.26.4")
    _entries, problems = reqs.report_entries(report, pins)
    assert problems == ["numpy would change from the pinned 1.26.4 to 2.4.6"]


def test_report_entry_without_hash_or_not_a_wheel_is_refused():
    report = {"install": [{"metadata": {"name": "foo", "version": "1.0"},
                           "download_info": {"url": "https://x/foo-1.0.tar.gz", "archive_info": {}}}]}
    _entries, problems = reqs.report_entries(report, {})
    assert "foo 1.0 (https://x/foo-1.0.tar.gz) has no sha256 in pip's report" in problems
    assert "foo 1.0 resolved to foo-1.0.tar.gz, not a wheel; valid: requirements available as wheels" in problems


@pytest.mark.parametrize("fixture, requirements, needles", [
    ("conflict_torch", ["accelerate", "torch<2.6"],
     ["wheel_distribute_requirements line 2 (torch<2.6) conflicts with the pinned torch==2.13.0+cpu",
      "The user requested torch<2.6"]),
    ("conflict_numpy", ["numpy<2"],
     ["wheel_distribute_requirements line 1 (numpy<2) conflicts with the pinned numpy==2.4.6"]),
    ("conflict_indirect", ["torchvision==0.20.0"],
     ["wheel_distribute_requirements line 1 (torchvision==0.20.0) conflicts with the pinned torch==2.13.0+cpu",
      "torchvision 0.20.0 depends on torch==2.5.0"]),
    ("unknown_package", ["no-such-package-xyz-42"],
     ["wheel_distribute_requirements line 1 (no-such-package-xyz-42): the index has no wheel of "
      "no-such-package-xyz-42 for the nodes' python and platform (versions it has: none)"]),
    ("missing_version", ["tabulate==99.0"],
     ["wheel_distribute_requirements line 1 (tabulate==99.0): the index has no wheel of tabulate==99.0",
      "versions it has: 0.7.6b0, 0.7.7, 0.8.7, 0.8.8, 0.8.9, 0.8.10, 0.9.0, 0.10.0"]),
])
def test_pip_failures_name_package_and_conflict(fixture, requirements, needles):
    output = (REC / ("%s.out" % fixture)).read_text()
    problems = reqs.pip_failure(output, _reqs(*requirements), PINNED)
    text = "; ".join(problems)
    for needle in needles:
        assert needle in text


def test_unrecognised_pip_failure_keeps_its_errors():
    problems = reqs.pip_failure("ERROR: something new\n", _reqs("x"), PINNED)
    assert problems == ["pip could not resolve the requirements: ERROR: something new"]


def test_lock_round_trip_and_digest():
    report = json.loads((REC / "ok.report.json").read_text())
    entries, _problems = reqs.report_entries(report, PINNED)
    parsed = _reqs("accelerate", "tabulate==0.9.0")
    digest = reqs.input_digest(parsed, PINNED, "3.11", [], "ab" * 32)
    text = reqs.lock_text(entries, digest)
    recorded, read = reqs.read_lock(text)
    assert recorded == digest
    assert [(e["name"], e["version"], e["sha256"], e["filename"]) for e in read] == [
        (e["name"], e["version"], e["sha256"], e["filename"]) for e in entries]
    assert "torch==2.13.0+cpu --hash=sha256:" in text
    # any input that decides the resolution changes the digest
    assert reqs.input_digest(_reqs("accelerate", "tabulate==0.8.10"), PINNED, "3.11", [], "ab" * 32) != digest
    assert reqs.input_digest(parsed, PINNED, "3.12", [], "ab" * 32) != digest
    assert reqs.input_digest(parsed, PINNED, "3.11", [], "cd" * 32) != digest


def test_wheel_name_version():
    assert reqs.wheel_name_version("hf_xet-1.8.0-cp38-abi3-manylinux2014_x86_64.whl") == ("hf-xet", "1.8.0")
    assert reqs.wheel_name_version("deepspeed-0.19.8.tar.gz") is None


@pytest.mark.parametrize("item, path", [
    ("-r requirements.txt", "requirements.txt"), ("-r  /srv/job/req s.txt ", "/srv/job/req s.txt"),
    ("-rreq.txt", "req.txt"), ("--requirement req.txt", "req.txt"), ("--requirement=req.txt", "req.txt"),
    ("accelerate>=1.0", None), ("-r", None), ("-e .", None), ("--index-url https://x", None),
])
def test_included_file_is_pips_r(item, path):
    assert reqs.included_file(item) == path


def test_groups_read_each_included_file_after_the_lists_own_lines():
    files = {"a.txt": "six\n# c\n", "/b.txt": "rich\n"}
    groups = reqs.requirement_groups(["accelerate", "-r a.txt", "tabulate", "--requirement=/b.txt"], "train_requirements",
                                     files.__getitem__)
    assert groups == [("train_requirements", ["accelerate", "", "tabulate", ""]), ("a.txt", ["six", "# c"]),
                      ("/b.txt", ["rich"])]
    # a problem in the list still names the item's position; one in a file its file and line
    with pytest.raises(reqs.RequirementsError, match=r"train_requirements line 3: 'tab ulate'"):
        reqs.parse_requirements(reqs.requirement_groups(["six", "-r a.txt", "tab ulate"], "train_requirements",
                                                        files.__getitem__)[0][1], "train_requirements")
    assert reqs.requirement_groups([], "x", files.__getitem__) == [("x", [])]
