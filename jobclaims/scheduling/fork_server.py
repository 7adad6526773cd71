"""The fork server: Django loaded once, each won fire's job forked from it.

A new interpreter per fire imports Python, Django, the project and the job
before the job's first line: about half a second of CPU, which 200 fires due
at one instant pay 200 times over on a host's few cores. The scheduler
instead starts this process once (``jobclaims.scheduling.forking``), with
its settings, databases and every scheduled command's module loaded, and
asks it to fork each job: the child starts where a fresh interpreter would
have just parsed its command line.

Why a process of its own, and not a fork of the scheduler: the scheduler
runs threads (history's keeper, check-ins, a database driver's own), and a
fork copies whatever lock another thread held at that instant, held
forever in the child. This process runs one thread, holds no database
connection, and does nothing but fork and reap:

- ``start``: it forks; the child leaves the server's loop, takes its own
  session, environment and arguments, and runs the command as
  ``django-admin`` would (``main()``). The server sends the child's pid
  back with a pidfd of it, by which the scheduler signals that very process
  and no other, even once its pid is reused, and the write end of a pipe
  the child waits on: it runs nothing until the scheduler writes to it,
  and exits if that end closes unwritten, so that a fire the scheduler
  lost track of (it starts it afresh) has no second process. Stop signals
  sent to it in between are held back, not ignored as by the server.
- it reaps each child that ends and sends its exit status, and the CPU it
  used, back to the scheduler: only the parent of a process can have them.

It ignores SIGTERM and SIGINT, which are the scheduler's to pass on (a
stop sent to every process of the host's group must not cost the statuses
of the jobs that heed it), and ends when the scheduler's end of the socket
closes.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import select
import signal
import socket
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django.db.utils import ConnectionHandler

#: The largest message either side sends: a command line, or an exit.
MESSAGE_SIZE = 1 << 20
#: The stop signals, which the server ignores and its children heed.
STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}
#: The exit of a child the scheduler did not learn of: it ran nothing.
UNANNOUNCED = 1


class Server:
    """Forks the scheduler's jobs on request, and reports how each ended."""

    def __init__(self, channel: socket.socket, handlers: dict[int, Any]):
        self.channel = channel
        #: The signal handlers this process started with, which a job gets
        #: back: those of a fresh interpreter (and of a coverage tool's).
        self.handlers = handlers
        self.live: set[int] = set()
        # SIGCHLD wakes the loop's select() through this pipe.
        self.wakeup_read, self.wakeup_write = os.pipe()
        os.set_blocking(self.wakeup_read, False)
        os.set_blocking(self.wakeup_write, False)

    def serve(self) -> list[str] | None:
        """Serve until the scheduler goes away (None), or, in a forked
        child, return the command line the child runs."""
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        signal.set_wakeup_fd(self.wakeup_write)
        try:
            self._send({"ready": os.getpid()})
        except (BrokenPipeError, ConnectionResetError):
            # The scheduler stopped while this process loaded the jobs.
            return None
        while True:
            readable, _, _ = select.select([self.channel, self.wakeup_read], [], [])
            if self.wakeup_read in readable:
                _drain(self.wakeup_read)
            self._reap()
            if self.channel not in readable:
                continue
            try:
                request = self.channel.recv(MESSAGE_SIZE)
            except ConnectionResetError:
                # The scheduler closed its end with our "ready" unread (it
                # stopped before its first forked start): gone all the same.
                return None
            if not request:
                return None
            if (argv := self._start(json.loads(request))) is not None:
                return argv

    def _start(self, request: dict[str, object]) -> list[str] | None:
        """Fork the requested job: in the child, its command line; here, None."""
        # Held back from fork to the child's own handlers: a SIGTERM sent
        # to it meanwhile is not ignored, as it would be by this process's.
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        announced, announce = os.pipe()
        try:
            pid = os.fork()
        except OSError as error:
            os.close(announced)
            os.close(announce)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
            self._send({"id": request["id"], "error": str(error)})
            return None
        if pid == 0:
            os.close(announce)
            self._become_job(request, announced)
            return [str(each) for each in request["argv"]]  # type: ignore[attr-defined]
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        os.close(announced)
        # The child cannot be reaped before this: this loop is its only reaper.
        pidfd = os.pidfd_open(pid)
        try:
            # ``announce`` goes to the scheduler alone: the child runs only
            # once the scheduler has it, so only if it learned of the child.
            self._send({"id": request["id"], "pid": pid}, [pidfd, announce])
        finally:
            os.close(pidfd)
            os.close(announce)
        self.live.add(pid)
        return None

    def _become_job(self, request: dict[str, object], announced: int) -> None:
        """In the forked child: wait until the scheduler knows of this
        process, drop all that is the server's, and take up what a process
        the scheduler started gets (``subprocess.Popen`` with
        ``start_new_session``, stdin from /dev/null, its environment).

        The scheduler writes to ``announced`` once it has this process's
        pid and pidfd. If it never does (the server died before it sent
        them, the scheduler could not take them in, or it is gone), the
        pipe closes unwritten and this process exits, running nothing: the
        scheduler starts the fire afresh, or records it not started.
        """
        signal.set_wakeup_fd(-1)
        for signum, handler in self.handlers.items():
            if handler is not None:  # None: not set from Python, nothing to give back.
                signal.signal(signum, handler)
        self.channel.close()
        os.close(self.wakeup_read)
        os.close(self.wakeup_write)
        if not os.read(announced, 1):
            os._exit(UNANNOUNCED)
        os.close(announced)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        os.environ.clear()
        os.environ.update(request["env"])  # type: ignore[call-overload]

    def _reap(self) -> None:
        """Send the exit of every child that ended since the last look."""
        while self.live:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.live.discard(pid)
            cpu = usage.ru_utime + usage.ru_stime
            self._send({"exited": pid, "code": os.waitstatus_to_exitcode(status), "cpu": cpu})

    def _send(self, message: dict[str, object], fds: list[int] | None = None) -> None:
        socket.send_fds(self.channel, [json.dumps(message).encode()], fds or [])


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass


def _load(commands: list[str]) -> None:
    """Set Django up on the scheduler's databases, and import each command's
    module, so that a child starts with them loaded. A command that fails to
    import here fails the same way in its child, which records it."""
    import django
    from django.core.management import get_commands, load_command_class
    from django.db import connections

    from jobclaims.running.children import use_parents_databases

    django.setup()
    use_parents_databases()
    apps = get_commands()
    for name in commands:
        try:
            load_command_class(apps[name], name)
        except Exception:  # Reported by its own start, in its child.
            continue
    _warm_up(connections)
    # A connection opened while loading is no child's to share.
    connections.close_all()
    # What is loaded now lives as long as the server: the collector leaves
    # it out, so that a child's collections do not write to, and so copy,
    # every page of it.
    gc.freeze()


def _warm_up(connections: ConnectionHandler) -> None:
    """Connect to the claims database once and let go: what the driver and
    Django's backend set up at a process's first connection (its adapters,
    its type loaders) is then the children's already, a few milliseconds
    of each start. A database that does not answer now is the jobs' to meet."""
    from django.db import DatabaseError

    from jobclaims.conf import jobclaims_settings
    from jobclaims.models import JobRun

    with contextlib.suppress(DatabaseError):
        connections[jobclaims_settings.claims_database(JobRun)].ensure_connection()


def main(argv: list[str]) -> None:
    """``python -m jobclaims.scheduling.fork_server FD COMMAND...``: the
    server's exit status is 0; a forked job's is the command's own."""
    handlers: dict[int, Any] = {
        signum: signal.signal(signum, signal.SIG_IGN) for signum in STOP_SIGNALS
    }
    handlers[signal.SIGCHLD] = signal.getsignal(signal.SIGCHLD)
    channel = socket.socket(fileno=int(argv[0]))
    _load(argv[1:])
    job = Server(channel, handlers).serve()
    if job is not None:
        _run(job)


def _run(job: list[str]) -> None:
    """In a forked child: run the command line ``job`` as ``django-admin``
    would, but for setting Django up, which the server did: its logging and
    apps are the child's already."""
    import django
    from django.core.management import get_commands, load_command_class

    # What a job reading its own command line finds: ``python -m django``'s.
    sys.argv = [os.path.join(os.path.dirname(django.__file__), "__main__.py"), *job]
    command = load_command_class(get_commands()[job[0]], job[0])
    command.run_from_argv(["django-admin", *job])


if __name__ == "__main__":
    main(sys.argv[1:])
