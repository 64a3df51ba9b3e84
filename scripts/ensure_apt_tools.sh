#!/usr/bin/env bash
# ensure_apt_tools.sh PACKAGE COMMAND...: install Debian's PACKAGE where one of
# COMMAND is missing (root, apt). make host-packages uses it for:
# - chromium: headless Chromium for the job report's browser check
#   (molecule/launch_diagnosis/verify/job_report.yml: chromium --headless
#   --no-sandbox --dump-dom / --screenshot);
# - openssh-client (ssh, ssh-keygen): the one verify step run over ssh
#   (molecule/default/verify/ssh_keepalive.yml: a nested ansible-playbook
#   against a frozen node).
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 PACKAGE COMMAND..." >&2; exit 2; }
package=$1
shift
missing=()
for command in "$@"; do
  command -v "$command" >/dev/null || missing+=("$command")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$package" >/dev/null
else
  echo "${missing[*]} missing: install it (apt-get install $package)" >&2
  exit 1
fi
