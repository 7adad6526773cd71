"""What users write, and which jobs exist: ``JobCommand`` (``commands``), its
schedules (``schedules``), ``claim()`` and ``@claimed`` for functions and
tasks (``claiming``), and the one answer to "which jobs exist"
(``discovery``). Imports running, the models and the layers below."""
