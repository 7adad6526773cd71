"""Adding, changing and deleting stored schedules: the API the admin uses too.

Each change is made in one transaction of the claims database, which
first counts it (``count_a_change()``, the number the schedulers poll):
the count's row then holds every other change off until this one commits,
so changes are made one after the other, each to the schedule as the one
before left it. Then the schedule is checked as the scheduler would read
it (``jobclaims.jobs.stored_schedules.job_of()``): one that could not run
is refused with the fix, and nothing is written.

Two operators who edit one schedule at once: each edit may name the
``version`` it was made from, and one made from a version that is no
longer the schedule's is refused (``EditConflict``), rather than undo the
other's edit unseen. The admin always names it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar, cast

from django.core.exceptions import ValidationError
from django.db import IntegrityError, connections, models, transaction
from django.db.models import F

from jobclaims.claims import retries
from jobclaims.exceptions import EditConflict, UnknownJob
from jobclaims.jobs import discovery
from jobclaims.jobs.commands import JobCommand
from jobclaims.jobs.schedules import JobSchedule
from jobclaims.jobs.stored_schedules import count_a_change, job_of
from jobclaims.models import StoredSchedule
from jobclaims.time.clock import DatabaseNow

T = TypeVar("T")

#: What an edit may change: every field but the bookkeeping ones.
EDITABLE = (
    "name",
    "command",
    "arguments",
    "task",
    "task_args",
    "task_kwargs",
    "expression",
    "time_zone",
    "start",
    "end",
    "skip_dates",
    "max_runs",
    "overlap",
)


def add_schedule(*, by: str, **fields: Any) -> StoredSchedule:
    """Store a schedule of ``fields`` (``StoredSchedule``'s, ``name``,
    ``command`` and ``expression`` at least), added by ``by``; it runs from
    each scheduler's next look. ``ValueError`` naming the fix, and nothing
    written, for one that could not run or a name taken."""
    stored = StoredSchedule(**_editable(fields), created_by=by, changed_by=by)
    check(stored)

    def add() -> None:
        with _name_kept(stored.name), transaction.atomic(using=_db()):
            count_a_change()
            stored.save(using=_db())

    _in_turn_again(add)
    stored.refresh_from_db()
    return stored


def change_schedule(
    name: str, /, *, by: str, version: int | None = None, **changes: Any
) -> StoredSchedule:
    """Change the stored schedule ``name`` (``name=`` among ``changes``
    renames it: its runs are another job's from then on). ``version``: the
    one the edit was made from, refused with ``EditConflict`` if it is no
    longer the schedule's; without it, ``changes`` are made to the schedule
    as the edits before left it. ``ValueError`` naming the fix, and nothing
    written, for a change that would leave it unable to run."""
    changes = _editable(changes)
    # Read before the change takes its lock, which holds every claim of
    # SQLite's file off: what the check compares with changes with a deploy.
    known = code_known()

    def change() -> StoredSchedule:
        with _name_kept(changes.get("name", name)), transaction.atomic(using=_db()):
            stored = _in_turn(name, version)
            for field, value in changes.items():
                setattr(stored, field, value)
            check(stored, known)
            StoredSchedule.objects.filter(pk=stored.pk).update(
                **{field: getattr(stored, field) for field in EDITABLE},
                version=F("version") + 1,
                changed_by=by,
                changed_at=DatabaseNow(),
            )
        return stored

    stored = _in_turn_again(change)
    stored.refresh_from_db()
    return stored


def delete_schedule(name: str, *, by: str, version: int | None = None) -> None:
    """Delete the stored schedule ``name``: no fire of it starts from each
    scheduler's next look; a run of it going on ends as it would have.
    ``version`` as for ``change_schedule()``."""

    def delete() -> None:
        with transaction.atomic(using=_db()):
            _in_turn(name, version).delete()

    _in_turn_again(delete)


def _in_turn_again(edit: Callable[[], T]) -> T:
    """Make ``edit``, one whole transaction, again while the database asks
    (``retries``): two first changes at once both take a shared lock on
    the count's new row, then each wants it for its own, and MariaDB ends
    one as a deadlock, to be tried again. Inside the caller's transaction
    the error is raised, since it ended that transaction."""
    return retries.retrying(connections[_db()], edit)


def _in_turn(name: str, version: int | None) -> StoredSchedule:
    """Count a change, then read the schedule it changes: as every change
    counts itself first, the count's row holds the others off until this
    one's transaction ends, so the schedule is read as the last change
    left it. ``EditConflict`` if it is not at ``version`` (if given)."""
    count_a_change()
    stored = _get(name)
    if version is not None and stored.version != version:
        raise EditConflict(
            f"stored schedule {name!r} was changed by {stored.changed_by} meanwhile (version "
            f"{stored.version}, not {version}); nothing was changed: read it again and redo "
            "the edit"
        )
    return stored


@contextmanager
def _name_kept(name: str) -> Iterator[None]:
    """Refuse a name another schedule took since ``check()`` found it free,
    as ``check()`` refuses one taken before."""
    try:
        yield
    except IntegrityError:
        raise ValueError(
            f"name: a stored schedule named {name!r} was added meanwhile; give this one "
            "another name"
        ) from None


def check(stored: StoredSchedule, known: Known | None = None) -> None:
    """Refuse ``stored`` with ``ValueError`` naming the fix if it could not
    be saved (a field too long, a name taken) or could not run; ``known``,
    the code's jobs (``code_known()``), if read already."""
    try:
        stored.full_clean(exclude=["version", "created_by", "changed_by"])
    except ValidationError as error:
        raise ValueError(_said(error)) from None
    job_of(stored, *(known or code_known()))


#: The code's job commands, and its usable schedules.
Known = tuple[dict[str, JobCommand], list[JobSchedule]]


def code_known() -> Known:
    """What a stored schedule is checked against: the code's job commands,
    which it may run, and schedules, whose names it must not take. Most of
    a check's cost (every command is loaded), and the same until a deploy."""
    return discovery.job_commands(), discovery.usable_jobs()[0]


def _editable(fields: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(fields) - set(EDITABLE))
    if unknown:
        raise TypeError(
            f"{', '.join(unknown)}: not a field of a schedule; use {', '.join(EDITABLE)}"
        )
    return {field: _empty(field) if value is None else value for field, value in fields.items()}


def _empty(field: str) -> Any:
    """What None stands for in ``field``: its default ("" for text, [] for
    arguments; None for max_runs, which may be None)."""
    return cast("models.Field[Any, Any]", StoredSchedule._meta.get_field(field)).get_default()


def _get(name: str) -> StoredSchedule:
    try:
        return StoredSchedule.objects.get(name=name)
    except StoredSchedule.DoesNotExist:
        raise UnknownJob(
            f"no stored schedule is named {name!r}; see them in the admin, or add it "
            "with add_schedule()"
        ) from None


def _said(error: ValidationError) -> str:
    """A ``ValidationError`` as one line: each field and what is wrong with it."""
    if not hasattr(error, "error_dict"):
        return " ".join(error.messages)
    return "; ".join(
        f"{field}: {' '.join(messages)}" for field, messages in error.message_dict.items()
    )


def _db() -> str:
    return StoredSchedule.objects.claims_db()
