"""A Django app whose Celery task has ``@claimed`` under ``@shared_task``, the wrong order.

Installed only where a test asks for it (``TESTS_MISORDERED_APP``), and
imported by a worker only with ``TESTS_CELERY_INCLUDE``: check
jobclaims.E007 and every worker or beat that has the task refuse it.
"""
