"""jobclaims' counts in prometheus-client's multiprocess directory: one file
per metric type that every process adds to, not files per process.

prometheus-client's multiprocess mode gives each process files of its own
(``counter_<pid>.db``), which stay after it exits so that its counts are
not lost, and asks for the directory to be emptied as the server restarts.
A scheduler starts a process per fire, so the directory grew by two files
a job run (17,000 a day at a job every 10 seconds), and every scrape read
them all; emptying it hid the counts of the schedulers still running, whose
files were gone from the directory while they wrote on.

So with ``PROMETHEUS_MULTIPROC_DIR`` set, no jobclaims process writes a file
of its own: each event is added, under an exclusive lock on the file, to
``counter_jobclaims.db`` and ``histogram_jobclaims.db`` there, in the format
prometheus-client's ``MultiProcessCollector`` reads (a header of the bytes
used, then entries of a key, padded, and a value), so the metrics view adds
them up with the processes' own files of the project's own metrics. The
directory holds those two files however many processes come and go; they
outlive every process and restart, as counters must; and a process that
finds its file gone or replaced (the directory was emptied) adds to the new
one, so nothing it counts is hidden.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import struct
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import BinaryIO

#: A new file's size; it doubles when it fills (prometheus-client's own).
_INITIAL_SIZE = 1 << 16
#: The header: the bytes used, an int, then padding to 8.
_HEADER = 8
_USED = struct.Struct("i")
#: An entry's value and timestamp, after its key.
_VALUE = struct.Struct("dd")


def file_name(kind: str) -> str:
    """The file ``kind``'s metrics ("counter" or "histogram") are added to."""
    # prometheus-client reads the type from the name's first word.
    return f"{kind}_jobclaims.db"


def add(directory: str, amounts: Mapping[str, Iterable[tuple[str, float]]]) -> None:
    """Add each amount to its key's value, in the file of each kind in
    ``directory``; keys as ``prometheus_client.mmap_dict.mmap_key`` makes them."""
    for kind, added in amounts.items():
        _shared(os.path.join(directory, file_name(kind))).add(added)


_files: dict[str, _SharedFile] = {}
_files_lock = threading.Lock()


def _shared(path: str) -> _SharedFile:
    with _files_lock:
        if path not in _files:
            _files[path] = _SharedFile(path)
        return _files[path]


class _SharedFile:
    """One process's handle on a file every process adds to.

    The mapping and the keys' positions are kept from one event to the next:
    under the lock, only the entries other processes appended since are read.
    """

    def __init__(self, path: str):
        self.path = path
        self.lock = threading.Lock()
        self.file: BinaryIO | None = None
        self.descriptor = -1
        self.pid = 0
        self.map: mmap.mmap | None = None
        #: Where each key's value is, and how far the entries were read.
        self.positions: dict[str, int] = {}
        self.read_to = _HEADER

    def add(self, added: Iterable[tuple[str, float]]) -> None:
        with self.lock:
            self._lock_current()
            try:
                self._catch_up()
                for key, amount in added:
                    position = self.positions.get(key)
                    if position is None:
                        position = self._append(key)
                    assert self.map is not None
                    value, _timestamp = _VALUE.unpack_from(self.map, position)
                    # One slice assignment, as prometheus-client writes: a
                    # reader never sees the value half written.
                    self.map[position : position + _VALUE.size] = _VALUE.pack(value + amount, 0.0)
            finally:
                fcntl.flock(self.descriptor, fcntl.LOCK_UN)

    def _lock_current(self) -> None:
        """Hold the lock on the file now at ``path``: opened again after a
        fork (a lock is the open file's, which parent and child share) and
        when the file was deleted or replaced since it was opened."""
        while True:
            if self.file is None or self.pid != os.getpid():
                self._open()
            fcntl.flock(self.descriptor, fcntl.LOCK_EX)
            mine = os.fstat(self.descriptor)
            try:
                current = os.stat(self.path)
            except FileNotFoundError:
                current = None
            if current is not None and (current.st_dev, current.st_ino) == (
                mine.st_dev,
                mine.st_ino,
            ):
                return
            fcntl.flock(self.descriptor, fcntl.LOCK_UN)
            self._close()

    def _open(self) -> None:
        self._close()
        Path(self.path).touch(exist_ok=True)
        self.file = open(self.path, "r+b")  # noqa: SIM115  # Kept open between events.
        self.descriptor = self.file.fileno()
        self.pid = os.getpid()

    def _close(self) -> None:
        if self.map is not None:
            self.map.close()
        if self.file is not None:
            self.file.close()
        self.file, self.map, self.descriptor = None, None, -1
        self.positions, self.read_to = {}, _HEADER

    def _catch_up(self) -> None:
        """Map the file as it is now, and index the entries appended since."""
        size = os.fstat(self.descriptor).st_size
        if size == 0:  # A new file: the header says nothing is used yet.
            os.ftruncate(self.descriptor, _INITIAL_SIZE)
            size = _INITIAL_SIZE
        if self.map is None or len(self.map) != size:
            if self.map is not None:
                self.map.close()
            self.map = mmap.mmap(self.descriptor, size)
        used = _USED.unpack_from(self.map, 0)[0] or _HEADER
        position = self.read_to
        while position < used:
            (length,) = _USED.unpack_from(self.map, position)
            key = self.map[position + 4 : position + 4 + length].decode()
            position += 4 + length + (8 - (length + 4) % 8)
            self.positions[key] = position
            position += _VALUE.size
        self.read_to = used

    def _append(self, key: str) -> int:
        """Append ``key`` with the value 0, and say where its value is."""
        encoded = key.encode()
        padded = encoded + b" " * (8 - (len(encoded) + 4) % 8)
        entry = struct.pack(f"i{len(padded)}sdd", len(encoded), padded, 0.0, 0.0)
        start = self.read_to
        assert self.map is not None
        if start + len(entry) > len(self.map):
            size = len(self.map)
            while start + len(entry) > size:
                size *= 2
            os.ftruncate(self.descriptor, size)
            self.map.close()
            self.map = mmap.mmap(self.descriptor, size)
        self.map[start : start + len(entry)] = entry
        self.read_to = start + len(entry)
        # The entry first, then the header that makes readers read it.
        self.map[0 : _USED.size] = _USED.pack(self.read_to)
        position = self.read_to - _VALUE.size
        self.positions[key] = position
        return position
