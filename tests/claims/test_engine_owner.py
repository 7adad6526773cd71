"""The owner a claim records: one per process, forked children included."""

from __future__ import annotations

import os

from jobclaims.claims.engine import process_owner


def test_a_forked_child_draws_an_owner_of_its_own():
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # The child: report its owner, and leave without cleanup.
        os.write(write, process_owner().encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read) as pipe:
        child = pipe.read()
    parent = process_owner()
    assert child.split(":")[1] == str(pid)
    assert child.split(":")[2] != parent.split(":")[2]


def test_the_owner_stays_the_same_within_a_process():
    assert process_owner() == process_owner()
