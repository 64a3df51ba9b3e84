#!/usr/bin/env bash
# Create the controller venv and install pinned requirements. On a fresh Debian
# the system python lacks the venv module until python3-venv is installed.
set -euo pipefail
venv=$1 req=$2
py=${PYTHON:-python3}
if ! "$py" -c 'import venv, ensurepip' 2>/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv >/dev/null
  else
    echo "$py has no venv module: install python3-venv (apt-get install python3-venv)" >&2
    exit 1
  fi
fi
[ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req" 2>&1 | grep -v "^WARNING: Location" || true
"$venv/bin/python" -m pip check >/dev/null || { "$venv/bin/python" -m pip check; exit 1; }
