"""What a run printed: the end of its stdout and stderr, kept with its run.

A job's output says what it did (rows processed, a warning) and, when it
failed, what led up to the traceback; without this it is in the log of
whichever host ran it. A ``JobCommand`` tees what it prints into a ``Tail``,
a ring of its last ``JOBCLAIMS["OUTPUT_KEPT"]`` bytes, which its release
writes into the run's ``output`` column in the statement that records the
outcome: no statement more, and what passes through still reaches the
terminal, the scheduler's log or cron's mail as before.

Two ways in, by whose the process is:

- a command started from the command line (a crontab line, a scheduler's
  child, a shell) owns its process: ``capturing_process()`` tees the file
  descriptors 1 and 2 themselves, so ``print()``, the command's
  ``self.stdout``, logging handlers and the job's own subprocesses are all
  kept, each write where it happened;
- a command called in another program's process (``call_command()``: a
  test, the admin's Run now, ``jobclaims_run``) shares that process with
  other threads: ``teeing()`` keeps what the command writes through its own
  ``self.stdout`` and ``self.stderr`` only.

A process killed outright (SIGKILL, the OOM killer) keeps nothing: its
output dies with it, and the column stays NULL, as for a run through
``claim()``, ``@claimed`` or a task, which print into a process that is not
theirs alone.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import sys
import threading
from collections import deque
from collections.abc import Iterator
from typing import IO, Any

#: How long, at the end of a run, the copy waits for what the job's own
#: subprocesses (which may outlive it and keep the pipe open) still write.
DRAIN = 0.5
#: The most one read from the pipe takes.
_CHUNK = 65536


class Tail:
    """The last ``size`` bytes written to it, and how many were dropped before."""

    def __init__(self, size: int):
        self.size = size
        self._chunks: deque[bytes] = deque()
        self._kept = 0
        self.dropped = 0
        self._lock = threading.Lock()

    def write(self, data: bytes) -> None:
        if not data or self.size <= 0:
            self.dropped += len(data)
            return
        with self._lock:
            if len(data) >= self.size:
                self.dropped += self._kept + len(data) - self.size
                self._chunks.clear()
                data = data[-self.size :]
                self._kept = 0
            self._chunks.append(data)
            self._kept += len(data)
            while self._kept > self.size:
                first = self._chunks[0]
                extra = self._kept - self.size
                if len(first) <= extra:
                    self._chunks.popleft()
                    self._kept -= len(first)
                    self.dropped += len(first)
                else:
                    self._chunks[0] = first[extra:]
                    self._kept -= extra
                    self.dropped += extra

    def text(self) -> str:
        """What is kept, as text a database column takes.

        Decoded as UTF-8 with what does not decode replaced, from the first
        whole character (the cut may fall inside one); NUL, which PostgreSQL
        refuses in text, is replaced too. When bytes were dropped, a first
        line says how many.
        """
        with self._lock:
            data = b"".join(self._chunks)
            dropped = self.dropped
        if dropped:
            # Skip the continuation bytes of a character cut in two.
            start = 0
            while start < min(len(data), 3) and data[start] & 0xC0 == 0x80:
                start += 1
            dropped += start
            data = data[start:]
        text = data.decode("utf-8", errors="replace").replace("\x00", "\N{REPLACEMENT CHARACTER}")
        if dropped:
            return f"[{dropped:,} earlier bytes not kept]\n{text}"
        return text


@contextlib.contextmanager
def capturing_process(tail: Tail) -> Iterator[None]:
    """Tee this process's stdout and stderr (file descriptors 1 and 2) into
    ``tail`` while the block runs; what is written still goes where it went.

    Each descriptor is replaced by a pipe whose other end a thread reads,
    copying each chunk to the descriptor's old target and into ``tail``.
    Python's buffers are flushed on the way in and out, so that nothing
    written before lands in the tail and nothing written inside misses it.
    A descriptor that is closed is left alone.
    """
    if tail.size <= 0:
        yield
        return
    _flush()
    # Line by line, as on a terminal: written to a pipe or a file, print()'s
    # block buffer would land its lines after later writes to stderr, and
    # the kept output would not read in the order the job printed it.
    line_buffered = _line_buffering(sys.stdout, True)
    copies: dict[int, int] = {}  # A pipe's read end: the saved target of its descriptor.
    saved: dict[int, int] = {}  # Descriptor: its saved target.
    for fd in (1, 2):
        try:
            target = os.dup(fd)
        except OSError:
            continue  # Closed: nothing is written there.
        read, write = os.pipe()
        os.dup2(write, fd)
        os.close(write)
        saved[fd], copies[read] = target, target
    copier = threading.Thread(
        target=_copy, args=(copies, tail), name="jobclaims output", daemon=True
    )
    copier.start()
    try:
        yield
    finally:
        _flush()
        _line_buffering(sys.stdout, line_buffered)
        for fd, target in saved.items():
            # The pipe's write end closes here, unless a subprocess of the
            # job still holds it: the copy then waits at most DRAIN for it.
            os.dup2(target, fd)
        copier.join(DRAIN)
        if not copier.is_alive():
            for target in saved.values():
                os.close(target)


def _copy(copies: dict[int, int], tail: Tail) -> None:
    """Copy each pipe's chunks to its target and into ``tail``, until every
    pipe is closed. A target that refuses a write (a closed terminal, a
    reader gone) stops getting copies; the tail still gets them."""
    broken: set[int] = set()
    with selectors.DefaultSelector() as selector:
        for read in copies:
            selector.register(read, selectors.EVENT_READ)
        while selector.get_map():
            for key, _events in selector.select():
                read = key.fd
                chunk = os.read(read, _CHUNK)
                if not chunk:
                    selector.unregister(read)
                    os.close(read)
                    continue
                tail.write(chunk)
                target = copies[read]
                if target in broken:
                    continue
                try:
                    _write_all(target, chunk)
                except OSError:
                    broken.add(target)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _line_buffering(stream: Any, on: bool) -> bool:
    """Set ``stream``'s line buffering, if it has one; say what it was."""
    was = bool(getattr(stream, "line_buffering", on))
    with contextlib.suppress(Exception):
        stream.reconfigure(line_buffering=on)
    return was


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


class _Tee:
    """A text stream that writes to ``stream`` and, encoded, into ``tail``."""

    def __init__(self, stream: IO[str], tail: Tail):
        self._stream = stream
        self._tail = tail

    def write(self, text: str) -> int:
        self._tail.write(text.encode("utf-8", errors="replace"))
        return self._stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def teeing(wrappers: list[Any], tail: Tail) -> Iterator[None]:
    """Tee what is written through each of Django's ``OutputWrapper``\\s
    (a command's ``self.stdout``, ``self.stderr``) into ``tail`` while the block runs."""
    if tail.size <= 0:
        yield
        return
    originals = [wrapper._out for wrapper in wrappers]
    for wrapper, original in zip(wrappers, originals, strict=True):
        wrapper._out = _Tee(original, tail)
    try:
        yield
    finally:
        for wrapper, original in zip(wrappers, originals, strict=True):
            wrapper._out = original
