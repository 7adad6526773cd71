"""One racer of the nemesis: a long-lived process on one node that runs the
test job for each window the orchestrator sends, and says how it ended.

Starting Django for every try would cost more than the race: the process
stays, and each window is a fresh ``call_command`` of the real command,
as cron's run would be. Reads ``WINDOW LEASE HOLD [wait]`` lines on stdin,
writes ``WINDOW OUTCOME DETAIL`` lines on stdout: ``ok`` (ran or stepped
aside; the runs file tells which), ``clean`` (a one-line CommandError) or
``traceback`` (anything else, with its type and first line).
"""

from __future__ import annotations

import io
import sys
import traceback


def main() -> None:
    import django

    django.setup()
    from django.core.management import CommandError, call_command
    from django.db import connections

    print("ready", flush=True)
    for line in sys.stdin:
        window, lease, hold, *wait = line.split()
        args = ["nemesis_job", "--window", window, "--lease", lease, "--hold", hold]
        if wait:
            args += ["--wait", wait[0]]
        try:
            call_command(*args, verbosity=0, stdout=io.StringIO(), stderr=io.StringIO())
            outcome = "ok -"
        except CommandError as error:
            outcome = "clean " + " ".join(str(error).split())[:160]
        except Exception as error:
            cause = error.__cause__ or error
            outcome = f"traceback {type(cause).__name__}: {' '.join(str(cause).split())[:120]}"
            traceback.print_exc(file=sys.stderr)
            # A connection a fault broke must not carry into the next window.
            connections.close_all()
        print(f"{window} {outcome}", flush=True)


if __name__ == "__main__":
    main()
