"""Where a claim is decided, read top to bottom. Imports time, the settings
and the exceptions only.

- ``rule``: what a claim row's state lets the next instance do, in Python,
  as a condition on rows, and in SQL, side by side.
- ``engine``: one claim, from its first statement to a held run or a
  refusal, and the held run's release, renewal and fenced writes.
- ``statements``: the statements every claim sends, and the backend each
  database gets (``backends``: ``postgresql``, ``mysql`` and ``sqlite``,
  each written whole beside that database's retryable errors).
- ``retries``: which database errors mean "try again", and how long a
  statement keeps trying; ``standby``: a bound on a synchronous standby's wait.
- ``events``: the signals a claim sends, sent robustly.
- ``validation`` and ``charsets``: what a claim may ask for, checked before
  any statement; ``naming``: the claim names of a job's several schedules.
"""
