"""A run's output: the end of what it printed, kept with its run, shown escaped."""

from __future__ import annotations

import datetime
import json

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from jobclaims import testing
from jobclaims.models import JobRun
from jobclaims.running.output import Tail
from tests.support.helpers import output_of, run_command

KIB = 1024
#: ``JOBCLAIMS["OUTPUT_KEPT"]``'s default: the tests' settings leave it.
KEPT = 16 * KIB


def run_chatty(window: str, **environment: str) -> testing.InstanceResult:
    """Run the ``chatty`` job in a process of its own, as cron would."""
    (instance,) = testing.start("chatty", "--window", window, "-v", "0", env=environment)
    try:
        return instance.finish(timeout=120)
    finally:
        instance.stop()


def test_a_tail_keeps_the_last_bytes_and_says_how_many_it_dropped():
    tail = Tail(10)
    for chunk in (b"0123", b"456789", b"abc", b"", b"defghijklmnop"):
        tail.write(chunk)
    assert tail.text() == "[16 earlier bytes not kept]\nghijklmnop"


def test_a_tail_cut_inside_a_character_starts_at_the_next_and_holds_no_nul():
    tail = Tail(8)
    tail.write("x\N{SNOWMAN}\N{SNOWMAN}\x00ok".encode())  # x, 3 + 3 bytes, NUL, ok: 10.
    assert tail.text() == "[4 earlier bytes not kept]\n\N{SNOWMAN}\N{REPLACEMENT CHARACTER}ok"
    whole = Tail(100)
    whole.write(b"all of it\n")
    assert whole.text() == "all of it\n"


@pytest.mark.django_db(transaction=True)
def test_a_job_printing_10_mb_keeps_its_last_kb_shown_escaped_in_the_admin():
    done = run_chatty("2026-12-01")
    assert done.returncode == 0, done.stderr[-2000:]
    # Everything still reached the process's own stdout and stderr.
    assert len(done.stdout) > 10 * KIB * KIB
    assert done.stdout.endswith("<b>done</b> & 2026-12-01 \N{SNOWMAN}\n")
    assert "from logging" in done.stderr

    run = JobRun.objects.get(job="chatty")
    assert run.status == JobRun.Status.SUCCEEDED
    header, _, kept = output_of("chatty").partition("\n")
    assert header.startswith("[")
    assert header.endswith(" earlier bytes not kept]")
    dropped = int(header[1:].split()[0].replace(",", ""))
    assert dropped + len(kept.encode()) == len(done.stdout.encode()) + len(done.stderr.encode())
    assert len(kept.encode()) <= KEPT
    # Whatever way the job printed: print(), self.stdout and self.stderr,
    # logging, a subprocess of its own.
    for said in ("from self.stdout", "from self.stderr", "from logging", "from a subprocess"):
        assert said in kept
    assert kept.endswith("<b>done</b> & 2026-12-01 \N{SNOWMAN}\n")

    admin = User.objects.create_superuser("admin")
    client = Client()
    client.force_login(admin)
    page = client.get(reverse("admin:jobclaims_jobrun_change", args=[run.pk])).content.decode()
    assert "&lt;b&gt;done&lt;/b&gt; &amp; 2026-12-01 \N{SNOWMAN}" in page
    assert "<b>done</b>" not in page
    # The list of runs does not read the output of each.
    listing = client.get(reverse("admin:jobclaims_jobrun_changelist")).content.decode()
    assert "from self.stdout" not in listing


@pytest.mark.django_db(transaction=True)
def test_a_failed_run_keeps_what_it_printed_beside_its_traceback():
    done = run_chatty("2026-12-02", CHATTY_BYTES="300", CHATTY_FAIL="1")
    assert done.returncode == 1
    run = JobRun.objects.get(job="chatty")
    assert run.status == JobRun.Status.FAILED
    assert run.error.startswith("RuntimeError: chatty failed on purpose")
    printed = output_of("chatty")
    assert printed.startswith("00000000 xxx")
    assert "from a subprocess" in printed
    assert "Traceback" not in printed  # Django prints it after the run, to stderr.

    out, err, status = run_command("jobclaims_status", "--job", "chatty", "--output")
    assert status == 0, err
    assert "== chatty 2026-12-02 printed:\n00000000 xxx" in out
    out, err, status = run_command("jobclaims_status", "--job", "chatty", "--output", "--json")
    assert json.loads(out)["claims"][0]["output"] == run.output


@pytest.mark.django_db
def test_a_job_called_in_another_programs_process_keeps_what_it_writes_itself(monkeypatch):
    monkeypatch.setenv("CHATTY_BYTES", "200")
    _out, err, status = run_command("chatty", "--window", "2026-12-03")
    assert status == 0, err
    printed = output_of("chatty")
    # Its own streams, not the process's: other threads print there too.
    assert "from self.stdout" in printed
    assert "from self.stderr" in printed
    assert "00000000" not in printed


@pytest.mark.django_db
def test_output_kept_0_captures_nothing_and_a_claim_without_a_command_keeps_none(settings):
    settings.JOBCLAIMS = {"OUTPUT_KEPT": 0}
    out, err, status = run_command("chatty", "--window", "2026-12-04")
    assert status == 0, err
    assert JobRun.objects.get(job="chatty").output is None
    run = JobRun.objects.claim("by_hand", "w", lease=datetime.timedelta(minutes=1))
    assert run is not None
    assert run.release()
    assert JobRun.objects.get(job="by_hand").output is None
    out, _, _ = run_command("jobclaims_status", "--job", "by_hand", "--output")
    assert "== by_hand w: no output kept" in out
