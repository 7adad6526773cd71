"""A process that edits stored schedules for tests/controls/test_schedule_edit_races.py.

``python -m tests.support.schedule_editor MODE NAME COUNT``: says "ready",
waits for a line on stdin (so that every editor starts at once), makes
COUNT edits of the kind MODE names, and prints how each ended, as JSON.
"""

from __future__ import annotations

import json
import sys
from collections import Counter

from jobclaims.running.children import connect_child

connect_child()

from jobclaims import EditConflict, add_schedule, change_schedule  # noqa: E402
from jobclaims.models import StoredSchedule  # noqa: E402


def edit(mode: str, me: str, number: int) -> None:
    if mode == "versioned":
        version = StoredSchedule.objects.get(name="eu").version
        change_schedule("eu", by=me, version=version, arguments=f"--region {me}{number}")
    elif mode == "unversioned":
        change_schedule("eu", by=me, arguments=f"--region {me}{number}")
    else:  # Every editor adds the same names, in the same order.
        add_schedule(by=me, name=f"same{number}", command="regions", expression="0 3 * * *")


def main(mode: str, me: str, count: int) -> None:
    print("ready", flush=True)
    sys.stdin.readline()
    ended: Counter[str] = Counter()
    other: list[str] = []
    for number in range(count):
        try:
            edit(mode, me, number)
            ended["written"] += 1
        except EditConflict:
            ended["conflict"] += 1
        except ValueError:
            ended["refused"] += 1
        except Exception as error:  # What the test must see.
            other.append(f"{type(error).__name__}: {error}".splitlines()[0])
    print(json.dumps({"written": 0, "conflict": 0, "refused": 0, **ended, "other": other}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
