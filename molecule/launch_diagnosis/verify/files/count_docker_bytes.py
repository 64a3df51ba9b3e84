# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""count_docker_bytes.py OUT -- COMMAND...: run COMMAND with DOCKER_HOST pointing at a proxy of the Docker
engine's socket that counts the bytes the controller sends to it, then write {"sent": N, "connections": C}
to OUT and exit with the command's status.

Everything the controller sends a node over molecule's docker connection (module payloads, copied files,
stdin of `docker exec`) goes through that socket: this counts it from outside the collection, where the
node's eth0 cannot see it. Each connection is piped both ways, half-closes passed on (`docker exec -i`
ends its stdin with a write shutdown; the command on the node waits for it)."""
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading

ENGINE = "/var/run/docker.sock"


class Counter:
    def __init__(self):
        self.lock = threading.Lock()
        self.sent = 0
        self.connections = 0

    def add(self, count):
        with self.lock:
            self.sent += count


def _pipe(source, sink, counter=None):
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            if counter:
                counter.add(len(data))
            sink.sendall(data)
    except OSError:
        pass
    try:
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def _serve(client, counter):
    engine = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        engine.connect(ENGINE)
    except OSError:
        client.close()
        return
    with counter.lock:
        counter.connections += 1
    up = threading.Thread(target=_pipe, args=(client, engine, counter), daemon=True)
    up.start()
    _pipe(engine, client)
    up.join()
    client.close()
    engine.close()


def main(argv):
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write(__doc__)
        return 2
    out, command = argv[0], argv[2:]
    counter = Counter()
    folder = tempfile.mkdtemp(prefix="count-docker-")
    path = os.path.join(folder, "docker.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)

    def accept():
        while True:
            try:
                client = listener.accept()[0]
            except OSError:
                return
            threading.Thread(target=_serve, args=(client, counter), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    rc = subprocess.call(command, env=dict(os.environ, DOCKER_HOST="unix://" + path))
    listener.close()
    os.unlink(path)
    os.rmdir(folder)
    with counter.lock:
        report = {"sent": counter.sent, "connections": counter.connections}
    with open(out, "w") as handle:
        json.dump(report, handle)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
