"""The nemesis: races real job processes on a cluster while faults strike.

Usage: python -m tests.faults.nemesis.run galera|postgresql [--seed N] [--windows N]

It starts the cluster on ports of its own (scripts/start-galera with
GALERA_PORT 3341, scripts/start-pg-replica with PG_REPLICA_PORT 5481),
starts four racers (tests/faults/nemesis/worker.py), each a real process on a
node of its own where the cluster has several, and sends each window to
two to four of them at once, with a short lease (``Cluster.leases``). Meanwhile a
thread injects one fault after another at random moments:

- Galera: a node isolated (``gmcast.isolate=1``), SIGSTOPped for 2-7 s, or
  SIGKILLed and restarted; a racer SIGSTOPped past its lease.
- PostgreSQL (synchronous standby): the primary crashed, the standby
  promoted and the pair rebuilt; the standby cut off, or its WAL receiver
  SIGSTOPped (a lagging standby); a racer SIGSTOPped past its lease.

Runs are counted from the job's own O_APPEND file. After the last window
the faults stop, the cluster heals, and each window no racer ran is sent
once more with ``--wait``: a window lost is one that not even this run
could run (its claims said it was done, or held it for good). It prints
the windows that ran twice and the lost ones, each with the faults around
it, and the tracebacks by cause; it exits 1 if there is any. A window run
again because its holder stalled past its lease after it started (its node
stopped or killed before its outcome was recorded) is counted apart: the
job's lines say what each run knew of its lease, and a lease allows that. Seeded: the
same seed draws the same windows, racers and faults, so a failing run can
be replayed (the moments depend on the machine).
"""

from __future__ import annotations

import argparse
import datetime
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SCRIPTS = ROOT / "scripts"
RACERS = 4
#: Seconds a racer's commit may wait for a standby that does not answer.
STANDBY_TIMEOUT = "4"
FIRST_WINDOW = datetime.datetime(2030, 1, 1, tzinfo=datetime.timezone.utc)


@dataclass
class Fault:
    kind: str
    detail: str
    started: float
    ended: float = float("inf")


@dataclass
class History:
    """The faults injected, in order, and when."""

    faults: list[Fault] = field(default_factory=list)

    def around(self, start: float, end: float) -> list[Fault]:
        return [f for f in self.faults if f.started <= end + 1 and f.ended >= start - 6]


def sh(*command: str, env: dict[str, str] | None = None, check: bool = True) -> str:
    done = subprocess.run(
        command, env={**os.environ, **(env or {})}, capture_output=True, text=True, check=False
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.strip()[-400:]}")
    return done.stdout


class Cluster:
    """How to start, hurt and heal one kind of cluster."""

    name = ""
    env: dict[str, str] = {}
    #: The leases a window's racers are given, one drawn per window.
    leases: tuple[int, ...] = ()

    def start(self) -> list[str]:
        """Start the cluster; the URL each racer uses."""
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def keep_logs(self, workdir: Path) -> None:
        """Copy the servers' own logs beside the racers' before a stop deletes them."""

    def faults(self) -> list[Callable[[random.Random], tuple[str, str, Callable[[], None]]]]:
        raise NotImplementedError

    def heal(self) -> None:
        raise NotImplementedError


class Galera(Cluster):
    name = "galera"
    env = {"GALERA_PORT": "3341"}
    #: Shorter than its stalls (a node SIGSTOPped 2-7 s): the claims that
    #: commit after their lease ended must step aside.
    leases = (2, 3, 4, 5)

    def __init__(self) -> None:
        self.dir = Path(tempfile.gettempdir()) / f"jobclaims-galera-{self.env['GALERA_PORT']}"
        self.urls: list[str] = []

    def start(self) -> list[str]:
        out = sh(str(SCRIPTS / "start-galera"), "start", env=self.env)
        self.urls = out.rsplit("JOBCLAIMS_GALERA_URLS=", 1)[1].strip().split(",")
        return [self.urls[i % 3] for i in range(RACERS)]

    def stop(self) -> None:
        sh(str(SCRIPTS / "start-galera"), "stop", env=self.env, check=False)

    def keep_logs(self, workdir: Path) -> None:
        for log in self.dir.glob("node*/error.log"):
            shutil.copy(log, workdir / f"galera-{log.parent.name}.log")

    def _pid(self, node: int) -> int:
        return int(sh(str(SCRIPTS / "start-galera"), "pid", str(node), env=self.env))

    def _set(self, node: int, isolated: bool) -> None:
        port = str(int(self.env["GALERA_PORT"]) + node - 1)
        sh(
            "mariadb", "-h", "127.0.0.1", "-P", port, "-u", "root", "-e",
            f"SET GLOBAL wsrep_provider_options = 'gmcast.isolate={int(isolated)}'",
            check=False,
        )  # fmt: skip

    def faults(self):
        def isolate(rng):
            node, pause = rng.randint(1, 3), rng.uniform(2, 7)

            def act():
                self._set(node, True)
                time.sleep(pause)
                self._set(node, False)

            return "isolate", f"node {node} for {pause:.1f} s", act

        def stop(rng):
            node, pause = rng.randint(1, 3), rng.uniform(2, 7)

            def act():
                pid = self._pid(node)
                os.kill(pid, signal.SIGSTOP)
                time.sleep(pause)
                os.kill(pid, signal.SIGCONT)

            return "sigstop-node", f"node {node} for {pause:.1f} s", act

        def kill(rng):
            node = rng.randint(2, 3)  # Node 1 holds no special role once joined.

            def act():
                os.kill(self._pid(node), signal.SIGKILL)
                time.sleep(1)
                sh(str(SCRIPTS / "start-galera"), "start", env=self.env)

            return "sigkill-node", f"node {node}, restarted", act

        return [isolate, stop, kill]

    def heal(self) -> None:
        for node in (1, 2, 3):
            self._set(node, False)
        # A node a fault restarted may still be joining: give it the time.
        for attempt in range(4):
            try:
                sh(str(SCRIPTS / "start-galera"), "start", env=self.env)
                return
            except RuntimeError:
                if attempt == 3:
                    raise
                time.sleep(15)


class PostgreSQL(Cluster):
    name = "postgresql"
    env = {"PG_REPLICA_PORT": "5481"}
    #: Longer than a failover keeps the primary's port from taking writes
    #: (crash, promotion, the move back: seconds), as docs/clusters.md asks
    #: of a project, and than 1.5 STANDBY_TIMEOUT (jobclaims.W004). With 2-5 s,
    #: a release caught in a failover could not be recorded within its lease,
    #: the window's next instance took it for crashed, and it ran twice.
    leases = (8, 10, 12)

    def start(self) -> list[str]:
        script = str(SCRIPTS / "start-pg-replica")
        out = sh(script, "reset", "on", env=self.env)
        primary, self.standby = out.rsplit("JOBCLAIMS_PG_REPLICA=", 1)[1].strip().split(",")
        # One primary takes writes: every racer is on it.
        return [primary] * RACERS

    def do(self, *command: str) -> None:
        sh(str(SCRIPTS / "start-pg-replica"), *command, env=self.env)

    def stop(self) -> None:
        sh(str(SCRIPTS / "start-pg-replica"), "stop", env=self.env, check=False)

    def _walreceiver(self) -> int | None:
        port = str(int(self.env["PG_REPLICA_PORT"]) + 1)
        out = sh(
            "psql", "-h", "127.0.0.1", "-p", port, "-U", "postgres", "-XAtqc",
            "SELECT pid FROM pg_stat_wal_receiver", check=False,
        )  # fmt: skip
        return int(out) if out.strip() else None

    def faults(self):
        def failover(rng):
            def act():
                self.do("crash-primary")
                self.do("promote")
                self.do("rebuild", "on")

            return "failover", "primary crashed, standby promoted, pair rebuilt", act

        def cut(rng):
            pause = rng.uniform(2, 7)

            def act():
                self.do("cut")
                time.sleep(pause)
                self.do("rejoin")

            return "cut-standby", f"for {pause:.1f} s", act

        def lag(rng):
            pause = rng.uniform(2, 7)

            def act():
                pid = self._walreceiver()
                if pid is None:
                    return
                os.kill(pid, signal.SIGSTOP)
                time.sleep(pause)
                os.kill(pid, signal.SIGCONT)

            return "sigstop-walreceiver", f"for {pause:.1f} s", act

        return [failover, cut, lag]

    def heal(self) -> None:
        status = sh(str(SCRIPTS / "start-pg-replica"), "status", env=self.env, check=False)
        if "standby: 127.0.0.1" in status and "running as primary" in status.split("standby:")[1]:
            self.do("rebuild", "on")
        else:
            self.do("rejoin")


class Racer:
    """A worker process on one node, and its answers, read as they come."""

    def __init__(self, url: str, runs: Path, log: Path, answered: threading.Condition):
        env = {
            **os.environ,
            "DATABASE_URL": url,
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "NEMESIS_RUNS": str(runs),
            "TESTS_STANDBY_TIMEOUT": STANDBY_TIMEOUT,
            "PYTHONPATH": str(ROOT),
        }
        self.log = log.open("a")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.faults.nemesis.worker"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )
        assert self.process.stdout is not None
        assert self.process.stdout.readline().strip() == "ready", "the racer did not start"
        self.sent: list[str] = []
        self.answers: dict[str, str] = {}
        self._answered = answered
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            window, _, outcome = line.strip().partition(" ")
            with self._answered:
                self.answers[window] = outcome
                self._answered.notify_all()
        with self._answered:  # Died: what it never answered is a traceback.
            for window in self.sent:
                self.answers.setdefault(window, "traceback the racer process died")
            self._answered.notify_all()

    def send(self, window: str, *args: object) -> None:
        assert self.process.stdin is not None
        self.sent.append(window)
        self.process.stdin.write(" ".join(map(str, (window, *args))) + "\n")
        self.process.stdin.flush()

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)
            self.process.kill()
        self.process.wait()
        self.log.close()


def wait_answers(
    answered: threading.Condition, racers: list[Racer], window: str, timeout: float
) -> bool:
    """Wait until every racer sent ``window`` answered it; False after ``timeout``."""
    with answered:
        return answered.wait_for(
            lambda: all(window in r.answers for r in racers if window in r.sent), timeout
        )


def inject(
    cluster: Cluster,
    racers: list[Racer],
    rng: random.Random,
    history: History,
    done: threading.Event,
) -> None:
    """One fault after another, at random moments, until ``done``."""
    kinds = cluster.faults()

    def pause_a_holder(rng):
        racer, pause = rng.choice(racers), rng.uniform(max(cluster.leases), max(cluster.leases) + 3)

        def act():
            os.kill(racer.process.pid, signal.SIGSTOP)
            time.sleep(pause)
            os.kill(racer.process.pid, signal.SIGCONT)

        return "sigstop-racer", f"pid {racer.process.pid} for {pause:.1f} s", act

    while not done.wait(rng.uniform(0.5, 3)):
        kind, detail, act = rng.choice([*kinds, pause_a_holder])(rng)
        fault = Fault(kind, detail, time.monotonic())
        history.faults.append(fault)
        try:
            act()
        except Exception as error:  # The fault's own tooling failed: say so, go on.
            fault.detail += f" (failed: {' '.join(str(error).split())[:120]})"
        fault.ended = time.monotonic()


@dataclass
class Run:
    """One run of a window, from the job's own lines: when it started, and
    until when it knew its lease held, at its start and at its end."""

    pid: str
    started: float
    held_at_start: float
    held_at_end: float | None = None


def read_runs(runs: Path) -> dict[str, list[Run]]:
    """Each window's runs, in the order they started."""
    found: dict[str, list[Run]] = {}
    ends: dict[tuple[str, str], float] = {}
    lines = runs.read_text().splitlines() if runs.exists() else []
    for line in lines:
        fields = line.split()
        if fields[0] == "end":
            ends[fields[1], fields[2]] = float(fields[3])
        else:
            window, pid, _attempt, started, held = fields
            found.setdefault(window, []).append(Run(pid, float(started), float(held)))
    for window, window_runs in found.items():
        for run in window_runs:
            run.held_at_end = ends.get((window, run.pid))
        window_runs.sort(key=lambda run: run.started)
    return found


def count_runs(runs: Path) -> Counter[str]:
    return Counter({window: len(found) for window, found in read_runs(runs).items()})


def broke_the_lease(window_runs: list[Run]) -> bool:
    """Whether two runs of a window overlapped on a lease, or one started on
    a lease it no longer held: what jobclaims promises never happens.

    A later run that started once an earlier run's lease had ended, as that
    run knew it, took over a holder that stalled past its lease after it
    started (its node stopped or killed, its outcome not recorded in time):
    the at-least-once that a lease gives a run it must take for crashed.
    """
    held = float("-inf")  # Until when the runs so far knew a lease held.
    for run in window_runs:
        if run.started < held or run.started >= run.held_at_start:
            return True
        held = max(held, run.held_at_start, run.held_at_end or held)
    return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cluster", choices=["galera", "postgresql"])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--windows", type=int, default=300)
    parser.add_argument("--keep", action="store_true", help="Leave the cluster running.")
    options = parser.parse_args(argv)
    cluster: Cluster = Galera() if options.cluster == "galera" else PostgreSQL()
    rng = random.Random(options.seed)
    workdir = Path(tempfile.mkdtemp(prefix=f"jobclaims-nemesis-{cluster.name}-"))
    runs, log = workdir / "runs", workdir / "racers.log"
    print(f"[nemesis {cluster.name}] seed {options.seed}, {options.windows} windows, in {workdir}")
    started = time.monotonic()
    urls = cluster.start()
    sh(
        sys.executable, "-m", "django", "migrate", "--verbosity", "0",
        env={"DATABASE_URL": urls[0], "DJANGO_SETTINGS_MODULE": "tests.settings",
             "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    answered = threading.Condition()
    racers = [Racer(url, runs, log, answered) for url in urls]
    history, done = History(), threading.Event()
    nemesis = threading.Thread(
        target=inject, args=(cluster, racers, random.Random(rng.random()), history, done)
    )
    windows: list[str] = []
    moments: dict[str, float] = {}
    try:
        nemesis.start()
        for i in range(options.windows):
            window = (FIRST_WINDOW + datetime.timedelta(minutes=i)).isoformat(timespec="minutes")
            windows.append(window)
            chosen = rng.sample(racers, rng.randint(2, RACERS))
            lease, hold = rng.choice(cluster.leases), rng.uniform(0, 0.3)
            moments[window] = time.monotonic()
            for racer in chosen:
                racer.send(window, lease, f"{hold:.2f}")
            # A stalled racer answers when it can; the next window does not wait.
            wait_answers(answered, racers, window, timeout=1)
        done.set()
        nemesis.join()
        cluster.heal()
        for window in windows:
            assert wait_answers(answered, racers, window, timeout=120), f"{window}: no answer"
        # Each window no racer ran, once more after the faults: lost only if
        # its claims keep it from running now.
        sweeper = racers[0]
        for window in [w for w in windows if count_runs(runs)[w] == 0]:
            sweeper.answers.pop(window, None)
            longest = max(cluster.leases)
            sweeper.send(window, longest, 0, longest + 2)
            wait_answers(answered, [sweeper], window, timeout=120)
    finally:
        done.set()
        for racer in racers:
            racer.stop()
        cluster.keep_logs(workdir)
        if not options.keep:
            cluster.stop()
    outcomes = {w: [r.answers.get(w, "no answer") for r in racers if w in r.sent] for w in windows}
    return report(cluster, options, outcomes, moments, read_runs(runs), history, started)


def report(cluster, options, outcomes, moments, found, history, started) -> int:
    ran = Counter({window: len(found.get(window, [])) for window in outcomes})
    doubles = sorted(w for w in outcomes if ran[w] > 1 and broke_the_lease(found[w]))
    taken_over = sorted(w for w in outcomes if ran[w] > 1 and w not in doubles)
    lost = sorted(w for w in outcomes if ran[w] == 0)
    tracebacks: Counter[str] = Counter()
    clean: Counter[str] = Counter()
    for answers in outcomes.values():
        for answer in answers:
            kind, _, detail = answer.partition(" ")
            # One cause, whichever window it struck.
            detail = re.sub(r"\d{4}-\d\d-\d\dT\S+", "WINDOW", detail)
            if kind == "traceback":
                tracebacks[detail[:100]] += 1
            elif kind == "clean":
                cause = detail.split(": ", 1)[-1] if detail.startswith("Could") else detail
                clean[cause[:70]] += 1
    took = time.monotonic() - started
    faults = Counter(fault.kind for fault in history.faults)
    print(
        f"[nemesis {cluster.name}] seed {options.seed}: {len(outcomes)} windows, "
        f"{sum(len(a) for a in outcomes.values())} racer runs in {took:.0f} s; "
        f"faults {dict(sorted(faults.items()))}"
    )
    longest: dict[str, float] = {}
    for fault in history.faults:
        lasted = round(fault.ended - fault.started, 1)
        longest[fault.kind] = max(longest.get(fault.kind, 0.0), lasted)
    print(f"  longest fault of each kind, s: {dict(sorted(longest.items()))}")
    print(f"  runs per window: {dict(sorted(Counter(ran[w] for w in outcomes).items()))}")
    print(f"  clean exits 1 by cause: {dict(clean.most_common(6))}")
    for title, windows in (
        ("ran twice on one lease, or started on an ended one", doubles),
        ("ran again, taken over after its holder stalled past its lease mid-run", taken_over),
        ("lost", lost),
    ):
        print(f"  {title}: {len(windows)}")
        for window in windows[:20]:
            begun = moments[window]
            near = "; ".join(f"{f.kind} {f.detail}" for f in history.around(begun, begun + 8))
            print(f"    {window} {outcomes[window]} faults: {near or 'none'}")
    print(f"  tracebacks: {sum(tracebacks.values())}")
    for cause, count in tracebacks.most_common():
        print(f"    {count} x {cause}")
    return 1 if doubles or lost or tracebacks else 0


if __name__ == "__main__":
    sys.exit(main())
