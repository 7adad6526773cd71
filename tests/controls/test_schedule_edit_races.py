"""Stored schedules edited by several processes at once, on the database at hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from jobclaims import add_schedule
from jobclaims.models import StoredSchedule
from jobclaims.testing import child_environment

pytestmark = pytest.mark.django_db(transaction=True)

EDITORS = 3


def editors(mode: str, count: int) -> list[dict[str, Any]]:
    """How the edits of ``EDITORS`` processes ended, each making ``count``
    edits of the kind ``mode`` names, all released at once."""
    env = {**os.environ, **child_environment()}
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.support.schedule_editor", mode, f"p{n}", str(count)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for n in range(EDITORS)
    ]
    for process in processes:
        assert process.stdout.readline().strip() == "ready"  # type: ignore[union-attr]
    for process in processes:
        process.stdin.write("go\n")  # type: ignore[union-attr]
        process.stdin.flush()  # type: ignore[union-attr]
    ended = []
    for process in processes:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
        ended.append(json.loads(out.splitlines()[-1]))
    assert [each["other"] for each in ended] == [[]] * EDITORS, ended
    return ended


def total(ended: list[dict[str, Any]], outcome: str) -> int:
    return sum(each[outcome] for each in ended)


def test_of_edits_made_from_one_version_each_version_has_one(changes):
    add_schedule(by="alice", name="eu", command="regions", expression="0 3 * * *")
    before = changes()
    ended = editors("versioned", 40)
    written = total(ended, "written")
    assert written + total(ended, "conflict") == EDITORS * 40
    assert StoredSchedule.objects.get().version == 1 + written
    assert changes() - before == written


def test_edits_made_without_a_version_are_all_written_in_turn(changes):
    add_schedule(by="alice", name="eu", command="regions", expression="0 3 * * *")
    before = changes()
    ended = editors("unversioned", 40)
    assert total(ended, "written") == EDITORS * 40, ended
    assert StoredSchedule.objects.get().version == 1 + EDITORS * 40
    assert changes() - before == EDITORS * 40


def test_adds_of_one_name_at_once_store_it_once_and_refuse_the_others_with_the_fix():
    ended = editors("add", 20)
    assert total(ended, "written") == 20, ended
    assert total(ended, "refused") == (EDITORS - 1) * 20, ended
    assert StoredSchedule.objects.count() == 20
