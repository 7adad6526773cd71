"""A schedule's claims: its name, and its series, which no rename changes."""

from __future__ import annotations

import datetime

import pytest

from jobclaims.claims import naming
from jobclaims.claims.rule import Reason, Refusal
from jobclaims.models import JobRun, JobSkip
from jobclaims.testing import Instance, StartingLine

HOUR = datetime.timedelta(hours=1)
FIRE = "2026-12-01T20:00:02+00:00"
EVERY_2_SECONDS = "*/2 * * * * *"


def series_of(region: str, expression: str = EVERY_2_SECONDS, zone: str = "UTC") -> str:
    return naming.series("regions", ["--region", region], expression, zone)


def test_a_schedules_series_is_what_it_runs_and_when_not_what_it_is_called():
    eu = series_of("eu")
    assert naming.series("regions", ("--region", "eu"), f"  {EVERY_2_SECONDS} ", "UTC") == eu
    assert (
        len(
            {
                eu,
                series_of("us"),
                series_of("eu", "*/3 * * * * *"),
                series_of("eu", zone="Europe/Paris"),
            }
        )
        == 4
    )
    assert naming.series("other", ["--region", "eu"], EVERY_2_SECONDS, "UTC") != eu
    # Arguments are told apart however their text would run together.
    assert naming.series("regions", ["a b"], EVERY_2_SECONDS, "UTC") != naming.series(
        "regions", ["a", "b"], EVERY_2_SECONDS, "UTC"
    )


def claim(name: str, series: str, window: str = FIRE) -> JobRun | Refusal:
    return JobRun.objects.try_claim(
        f"regions[{name}]", window, lease=HOUR, schedule=EVERY_2_SECONDS, series=series
    )


@pytest.mark.django_db
@pytest.mark.parametrize("status", JobRun.Status.values)
def test_a_fire_claimed_under_one_name_of_its_schedule_is_refused_under_another(status):
    old = claim("--region eu", series_of("eu"))
    assert isinstance(old, JobRun)
    if status != JobRun.Status.RUNNING:
        JobRun.objects.filter(pk=old.pk).update(status=status, holds_job=None)

    refusal = claim("eu", series_of("eu"))

    assert isinstance(refusal, Refusal)
    assert (refusal.reason, refusal.held_job, refusal.held_window) == (
        Reason.SLOT_RAN,
        "regions[--region eu]",
        FIRE,
    )
    assert str(refusal) == (
        f"its schedule claimed this fire as regions[--region eu], whose run is {status}"
    )
    assert JobSkip.objects.get(job="regions[eu]").reason == "slot-ran"
    assert not JobRun.objects.filter(job="regions[eu]").exists()


@pytest.mark.django_db
def test_two_schedules_of_one_job_claim_the_same_fire_each():
    assert isinstance(claim("--region eu", series_of("eu")), JobRun)
    assert isinstance(claim("--region us", series_of("us")), JobRun)
    # And a schedule's next fire is its own again.
    assert isinstance(claim("eu", series_of("eu"), "2026-12-01T20:00:04+00:00"), JobRun)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("fire", ["2026-12-01T20:00:02+00:00", "2026-12-01T20:00:04+00:00"])
def test_a_fire_claimed_at_once_under_its_old_and_new_name_runs_once(tmp_path, fire):
    """A rolling deploy names a schedule: a host of each deploy runs the same fire by hand."""
    log = tmp_path / "runs.log"
    old_code = {"REGIONS_SCHEDULE": EVERY_2_SECONDS, "APPENDED_LOG": str(log)}
    new_code = {**old_code, "REGIONS_NAMED": "1"}
    line = StartingLine()
    hosts = [
        Instance(
            "regions",
            "--region",
            "eu",
            f"--schedule-name={name}",
            "--window",
            fire,
            line=line,
            env=env,
        )
        for name, env in (("--region eu", old_code), ("eu", new_code))
    ]
    try:
        for host in hosts:
            host.wait_ready()
        line.release()
        results = [host.finish(timeout=60) for host in hosts]
    finally:
        line.release()
        for host in hosts:
            host.stop()

    assert sorted(result.outcome for result in results) == ["ran", "skipped"], results
    starts = [line for line in log.read_text().splitlines() if line.startswith("start")]
    assert len(starts) == 1, starts
    [skipped] = [result for result in results if result.outcome == "skipped"]
    assert "its schedule claimed this fire as regions[" in skipped.stdout, skipped
