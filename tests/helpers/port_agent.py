"""A command agent that serves on its attempt's ``$OCTOPOID_PORT`` while another attempt
does the same, and greets the declared service on the next port.

- ``port_agent.py service MARK``: the service; answers every connection on
  ``$OCTOPOID_PORT + 1`` with ``hello from MARK`` (run by ``workspace.services``);
  ``port_agent.py ready``: succeeds once it does (the service's ``ready``).
- ``port_agent.py BARRIER_PORT``: the agent. It listens on ``$OCTOPOID_PORT`` (exit 1 if
  taken), reads the service's greeting, tells the test's barrier on this machine it is up
  and waits for its ``go`` (every attempt up at once), then commits what it saw.
"""

import os
import socket
import subprocess
import sys
from pathlib import Path

port = int(os.environ["OCTOPOID_PORT"])
if sys.argv[1] == "ready":
    socket.create_connection(("127.0.0.1", port + 1), 1).close()
    sys.exit(0)
if sys.argv[1] == "service":
    server = socket.create_server(("127.0.0.1", port + 1))
    while True:
        conn, _ = server.accept()
        conn.sendall(f"hello from {sys.argv[2]}\n".encode())
        conn.close()
try:
    mine = socket.create_server(("127.0.0.1", port))
except OSError as exc:
    print(f"cannot serve on {port}: {exc}")
    sys.exit(1)
with socket.create_connection(("127.0.0.1", port + 1), 5) as service:
    greeting = service.makefile().readline().strip()
with socket.create_connection(("127.0.0.1", int(sys.argv[1])), 60) as barrier:
    barrier.sendall(f"up {os.environ['OCTOPOID_TASK_ID']} {port}\n".encode())
    said = barrier.makefile().readline().strip()
mine.close()
Path("served.txt").write_text(f"served on {port}; {greeting}; barrier said {said}\n")
subprocess.run(["git", "add", "served.txt"], check=True)
subprocess.run(["git", "commit", "-qm", "served"], check=True)
