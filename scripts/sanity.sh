#!/usr/bin/env bash
# ansible-test sanity on a copy of the tracked files laid out as
# ansible_collections/multinode/training (ansible-test insists on that path).
#
# ansible-test bootstraps pip in its per-test venvs with a script it downloads
# from ci-files.testing.ansible.com; air-gapped machines (ours: PyPI only) cannot
# reach it. We place a stand-in at the cache path ansible-test documents for a
# manual download: it gives the venv pip through ensurepip, then installs the
# pip version ansible-test asks for from the package index.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV_BIN=${VENV_BIN:-$ROOT/.venv/bin}
PYVER=$("$VENV_BIN/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
WORK=$ROOT/.cache/sanity
DEST=$WORK/ansible_collections/multinode/training

cache=$HOME/.ansible/test/cache
mkdir -p "$cache"
for v in 24_2 24_3 25_0 25_1 25_2; do
  cat >"$cache/get_pip_$v.py" <<'PY'
# Stand-in for ansible-test's get-pip bootstrap (see scripts/sanity.sh).
import subprocess
import sys

subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"])
# get-pip's own options have no pip equivalent; the rest are pip install arguments.
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel", "--disable-pip-version-check")]
subprocess.check_call([sys.executable, "-m", "pip", "install", "--disable-pip-version-check"] + args)
PY
done

rm -rf "$WORK"
mkdir -p "$DEST"
git ls-files -z | grep -zv '^\.collections/' | xargs -0 cp --parents -t "$DEST"
cd "$DEST"
# A git repository keeps ansible-test to the tracked files.
git init -q && git add -A && git -c user.email=ci@example.invalid -c user.name=ci commit -qm sanity
# no-illegal-filenames guards Windows checkouts; tests/fixtures records Linux
# procfs/sysfs trees whose PCI-address folder names (0000:18:00.0) hold ':'.
# The collection targets Linux only.
"$VENV_BIN/ansible-test" sanity --python "$PYVER" --color no --skip-test no-illegal-filenames "$@"
