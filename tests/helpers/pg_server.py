"""A throwaway PostgreSQL server for the tests: initdb in a temporary directory, started on a
free port with pg_ctl, a database per test cloned from a migrated template, removed at the end.

Found through $AUDITOR_PG_BIN, else `pg_config --bindir`, else Debian's versioned directories.
"""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

TEMPLATE = "auditor_template"


def bindir() -> Path | None:
    """The directory holding initdb and pg_ctl, or None when PostgreSQL is not installed."""
    candidates = []
    if os.environ.get("AUDITOR_PG_BIN"):
        candidates.append(os.environ["AUDITOR_PG_BIN"])
    if shutil.which("pg_config"):
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=False)
        candidates.append(out.stdout.strip())
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    candidates.append(os.path.dirname(shutil.which("initdb") or ""))
    for found in candidates:
        if found and (Path(found) / "initdb").exists() and (Path(found) / "pg_ctl").exists():
            return Path(found)
    return None


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """One running server; `new_database()` hands out URLs of fresh, migrated databases."""

    def __init__(self, bin_dir: Path):
        self.bin = bin_dir
        self.dir = Path(tempfile.mkdtemp(prefix="auditor-pg-"))
        self.data = self.dir / "data"
        self.port = _free_port()
        self._names = itertools.count(1)
        self._admin = None
        self._as = {}
        if os.geteuid() == 0:  # postgres refuses to run as root: run it as an ordinary user
            account = pwd.getpwnam("postgres") if _has_user("postgres") else pwd.getpwnam("nobody")
            os.chown(self.dir, account.pw_uid, account.pw_gid)
            self._as = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}
        self._run(
            [self.bin / "initdb", "-D", self.data, "-A", "trust", "--no-sync", "-U", "postgres"]
        )
        opts = (
            f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        self._run(
            [
                self.bin / "pg_ctl",
                "-D",
                self.data,
                "-l",
                self.dir / "log",
                "-o",
                opts,
                "-w",
                "start",
            ]
        )
        self.url_base = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/"

    def _run(self, cmd) -> None:
        done = subprocess.run(
            [str(c) for c in cmd],
            check=False,
            capture_output=True,
            text=True,
            cwd=self.dir,
            **self._as,
        )
        if done.returncode:
            log = self.dir / "log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"{cmd[0]} failed: {done.stderr.strip() or done.stdout}\n{tail}")

    def admin(self):
        import psycopg

        if self._admin is None or self._admin.closed:
            self._admin = psycopg.connect(
                f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres", autocommit=True
            )
        return self._admin

    def make_template(self) -> None:
        """Migrate the database every test's database is cloned from."""
        from auditor.store.db import open_db

        self.admin().execute(f"CREATE DATABASE {TEMPLATE}")
        engine = open_db(self.url_base + TEMPLATE)
        engine.dispose()

    def new_database(self, blank: bool = False) -> str:
        """A new database: migrated to head, or with `blank`, empty (never migrated)."""
        name = f"t{next(self._names)}"
        self.admin().execute(
            f"CREATE DATABASE {name} TEMPLATE {'template0' if blank else TEMPLATE}"
        )
        return self.url_base + name

    def drop_database(self, url: str) -> None:
        name = url.rsplit("/", 1)[1]
        self.admin().execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def restart(self) -> None:
        """Restart the server as an operator would (`pg_ctl restart -m fast`): every open
        connection is ended (AdminShutdown) and the server is back on the same port."""
        if self._admin is not None:
            self._admin.close()
        self._run(
            [self.bin / "pg_ctl", "-D", self.data, "-l", self.dir / "log", "-m", "fast", "-w"]
            + ["restart"]
        )

    def stop(self) -> None:
        if self._admin is not None:
            self._admin.close()
        subprocess.run(
            [str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"],
            capture_output=True,
            check=False,
            cwd=self.dir,
            **self._as,
        )
        shutil.rmtree(self.dir, ignore_errors=True)
