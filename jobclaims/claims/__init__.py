"""Where a claim is decided, read top to bottom.

- ``rule``: what a claim row's state lets the next instance do, in Python,
  as a condition on rows, and in SQL, side by side.
- ``engine``: one claim, from its first statement to a held run or a
  refusal, and the held run's release, renewal and fenced writes.
- ``statements``: the statements every claim sends, and the backend each
  database gets: ``postgresql``, ``mysql`` (MariaDB and MySQL) and
  ``sqlite``, each written whole beside that database's retryable errors.
"""
