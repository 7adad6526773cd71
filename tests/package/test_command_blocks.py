"""Every command the docs show parses as written, and the safe ones run as shown.

A ``manage.py`` command appears in console blocks, crontab lines, systemd
units, Kubernetes manifests and a Procfile: each parses with the command's
own parser (a job of the docs' own project, like ``charge_invoices``, with
``JobCommand``'s), so a renamed option fails here. The scheduler's grace
is held to the rule recipes.md gives, a few seconds below what its
supervisor waits before SIGKILL. A console block that pauses, resumes or
runs the example project's ``charge_invoices``, or pauses or resumes all
jobs, runs there, on a database of its own, and prints what the block shows.
"""

from __future__ import annotations

import configparser
import datetime
import os
import re
import shlex
import subprocess
import sys

import pytest
import yaml
from django.core.management import get_commands, load_command_class
from django.core.management.base import BaseCommand

from jobclaims.conf import jobclaims_settings
from jobclaims.jobs.commands import JobCommand
from jobclaims.time.cron import CronSchedule
from tests.package.test_code_blocks import ROOT, blocks

#: Programs the docs show that are not this project's: they are named, not run.
OTHER_PROGRAMS = {"mariadb-tzinfo-to-sql", "mysql_tzinfo_to_sql", "node_exporter", "echo", "find"}
#: The rule of recipes.md's table: the grace, this much below the supervisor's wait.
GRACE_BELOW_THE_KILL = 5
#: What systemd and Kubernetes wait before SIGKILL when a unit or a pod does not say.
DEFAULT_TIMEOUT_STOP_SEC = 90
DEFAULT_TERMINATION_GRACE = 30


def manage_py(line: str) -> list[str] | None:
    """The arguments of the ``manage.py`` command in a shell line, without
    what the shell does with it (redirections, pipes); None if it has none.

    A usage line's optional parts (``[--state active|expired]``) are read
    as given, with the first of their choices.
    """
    line = re.sub(r"\[([^\]]*)\]", r"\1", line)
    line = re.sub(r"(?<=\s)(\w+)(\|[\w-]+)+", r"\1", line)
    words = shlex.split(line, comments=True)
    for index, word in enumerate(words):
        if word.endswith("manage.py"):
            args = words[index + 1 :]
            ends = [at for at, arg in enumerate(args) if arg in {"|", "&&", ";"} or arg[0] in "<>"]
            return args[: min(ends, default=len(args))]
    return None


def shell_lines() -> list[tuple[str, str]]:
    """Every command line the docs show to a shell, crontab or supervisor: (where, line)."""
    found = []
    for where, code in blocks("console"):
        found += [(where, line[2:]) for line in code.splitlines() if line.startswith("$ ")]
    for where, code in blocks("cron"):
        for line in code.splitlines():
            if line.strip() and not line.startswith("#") and "=" not in line.split()[0]:
                fields = 1 if line.startswith("@") else 5
                found.append((where, line.split(None, fields)[fields]))
    for where, code in blocks(""):  # A Procfile; performance.md's make commands, or output.
        for line in code.splitlines():
            if line.startswith("scheduler: "):
                found.append((where, line.partition(": ")[2]))
            elif line.startswith(("make ", "DATABASE_URL=")):
                found.append((where, line))
    for where, unit in units():
        if "ExecStart" in unit:
            found.append((where, unit["ExecStart"]))
    for where, container in containers():
        found.append((where, shlex.join(container["command"])))
    return found


def units() -> list[tuple[str, configparser.SectionProxy]]:
    """The [Service] (or [Timer]) section of each systemd unit the docs show."""
    found = []
    for where, code in blocks("ini"):
        parser = configparser.ConfigParser(strict=False, interpolation=None)
        parser.optionxform = str  # type: ignore[assignment,method-assign]
        # postgresql.conf has no sections: its lines are read as one.
        parser.read_string(code if re.search(r"^\[", code, re.M) else f"[conf]\n{code}")
        found += [(where, parser[name]) for name in parser.sections() if name != "conf"]
    return found


def containers() -> list[tuple[str, dict]]:
    """Each container the docs' manifests run, with its pod's spec under ``pod``."""
    found = []
    for where, code in blocks("yaml"):
        manifest = yaml.safe_load(code)
        template = manifest["spec"].get("jobTemplate", manifest)["spec"]["template"]
        for container in template["spec"]["containers"]:
            found.append((where, {**container, "pod": template["spec"]}))
    return found


def parser_of(name: str) -> BaseCommand:
    """The command ``name``: the project's, or a job of the docs' own project."""
    app = get_commands().get(name)
    if app is None:
        return JobCommand()  # charge_invoices, sync_ledger…: the options every job has.
    return app if isinstance(app, BaseCommand) else load_command_class(app, name)


def test_the_docs_show_commands_of_every_kind():
    kinds = {where.partition(":")[0] for where, _ in shell_lines()}
    assert {"README.md", "docs/recipes.md", "docs/howto/kubernetes.md"} <= kinds
    assert len(shell_lines()) >= 40


@pytest.mark.parametrize(("where", "line"), shell_lines(), ids=[w for w, _ in shell_lines()])
def test_each_command_parses_as_written(where, line):
    args = manage_py(line)
    if args is None:
        words = shlex.split(line)
        if "make" in words[:3]:
            target = words[words.index("make") + 1].partition("=")[0]
            makefile = (ROOT / "Makefile").read_text()
            assert target.isupper() or re.search(rf"^{target}:", makefile, re.M), line
        elif words[:3] == ["python", "-m", "pip"]:
            assert words[3] == "install", line  # Installation: from a clone or a wheel.
        else:
            assert words[0] in OTHER_PROGRAMS, f"{where}: {line!r} runs nothing known"
        return
    name, *options = args
    # A database alias is the reader's (--database claims): read as one the tests have.
    options = [re.sub(r"^(--database=).*", r"\1default", option) for option in options]
    if "--database" in options:
        options[options.index("--database") + 1] = "default"
    parser_of(name).create_parser("manage.py", name).parse_args(options)


@pytest.mark.parametrize(("where", "code"), blocks("cron"), ids=[w for w, _ in blocks("cron")])
def test_each_crontab_line_has_a_schedule_cron_reads(where, code):
    for line in code.splitlines():
        if line.strip() and not line.startswith("#") and "=" not in line.split()[0]:
            CronSchedule(" ".join(line.split()[:5]))  # Raises, naming the fix.


def test_the_scheduler_s_grace_ends_before_its_supervisor_kills_it():
    stop_grace = int(jobclaims_settings.stop_grace.total_seconds())
    checked = []
    for where, unit in units():
        args = manage_py(unit.get("ExecStart", ""))
        if args and args[0] == "jobclaims_scheduler":
            options = parser_of(args[0]).create_parser("manage.py", args[0]).parse_args(args[1:])
            grace = stop_grace if options.grace is None else options.grace.total_seconds()
            kill = int(unit.get("TimeoutStopSec", DEFAULT_TIMEOUT_STOP_SEC))
            assert grace == kill - GRACE_BELOW_THE_KILL, f"{where}: --grace {grace}, stop {kill}"
            assert unit.get("KillMode") == "mixed", f"{where}: SIGTERM to the scheduler only"
            checked.append(where)
    for where, container in containers():
        args = manage_py(shlex.join(container["command"]))
        if args and args[0] == "jobclaims_scheduler":
            options = parser_of(args[0]).create_parser("manage.py", args[0]).parse_args(args[1:])
            grace = stop_grace if options.grace is None else options.grace.total_seconds()
            kill = container["pod"].get("terminationGracePeriodSeconds", DEFAULT_TERMINATION_GRACE)
            assert grace == kill - GRACE_BELOW_THE_KILL, f"{where}: --grace {grace}, pod {kill}"
            checked.append(where)
    assert len(checked) >= 3, checked


# The console blocks run in the example project: those whose every command
# pauses, resumes or runs its job, or pauses or resumes all jobs.
RUN = {"jobclaims_pause", "jobclaims_resume", "jobclaims_run"}
RUNNABLE = [
    (where, code)
    for where, code in blocks("console")
    if all(
        (args := manage_py(line[2:])) and args[0] in RUN and args[1] in ("charge_invoices", "--all")
        for line in code.splitlines()
        if line.startswith("$ ")
    )
]
#: A date or a moment, as the commands print them: the docs' are examples,
#: and a run's differ from day to day (its key, its lease's end).
MOMENT = re.compile(r"\d{4}-\d\d-\d\d(?:[ T]\d\d:\d\d(?::\d\d)?)?(?: [A-Z]{3,}|[+-]\d\d:\d\d)?")


def in_the_future(code: str) -> str:
    """``code`` with its years moved on as far as its ``--until`` needs to be
    still to come: the docs' dates are examples, and time goes by."""
    untils = [int(year) for year in re.findall(r"--until (\d{4})-", code)]
    shift = max([datetime.date.today().year + 1 - year for year in untils] + [0])
    return re.sub(r"\b(20\d\d)-", lambda year: f"{int(year[1]) + shift}-", code)


def test_some_console_blocks_run_in_the_example_project():
    assert len(RUNNABLE) >= 3, RUNNABLE


@pytest.mark.parametrize(("where", "code"), RUNNABLE, ids=[where for where, _ in RUNNABLE])
def test_the_block_prints_what_it_shows(where, code, tmp_path):
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "example_project.settings",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'example.sqlite3'}",
    }

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "django", *args],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )

    assert run("migrate", "-v", "0").returncode == 0
    shown, printed = [], []
    for line in in_the_future(code).splitlines():
        if not line.startswith("$ "):
            shown.append(line)
            continue
        done = run(*manage_py(line[2:]) or [])
        assert done.returncode == 0, f"{where}: {line}\n{done.stderr}"
        printed += done.stdout.splitlines()
    assert [MOMENT.sub("<moment>", line) for line in printed] == [
        MOMENT.sub("<moment>", line) for line in shown
    ], f"{where} shows what the commands no longer print"


def test_a_usage_line_is_read_with_its_first_choices_and_old_dates_move_on():
    assert manage_py("./manage.py jobclaims_status [--state active|failed] --json  # x") == [
        "jobclaims_status",
        "--state",
        "active",
        "--json",
    ]
    moved = in_the_future("$ x --until 2020-12-02T06:00\nuntil 2020-12-02 06:00:00 UTC")
    year = datetime.date.today().year + 1
    assert moved == f"$ x --until {year}-12-02T06:00\nuntil {year}-12-02 06:00:00 UTC"


def test_an_option_that_does_not_exist_fails_to_parse():
    with pytest.raises(Exception, match="unrecognized arguments: --windw"):
        test_each_command_parses_as_written("here", "./manage.py jobclaims_run J --windw 1")
