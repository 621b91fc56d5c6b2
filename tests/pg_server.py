"""A throwaway PostgreSQL server for the tests: Debian's binaries, ``initdb`` into a temporary
folder, listening on a Unix socket in that folder only (no TCP port to collide on).

PostgreSQL refuses to run as root, so as root the server runs as the ``postgres`` system
user (the folder is handed to it); as anyone else it runs as that user. Each test gets a
database of its own, made from the server's empty template in milliseconds, and dropped
after it. The server's folder is in /dev/shm where there is one: nothing of it is worth
a disk write.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path


def find_bin(name: str) -> str | None:
    """``initdb``/``pg_ctl`` from PATH or Debian's versioned folder (newest first)."""
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.access(f"{folder}/{name}", os.X_OK):
            return f"{folder}/{name}"
    return shutil.which(name)


class PgServer:
    """Start with ``start()``; ``dsn(db)`` names a database on it; ``stop()`` removes it."""

    def __init__(self) -> None:
        shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None  # memory: no disk writes
        self.root = Path(tempfile.mkdtemp(prefix="octopoid-pg-", dir=shm))
        self.data = self.root / "data"
        self.sock = self.root / "sock"
        self.user: pwd.struct_passwd | None = None
        if os.geteuid() == 0:
            self.user = pwd.getpwnam("postgres")

    def _run(self, argv: list[str], **kw) -> subprocess.CompletedProcess:
        if self.user is not None:
            uid, gid = self.user.pw_uid, self.user.pw_gid
            kw["preexec_fn"] = lambda: (os.setgroups([]), os.setgid(gid), os.setuid(uid))
        env = {"PATH": os.environ.get("PATH", ""), "LC_ALL": "C.UTF-8", "TZ": "UTC"}
        return subprocess.run(argv, capture_output=True, text=True, env=env, **kw)

    def start(self) -> None:
        initdb, pg_ctl = find_bin("initdb"), find_bin("pg_ctl")
        if initdb is None or pg_ctl is None:
            raise RuntimeError("PostgreSQL's initdb/pg_ctl are not installed")
        self.sock.mkdir()
        os.chmod(self.root, 0o755)
        if self.user is not None:
            for path in (self.root, self.sock):
                os.chown(path, self.user.pw_uid, self.user.pw_gid)
        done = self._run(
            [initdb, "-D", str(self.data), "-U", "octopoid", "--auth=trust", "-E", "UTF8",
             "--no-sync", "--locale=C.UTF-8"]
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed: {done.stderr[-800:]}")
        self.resume()

    def resume(self) -> None:
        """Start the server on its existing data (after ``start`` made it, or ``pause``)."""
        options = (
            f"-c listen_addresses='' -c unix_socket_directories='{self.sock}' "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
            "-c max_connections=200 -c shared_buffers=64MB"
        )
        done = self._run(
            [find_bin("pg_ctl"), "-D", str(self.data), "-o", options,
             "-l", str(self.root / "log"), "-w", "-t", "60", "start"]
        )  # fmt: skip
        if done.returncode != 0:
            log = (self.root / "log").read_text(errors="replace")[-800:]
            raise RuntimeError(f"pg_ctl start failed: {done.stderr[-400:]} {log}")

    def pause(self) -> None:
        """Stop the server, dropping every connection, and keep its data (an outage)."""
        self._run([find_bin("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"])

    def dsn(self, dbname: str = "postgres") -> str:
        return f"postgresql://octopoid@/{dbname}?host={self.sock}"

    def create_database(self, name: str) -> str:
        """A new empty database: its files copied from the template, which on PostgreSQL 15+
        is twice as fast as the default of writing them all through the WAL."""
        import psycopg

        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            copy = " STRATEGY = FILE_COPY" if conn.info.server_version >= 150000 else ""
            conn.execute(f'CREATE DATABASE "{name}"{copy}')
        return self.dsn(name)

    def drop_database(self, name: str) -> None:
        """Drop a test's database, ending what is still connected to it (this process's
        pools): the server's folder stays small, and removing it at the end quick."""
        import psycopg

        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')

    def stop(self) -> None:
        pg_ctl = find_bin("pg_ctl")
        if pg_ctl and self.data.exists():
            self._run([pg_ctl, "-D", str(self.data), "-m", "immediate", "-w", "stop"])
        shutil.rmtree(self.root, ignore_errors=True)
