"""One "host" of the retention benchmark: a fleet host whose retention
thread's DELETEs are timed.

    python -m benchmarks.retention_host RESULT_PATH JOBS EXPRESSION

Runs ``benchmarks.fleet_host`` (a scheduler over the fleet's jobs, measured),
with every DELETE its history retention sends timed, and writes those
timings, with when each ran (Unix time), to RESULT_PATH.deletes as JSON.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any


def main(path: str, jobs: int, expression: str) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
    import django

    django.setup()
    from benchmarks import fleet_host
    from jobclaims.controls import pruning

    deletes: list[tuple[float, float, int]] = []
    timed_delete = pruning._timed_delete

    def recorded(batch: Any) -> tuple[int, float]:
        rows, took = timed_delete(batch)
        deletes.append((time.time(), took, rows))
        return rows, took

    pruning._timed_delete = recorded  # type: ignore[assignment]
    fleet_host.main(path, jobs, expression)
    with open(f"{path}.deletes", "w") as out:
        json.dump(deletes, out)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
