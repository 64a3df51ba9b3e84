#!/usr/bin/env bash
# The OpenSSH client (ssh, ssh-keygen) from Debian for the one verify step run
# over ssh (molecule/default/verify/ssh_keepalive.yml: a nested ansible-playbook
# against a frozen node). Installs it where it is missing (root, apt).
set -euo pipefail
command -v ssh >/dev/null && command -v ssh-keygen >/dev/null && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q openssh-client >/dev/null
else
  echo "ssh is missing: install it (apt-get install openssh-client)" >&2
  exit 1
fi
