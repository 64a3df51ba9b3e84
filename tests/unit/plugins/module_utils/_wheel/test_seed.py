"""Unit tests for _wheel.seed: a new release starts with the active one's unchanged packages, hard-linked.

Real venvs and real pip installs of small wheels made here (offline, hashes required, as the role runs pip),
so that what pip makes of a seeded release is what is tested.
"""
import hashlib
import os
import subprocess
import sys
import zipfile

import pytest

from ansible_collections.multinode.training.plugins.module_utils._wheel import requirements as reqs
from ansible_collections.multinode.training.plugins.module_utils._wheel import seed as _seed


def make_wheel(directory, name, version, script=False):
    """A pure-Python wheel: module <name>.py (VERSION), optionally a console script <name> printing it."""
    path = os.path.join(directory, "%s-%s-py3-none-any.whl" % (name, version))
    info = "%s-%s.dist-info" % (name, version)
    files = {
        "%s.py" % name: "VERSION = %r\n\ndef main():\n    print(%r, VERSION)\n" % (version, name),
        "%s/METADATA" % info: "Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (name, version),
        "%s/WHEEL" % info: "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    if script:
        files["%s/entry_points.txt" % info] = "[console_scripts]\n%s = %s:main\n" % (name, name)
    record = "".join("%s,%s,%d\n" % (n, _seed.record_hash(d.encode()), len(d.encode())) for n, d in files.items())
    files["%s/RECORD" % info] = record + "%s/RECORD,,\n" % info
    with zipfile.ZipFile(path, "w") as wheel:
        for n, d in files.items():
            wheel.writestr(n, d)
    return path


def lock_text(wheels):
    entries = []
    for path in wheels:
        name, version = os.path.basename(path).split("-")[:2]
        with open(path, "rb") as handle:
            sha = hashlib.sha256(handle.read()).hexdigest()
        entries.append({"name": name, "version": version, "sha256": sha, "filename": os.path.basename(path)})
    return reqs.lock_text(entries, "digest-of-" + "-".join(sorted(os.path.basename(w) for w in wheels)))


def release(root, name, wheels, wheelhouse, seed_from=None):
    """A release venv holding the lock of ``wheels``: seeded from ``seed_from`` (the active venv symlink)
    when given, then pip as the role runs it. Returns (path, lock path, seed's (carried, skipped))."""
    path = str(root / name)
    subprocess.run([sys.executable, "-m", "venv", path], check=True)
    lock = str(root / (name + ".lock"))
    with open(lock, "w") as handle:
        handle.write(lock_text(wheels))
    seeded = None
    if seed_from:
        why, active = _seed.why_not(seed_from, path, lock)
        assert why is None, why
        with open(os.path.join(active, _seed.LOCK_NAME)) as handle:
            old = reqs.read_lock(handle.read())[1]
        seeded = _seed.seed(active, path, _seed.kept_packages(old, reqs.read_lock(lock_text(wheels))[1]))
    subprocess.run([path + "/bin/python", "-m", "pip", "install", "--disable-pip-version-check", "--no-cache-dir",
                    "--no-input", "--no-index", "--find-links", wheelhouse, "--require-hashes", "-r", lock],
                   check=True, capture_output=True)
    with open(os.path.join(path, _seed.LOCK_NAME), "w") as handle:
        handle.write(lock_text(wheels))
    return path, lock, seeded


def installed(venv):
    out = subprocess.run([venv + "/bin/python", "-m", "pip", "list", "--format=freeze", "--disable-pip-version-check"],
                         check=True, capture_output=True, text=True).stdout
    return sorted(line for line in out.splitlines() if line.split("==")[0] in ("alpha", "beta", "gamma"))


def site_file(venv, name):
    return os.path.join(_seed.site_packages(venv), name)


@pytest.fixture(scope="module")
def releases(tmp_path_factory):
    """Release A (alpha 1.0 with its script, beta 1.0) active; B from the lock alpha 1.0, beta 2.0, gamma 1.0."""
    root = tmp_path_factory.mktemp("releases")
    house = str(root / "wheelhouse")
    os.makedirs(house)
    alpha = make_wheel(house, "alpha", "1.0", script=True)
    beta1, beta2 = make_wheel(house, "beta", "1.0"), make_wheel(house, "beta", "2.0")
    gamma = make_wheel(house, "gamma", "1.0")
    a, _lock, _seeded = release(root, "A", [alpha, beta1], house)
    venv = str(root / "venv")
    os.symlink(a, venv)
    b, _lock, seeded = release(root, "B", [alpha, beta2, gamma], house, seed_from=venv)
    return {"root": root, "house": house, "a": a, "b": b, "venv": venv, "seeded": seeded,
            "wheels": {"alpha": alpha, "beta1": beta1, "beta2": beta2, "gamma": gamma}}


def test_only_the_same_wheel_is_kept():
    old = [{"name": "Alpha", "version": "1.0", "sha256": "a" * 64}, {"name": "beta", "version": "1.0", "sha256": "b" * 64},
           {"name": "torch", "version": "2.13.0", "sha256": "c" * 64}]
    new = [{"name": "alpha", "version": "1.0", "sha256": "a" * 64}, {"name": "beta", "version": "2.0", "sha256": "d" * 64},
           {"name": "torch", "version": "2.13.0", "sha256": "e" * 64}]
    # torch 2.13.0 from another wheel (a CPU build replaced by a CUDA one, same version): not kept
    assert _seed.kept_packages(old, new) == {"alpha": "1.0"}


def test_seeded_release_holds_what_a_fresh_install_would(releases):
    assert releases["seeded"] == (["alpha==1.0"], [])
    assert installed(releases["b"]) == ["alpha==1.0", "beta==2.0", "gamma==1.0"]
    out = subprocess.run([releases["b"] + "/bin/python", "-c", "import alpha, beta, gamma; print(beta.VERSION)"],
                         check=True, capture_output=True, text=True).stdout
    assert out.strip() == "2.0"


def test_carried_files_are_hard_links_the_active_release_unchanged(releases):
    assert os.path.samefile(site_file(releases["a"], "alpha.py"), site_file(releases["b"], "alpha.py"))
    assert not os.path.samefile(site_file(releases["a"], "alpha-1.0.dist-info/RECORD"),
                                site_file(releases["b"], "alpha-1.0.dist-info/RECORD"))  # its script line changed
    assert installed(releases["a"]) == ["alpha==1.0", "beta==1.0"]
    out = subprocess.run([releases["a"] + "/bin/alpha"], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "alpha 1.0"


def test_script_runs_the_new_release_and_record_matches(releases):
    script = os.path.join(releases["b"], "bin", "alpha")
    with open(script, "rb") as handle:
        data = handle.read()
    assert data.startswith(("#!" + releases["b"] + "/bin/python").encode())
    assert releases["a"].encode() not in data
    assert os.access(script, os.X_OK)
    out = subprocess.run([script], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "alpha 1.0"
    rows = dict((r[0], r[1]) for r in _seed._record_rows(site_file(releases["b"], "alpha-1.0.dist-info")))
    assert rows["../../../bin/alpha"] == _seed.record_hash(data)


def test_uninstall_in_the_new_release_leaves_the_old_whole(releases, tmp_path):
    # a later change drops alpha from B: pip removes B's links, A keeps its files
    subprocess.run([releases["b"] + "/bin/python", "-m", "pip", "uninstall", "-y", "-q", "alpha"], check=True,
                   capture_output=True)
    try:
        assert os.path.isfile(site_file(releases["a"], "alpha.py"))
        assert subprocess.run([releases["a"] + "/bin/alpha"], check=True, capture_output=True, text=True).stdout.strip() == "alpha 1.0"
    finally:
        subprocess.run([releases["b"] + "/bin/python", "-m", "pip", "install", "-q", "--no-index", "--find-links",
                        releases["house"], "alpha==1.0"], check=True, capture_output=True)


def test_a_changed_file_is_not_carried(releases):
    root = releases["root"]
    c = str(root / "C")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", c], check=True)
    module = site_file(releases["a"], "beta.py")
    saved = open(module).read()
    os.unlink(module)  # a new file, as an editor would write it: A's beta.py no longer matches RECORD
    with open(module, "w") as handle:
        handle.write(saved + "# edited\n")
    try:
        carried, skipped = _seed.seed(releases["a"], c, {"alpha": "1.0", "beta": "1.0"})
    finally:
        os.unlink(module)
        with open(module, "w") as handle:
            handle.write(saved)
    assert carried == ["alpha==1.0"]
    assert skipped == ["beta: beta.py differs from its RECORD hash"]
    assert not os.path.exists(site_file(c, "beta.py"))


def test_why_not(releases, tmp_path):
    lock = str(tmp_path / "x.lock")
    open(lock, "w").write("")
    assert _seed.why_not(releases["a"], releases["b"], lock)[0].endswith("is not a release made by this role")
    assert _seed.why_not(releases["venv"], releases["a"], lock) == ("the release is the active one", None)
    assert _seed.why_not(releases["venv"], releases["b"], str(tmp_path / "none"))[0].startswith("no lock ")
    other = str(tmp_path / "other")
    os.makedirs(other)
    open(os.path.join(other, "pyvenv.cfg"), "w").write("home = /opt/python3.9/bin\nversion = 3.9.2\n")
    assert _seed.why_not(releases["venv"], other, lock)[0] == "the active release was made by another interpreter"
    bare = str(tmp_path / "bare")
    os.makedirs(bare)
    link = str(tmp_path / "venv-bare")
    os.symlink(bare, link)
    assert "has no recorded lock" in _seed.why_not(link, releases["b"], lock)[0]
