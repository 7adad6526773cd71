"""Warm processes that race a command many times, for the stress test.

Starting eight Python processes per trial would make 200 trials take many
minutes, so each racer is started once and runs the command in-process on
every trial. Before a trial every racer reads its arguments, says it is
ready and blocks on a shared pipe; one write of one byte per racer wakes
them all together.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from io import StringIO
from typing import IO

from jobclaims.testing import InstanceResult, child_environment

_TRIGGER_VARIABLE = "RACERS_TRIGGER_FD"


class Racers:
    """``count`` warm racers, each with ``env`` added to its environment;
    or one racer per environment in ``envs`` (a racer per Galera node)."""

    def __init__(
        self,
        count: int = 0,
        env: dict[str, str] | None = None,
        envs: list[dict[str, str]] | None = None,
    ):
        envs = envs or [env or {} for _ in range(count)]
        self._trigger_read, self._trigger_write = os.pipe()
        self.processes = [
            subprocess.Popen(
                [sys.executable, "-m", "tests.support.racers"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                pass_fds=[self._trigger_read],
                env={
                    **os.environ,
                    **child_environment(),
                    _TRIGGER_VARIABLE: str(self._trigger_read),
                    **env,
                },
            )
            for env in envs
        ]

    def race(self, *argv: str) -> list[InstanceResult]:
        """Run ``manage.py *argv`` in every racer at the same instant."""
        for process in self.processes:
            stdin, _ = _pipes(process)
            stdin.write(json.dumps(argv) + "\n")
            stdin.flush()
        for process in self.processes:
            assert _pipes(process)[1].readline() == "ready\n"
        os.write(self._trigger_write, b"x" * len(self.processes))
        results = [json.loads(_pipes(p)[1].readline()) for p in self.processes]
        return [
            InstanceResult(**{**result, "claims": tuple(result["claims"])}) for result in results
        ]

    def close(self) -> None:
        for process in self.processes:
            _pipes(process)[0].close()
            process.wait(timeout=30)
        os.close(self._trigger_read)
        os.close(self._trigger_write)


def _pipes(process: subprocess.Popen[str]) -> tuple[IO[str], IO[str]]:
    """A racer's stdin and stdout: it was started with both as pipes."""
    assert process.stdin is not None
    assert process.stdout is not None
    return process.stdin, process.stdout


def _serve() -> None:
    import traceback

    from django.core.management import call_command
    from django.core.management.base import CommandError

    from jobclaims import signals
    from jobclaims.testing import connect_child

    connect_child()
    # What each trial's claims did, as jobclaims.testing's instances report it.
    claims: list[str] = []
    signals.claim_acquired.connect(lambda **kwargs: claims.append("claimed"), weak=False)
    signals.claim_skipped.connect(lambda **kwargs: claims.append("skipped"), weak=False)
    trigger = int(os.environ[_TRIGGER_VARIABLE])
    for line in sys.stdin:
        argv = json.loads(line)
        print("ready", flush=True)
        os.read(trigger, 1)
        claims.clear()
        out, err = StringIO(), StringIO()
        try:
            call_command(*argv, stdout=out, stderr=err)
            returncode = 0
        except CommandError as error:
            err.write(str(error))
            returncode = error.returncode
        except Exception:
            # What manage.py would print before exiting 1: the racer lives on
            # to report it, and to race again.
            err.write(traceback.format_exc())
            returncode = 1
        result = {
            "returncode": returncode,
            "stdout": out.getvalue(),
            "stderr": err.getvalue(),
            "claims": claims,
        }
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    _serve()
