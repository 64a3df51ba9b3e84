#!/usr/bin/env bash
# Headless Chromium from Debian for the job report's browser check
# (molecule/launch_diagnosis/verify/job_report.yml: chromium --headless --no-sandbox
# --dump-dom / --screenshot). Installs it where it is missing (root, apt).
set -euo pipefail
command -v chromium >/dev/null && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null
else
  echo "chromium is missing: install it (apt-get install chromium)" >&2
  exit 1
fi
