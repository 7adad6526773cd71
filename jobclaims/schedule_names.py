"""How each of a job's several schedules names its claims.

A job with ``schedules = [Schedule("0 * * * *", args=["--region", "eu"]),
Schedule("30 * * * *", args=["--region", "us"])]`` is several scheduled
jobs as far as claims go: each schedule claims under the job's name with
the schedule's name in brackets, ``sync_regions[--region eu]``, and keys its
fires as a single schedule does, by the fire's local time and offset. So
the unique ``(job, window)`` pair holds each schedule to one run per fire,
while two schedules never meet: not in a window, not in the overlap rule
(a run of one holds its own name only) and not in the slot rule (each
schedule's slots are its own, an interval of time whatever key names it).

A schedule's name is its ``name=``, else its arguments joined by spaces,
else its cron expression: never its place in the list, so a deploy that
reorders the list keeps every schedule's claims, and one that edits an
expression keeps the claims of a schedule with arguments or a name.

A job with one ``schedule = "..."`` claims under the job's name alone, as
before schedules had names, and a pause of a job holds for every schedule
of it (``parent()``).
"""

from __future__ import annotations


def claim_name(job: str, schedule: str) -> str:
    """The job name the claims of ``job``'s schedule named ``schedule`` are recorded under."""
    return f"{job}[{schedule}]"


def parent(name: str) -> str | None:
    """The job a schedule's claim name belongs to; None for a job's own name."""
    job, bracket, rest = name.partition("[")
    if not bracket or not rest.endswith("]") or not job:
        return None
    return job
