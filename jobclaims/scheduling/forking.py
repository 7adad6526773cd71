"""The scheduler's side of the fork server (``jobclaims.scheduling.fork_server``).

``ForkServer.started()`` starts the server; ``ForkServer.start()`` asks it
to fork a job, and returns a ``ForkedProcess``, which the scheduler watches
as it watches a ``subprocess.Popen``: ``pid``, ``poll()``, ``terminate()``,
``kill()``, ``send_signal()``. Its exit status comes from the server, the
job's parent; its signals go by a pidfd, so that a signal never reaches
another process that took the pid of one that ended.

Forked starts need ``os.pidfd_open()`` (Linux 5.3 and later); elsewhere,
and for a job that sets ``fresh_interpreter``, the scheduler starts a new
interpreter per fire, as before.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from jobclaims.scheduling.fork_server import MESSAGE_SIZE

#: How long the server may take to load Django and the jobs, and to answer.
ANSWER_TIMEOUT = 60.0
#: How long a closed server has to exit before it is killed.
EXIT_TIMEOUT = 5.0
#: The exit status reported for a forked job whose server died before it:
#: its real status died with its parent.
STATUS_LOST = 255


class ForkServerGone(OSError):
    """The fork server did not start, or stopped answering."""


def can_fork() -> bool:
    """Whether this platform lets the scheduler signal a process it did not
    start, exactly: by a pidfd (Linux 5.3 and later)."""
    if not hasattr(os, "pidfd_open") or not hasattr(signal, "pidfd_send_signal"):
        return False
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:  # An old kernel, or a sandbox that forbids it.
        return False
    return True


class ForkedProcess:
    """A job the fork server forked, watched like a ``subprocess.Popen``."""

    def __init__(self, server: ForkServer, pid: int, pidfd: int):
        self.server = server
        self.pid = pid
        self.pidfd: int | None = pidfd
        self.returncode: int | None = None
        #: The CPU seconds it used, as its parent, the server, measured.
        self.cpu: float | None = None
        #: Whether its exit status was lost with its server (``STATUS_LOST``).
        self.status_lost = False

    def poll(self) -> int | None:
        if self.returncode is None:
            self.server.read_exits()
        return self.returncode

    def ended(self, code: int, cpu: float | None) -> None:
        """Record how it ended; its pidfd is not needed any more."""
        self.returncode, self.cpu = code, cpu
        # Forgotten before it is closed: a signal handler that runs in
        # between must not send to a closed, or reused, descriptor.
        pidfd, self.pidfd = self.pidfd, None
        if pidfd is not None:
            os.close(pidfd)

    def is_gone(self) -> bool:
        """Whether it ended, by its pidfd: for when its server is gone."""
        pidfd = self.pidfd
        return pidfd is None or bool(select.select([pidfd], [], [], 0)[0])

    def send_signal(self, signum: int) -> None:
        pidfd = self.pidfd
        if pidfd is None:
            return
        # One that has ended has its exit on its way.
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(pidfd, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ForkServer:
    """The fork server's process, and the socket the scheduler talks to it by."""

    def __init__(self, process: subprocess.Popen[bytes], channel: socket.socket):
        self.process = process
        self.channel = channel
        self.started_at = time.monotonic()
        self.ready = False
        self.gone = False
        self.forked: dict[int, ForkedProcess] = {}
        self.requests = 0
        # A signal handler may poll while the loop reads: it reads nothing then.
        self.reading = threading.Lock()

    @classmethod
    def started(cls, commands: list[str], env: dict[str, str]) -> ForkServer:
        """Start a server that loads ``commands``' modules; it answers
        ``start()`` once it has loaded them."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    f"{__package__}.fork_server",
                    str(theirs.fileno()),
                    *commands,
                ],
                stdin=subprocess.DEVNULL,
                env=env,
                pass_fds=[theirs.fileno()],
                # Signals sent to the scheduler's group are the scheduler's.
                start_new_session=True,
            )
        finally:
            theirs.close()
        return cls(process, ours)

    def wait_ready(self, timeout: float) -> bool:
        """Whether the server has loaded the jobs, waiting for it up to
        ``timeout`` seconds. Raises ``ForkServerGone`` if it stopped, or has
        not loaded them ``ANSWER_TIMEOUT`` seconds after it started."""
        given_up = self.started_at + ANSWER_TIMEOUT
        deadline = min(time.monotonic() + max(timeout, 0), given_up)
        with self.reading:
            while not self.ready and (left := deadline - time.monotonic()) > 0:
                self._take(timeout=left)
        if not self.ready and time.monotonic() >= given_up:
            raise self._lost(f"did not load the jobs within {ANSWER_TIMEOUT:.0f} s")
        return self.ready

    def start(self, argv: list[str], env: dict[str, str]) -> ForkedProcess:
        """Fork a job that runs the command line ``argv`` (a command and its
        arguments) with ``env``. Raises ``ForkServerGone`` if the server
        does not answer, ``OSError`` if it could not fork."""
        self.wait_ready(ANSWER_TIMEOUT)
        self.requests += 1
        request = {"id": self.requests, "argv": argv, "env": env}
        try:
            self.channel.sendall(json.dumps(request).encode())
        except OSError as error:
            raise self._lost(f"could not be asked: {error}") from error
        answer, fds = self._read_until(lambda message: message.get("id") == request["id"], "fork")
        if "error" in answer:
            raise OSError(f"the fork server could not fork: {answer['error']}")
        if len(fds) != 2:  # Dropped by the kernel: this process has no room for them.
            for fd in fds:
                os.close(fd)
            raise OSError(
                errno.EMFILE, "could not take in the forked job's descriptors (it runs nothing)"
            )
        pidfd, announce = fds
        forked = ForkedProcess(self, int(answer["pid"]), pidfd)
        self.forked[forked.pid] = forked
        # Known now: the job may run (one killed meanwhile has closed its end).
        with contextlib.suppress(BrokenPipeError):
            os.write(announce, b"!")
        os.close(announce)
        return forked

    def read_exits(self) -> None:
        """Take in every exit the server has sent, never waiting; once it
        is gone, the end of each of its jobs (``_settle_orphans()``)."""
        if not self.gone and self.reading.acquire(blocking=False):
            try:
                while self._take(timeout=0) is not None:
                    pass
            except ForkServerGone:
                pass  # Its jobs are settled as orphans from now on.
            finally:
                self.reading.release()
        self._settle_orphans()

    def close(self) -> None:
        """Let the server go (its jobs have ended), and wait for it to exit."""
        self.gone = True
        self.channel.close()
        try:
            self.process.wait(EXIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def _read_until(
        self, wanted: Callable[[dict[str, Any]], bool], doing: str
    ) -> tuple[dict[str, Any], list[int]]:
        """Read until the message ``wanted`` picks, taking in exits on the way."""
        deadline = time.monotonic() + ANSWER_TIMEOUT
        with self.reading:
            while (left := deadline - time.monotonic()) > 0:
                taken = self._take(timeout=left)
                if taken is not None and wanted(taken[0]):
                    return taken
        raise self._lost(f"did not {doing} within {ANSWER_TIMEOUT:.0f} s")

    def _take(self, timeout: float) -> tuple[dict[str, Any], list[int]] | None:
        """One message, if one comes within ``timeout``; an exit is recorded
        as it is read."""
        if self.gone:
            raise self._lost("has stopped")
        try:
            if not select.select([self.channel], [], [], timeout)[0]:
                return None
            data, fds, _, _ = socket.recv_fds(self.channel, MESSAGE_SIZE, 2)
        except OSError as error:
            raise self._lost(f"could not be read: {error}") from error
        if not data:
            raise self._lost("has stopped")
        message: dict[str, Any] = json.loads(data)
        if "ready" in message:
            self.ready = True
        if (pid := message.get("exited")) is not None and (forked := self.forked.pop(pid, None)):
            forked.ended(message["code"], message["cpu"])
        return message, fds

    def _lost(self, why: str) -> ForkServerGone:
        self.gone = True
        # An answer left unread closes with it: its job, never announced, exits.
        self.channel.close()
        self.process.poll()  # Reaped, if it has exited: no zombie while the scheduler runs.
        self._settle_orphans()
        return ForkServerGone(f"The fork server (pid {self.process.pid}) {why}")

    def _settle_orphans(self) -> None:
        """The jobs of a server that is gone: each that has ended ends with
        ``STATUS_LOST``, its real status lost with the server."""
        if not self.gone:
            return
        for pid, forked in list(self.forked.items()):
            if forked.is_gone():
                del self.forked[pid]
                forked.status_lost = True
                forked.ended(STATUS_LOST, None)
