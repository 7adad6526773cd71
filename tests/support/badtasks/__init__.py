"""A Django app whose claimed Celery task gives an option it cannot run with.

Installed only where a test asks for it (``TESTS_BAD_TASKS_APP``): check
jobclaims.E008 names the option, where it once ended ``manage.py check``
and ``migrate`` in a traceback.
"""
