"""A private Postgres primary and its streaming replica on this machine, for the read-replica
test (tests/replica/test_replica.py) and its benchmark (bench/replica.py).

`streaming_pair()` runs `initdb` in a new temporary folder (`wal_level=replica`, replication
allowed from 127.0.0.1, durability off: a throwaway cluster), starts it on a free port, creates
the database `rollscope`, clones the cluster with `pg_basebackup -R` (so the clone streams from
the primary as a hot standby) and starts the clone on another free port. On the way out both
servers are stopped (`pg_ctl stop -m immediate`) and the folder removed, whatever happened. As root
the servers run as `postgres` (`runuser`): Postgres refuses to run as root. About 5 s here.
"""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

from tests.helpers import _free_port

PROGRAMS = ("initdb", "pg_ctl", "pg_basebackup")
DB = "rollscope"


class ClusterError(RuntimeError):
    """A server program failed; the message has its output (and the server's log, at start)."""


def bin_dir() -> Path | None:
    """The folder of the Postgres server programs: Debian's newest /usr/lib/postgresql/*/bin, or
    the PATH's; None when they are not installed."""
    for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name), reverse=True):
        if all((Path(d) / p).exists() for p in PROGRAMS):
            return Path(d)
    found = [shutil.which(p) for p in PROGRAMS]
    return Path(found[0]).parent if all(found) else None


def _owner() -> str | None:
    return "postgres" if os.geteuid() == 0 else None


def unavailable() -> str | None:
    """Why no pair can be built here (a sentence), or None when it can."""
    if bin_dir() is None:
        return f"the Postgres server programs ({', '.join(PROGRAMS)}) are not installed: no replica to build"
    if _owner():
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root without a `postgres` user to run the Postgres servers as"
        if shutil.which("runuser") is None:
            return "running as root without `runuser` to start the Postgres servers as `postgres`"
    return None


class Cluster:
    """One Postgres server of the pair, listening on 127.0.0.1:`port`, run by `owner` (None: the
    current user)."""

    def __init__(self, programs: Path, data: Path, port: int, owner: str | None):
        self.bin, self.data, self.port, self.owner = programs, data, port, owner

    def run(self, program: str, *args: str, timeout: float = 60) -> None:
        cmd = [str(self.bin / program), *args]
        if self.owner:
            cmd = ["runuser", "-u", self.owner, "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise ClusterError(f"{program} failed: {done.stdout}{done.stderr}")

    def start(self) -> None:
        """Start the server and wait until it takes connections (a standby: read-only ones)."""
        log = Path(f"{self.data}.log")
        try:
            self.run("pg_ctl", "-D", str(self.data), "-l", str(log), "-w", "-t", "30", "start")
        except ClusterError as exc:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
            raise ClusterError(f"{exc}\nserver log:\n{tail}") from None

    def stop(self) -> None:
        """Stop the server at once, as a crash would (`-m immediate`)."""
        self.run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def url(self, db: str = DB) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{db}"

    def connect(self, db: str = DB) -> psycopg.Connection:
        return psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname=db, autocommit=True)

    def one(self, sql: str, *params):
        """The first column of the first row of `sql` (a new connection each time)."""
        with self.connect() as conn:
            return conn.execute(sql, params).fetchone()[0]


@contextmanager
def streaming_pair() -> Iterator[tuple[Cluster, Cluster]]:
    """(primary, replica), both running, the database `rollscope` empty (module docstring)."""
    why = unavailable()
    if why:
        raise ClusterError(why)
    programs, owner = bin_dir(), _owner()
    root = Path(tempfile.mkdtemp(prefix="rollscope-replica-"))  # not under pytest's root-only tmp folder
    if owner:
        shutil.chown(root, owner)
    primary = Cluster(programs, root / "primary", _free_port(), owner)
    replica = Cluster(programs, root / "replica", _free_port(), owner)
    started = []
    try:
        primary.run("initdb", "-D", str(primary.data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync")
        with open(primary.data / "postgresql.conf", "a") as conf:
            # a throwaway cluster: durability off (fsync) buys speed; replication on
            conf.write(f"listen_addresses = '127.0.0.1'\nport = {primary.port}\nunix_socket_directories = '{root}'\n"
                       "wal_level = replica\nmax_wal_senders = 4\nfsync = off\nfull_page_writes = off\n"
                       "shared_buffers = 16MB\nmax_connections = 40\n")
        with open(primary.data / "pg_hba.conf", "a") as hba:
            hba.write("host replication postgres 127.0.0.1/32 trust\n")
        primary.start()
        started.append(primary)
        with primary.connect("postgres") as conn:
            conn.execute(f"CREATE DATABASE {DB}")
        primary.run("pg_basebackup", "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres",
                    "-D", str(replica.data), "-R", "-X", "stream", "-c", "fast")
        with open(replica.data / "postgresql.conf", "a") as conf:
            # the replica asks the primary again soon after a restart (default: 5 s)
            conf.write(f"port = {replica.port}\nwal_retrieve_retry_interval = '200ms'\n")
        replica.start()
        started.append(replica)
        yield primary, replica
    finally:
        for cluster in reversed(started):
            try:
                cluster.stop()
            except (ClusterError, subprocess.SubprocessError):
                pass  # already stopped (a test stops the replica on purpose)
        shutil.rmtree(root, ignore_errors=True)
