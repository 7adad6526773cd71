"""A PostgreSQL server of a test's own, from the machine's binaries, on a
free port: a test may stop it, or pause every one of its processes, as an
outage does, without touching the servers on 5432 and 3306 that other
tests share (scripts/start-pg-replica runs its clusters the same way)."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from tests.support.helpers import unavailable


def _binaries() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda path: int(path.split("/")[4]))
    if not found:
        unavailable("PostgreSQL's server binaries are missing (apt-get install postgresql)")
    return Path(found[-1])


class OwnPostgres:
    """A throwaway server; ``url`` names its ``postgres`` database."""

    def __init__(self, port: int):
        self.port = port
        self.bin = _binaries()
        self.directory = Path(tempfile.mkdtemp(prefix="jobclaims-own-postgres-"))
        self.data = self.directory / "data"
        self.url = f"postgres://postgres@127.0.0.1:{port}/postgres"
        if os.geteuid() == 0:
            # PostgreSQL will not run as root: as its own user, as Debian runs it.
            shutil.chown(self.directory, "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "--no-sync")
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(
                f"port = {port}\n"
                "listen_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.directory}'\n"
                "fsync = off\nfull_page_writes = off\nshared_buffers = 16MB\n"
            )

    def start(self) -> None:
        self._run("pg_ctl", "start", "-w", "-D", str(self.data), "-l", str(self.directory / "log"))

    def stop(self) -> None:
        """Stop it, as an outage or an operator does: connections are refused."""
        self._run("pg_ctl", "stop", "-m", "fast", "-w", "-D", str(self.data))

    def pause(self) -> None:
        """Freeze every process of the server (SIGSTOP): it keeps its port, and
        the kernel completes connections to it, but nothing answers."""
        for pid in self._processes():
            os.kill(pid, signal.SIGSTOP)

    def resume(self) -> None:
        for pid in self._processes():
            os.kill(pid, signal.SIGCONT)

    def remove(self) -> None:
        """Stop it at once, whatever its state, and delete its data."""
        self.resume()
        subprocess.run(
            [
                *self._as_owner(),
                str(self.bin / "pg_ctl"),
                "stop",
                "-m",
                "immediate",
                "-D",
                str(self.data),
            ],
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(self.directory, ignore_errors=True)

    def _processes(self) -> list[int]:
        """The postmaster, then its children."""
        try:
            postmaster = int((self.data / "postmaster.pid").read_text().split()[0])
        except FileNotFoundError:
            return []
        children = []
        for stat in glob.glob("/proc/[0-9]*/stat"):
            try:
                fields = Path(stat).read_text().rpartition(")")[2].split()
            except OSError:
                continue  # Ended meanwhile.
            if int(fields[1]) == postmaster:
                children.append(int(stat.split("/")[2]))
        return [postmaster, *children]

    def _as_owner(self) -> list[str]:
        return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    def _run(self, program: str, *arguments: str) -> None:
        done = subprocess.run(
            [*self._as_owner(), str(self.bin / program), *arguments],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode:
            raise RuntimeError(f"{program} failed: {done.stdout}{done.stderr}")
