# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a node's machine-wide setup looks like where the collection could change it (issue: nothing
changed that the user did not ask for): /etc/nccl.conf, /etc/security/limits.d and the default
compilers (the gcc alternative and where /usr/bin/gcc and g++ lead). Prints one JSON object;
prepare_cluster.yml keeps it before converge, verify/system_files.yml compares after every job."""
import hashlib
import json
import os
import subprocess


def digest(path):
    """sha256 of a file, or None where there is none."""
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        return None


def main():
    limits = "/etc/security/limits.d"
    names = sorted(os.listdir(limits)) if os.path.isdir(limits) else []
    query = subprocess.run(["update-alternatives", "--query", "gcc"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, universal_newlines=True, check=False)
    value = [line.split(":", 1)[1].strip() for line in query.stdout.splitlines() if line.startswith("Value:")]
    state = {
        "/etc/nccl.conf": digest("/etc/nccl.conf"),
        limits: {name: digest(os.path.join(limits, name)) for name in names},
        "gcc alternative": value[0] if value else None,
        "/usr/bin/gcc": os.path.realpath("/usr/bin/gcc") if os.path.exists("/usr/bin/gcc") else None,
        "/usr/bin/g++": os.path.realpath("/usr/bin/g++") if os.path.exists("/usr/bin/g++") else None,
    }
    print(json.dumps(state, sort_keys=True))


if __name__ == "__main__":
    main()
