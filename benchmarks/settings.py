"""Settings for the benchmark: jobclaims alone, on the database DATABASE_URL names.

Only the app being measured is installed, so that each of the dozens of
processes the contention step starts sets Django up quickly. The benchmark
creates and drops a scratch database of its own (the TEST name below), so it
never touches the data at DATABASE_URL and can run beside ``make test``.
"""

from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()

DATABASES = {
    "default": env.db(
        "DATABASE_URL", default=f"sqlite:///{BASE_DIR / '.databases' / 'bench.sqlite3'}"
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["TEST"] = {
        "NAME": str(BASE_DIR / ".databases" / "bench_jobclaims.sqlite3")
    }
else:
    # BENCH_SCRATCH_NAME keeps runs on a shared server apart.
    DATABASES["default"]["TEST"] = {"NAME": env("BENCH_SCRATCH_NAME", default="bench_jobclaims")}
    if DATABASES["default"]["ENGINE"] == "django.db.backends.mysql":
        DATABASES["default"]["TEST"]["CHARSET"] = "utf8mb4"

INSTALLED_APPS = ["jobclaims"]
# The peers timed beside the claim (benchmarks/peers.py), where installed
# (setup.cfg's bench extra): django-db-mutex keeps its locks in a model.
try:
    import db_mutex  # noqa: F401
except ImportError:
    pass
else:
    INSTALLED_APPS += ["db_mutex"]

SECRET_KEY = "benchmarks-only"
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# The fleet benchmark's job command; its scheduler processes and their jobs
# are told the scratch database's name, which the benchmark created.
INSTALLED_APPS += ["benchmarks.fleetapp"]
if scratch := env("BENCH_DATABASE_NAME", default=""):
    DATABASES["default"]["NAME"] = scratch

# The task fires benchmark (benchmarks/task_fires.py): a django-tasks-db queue in
# the scratch database, and the schedules it hands its schedulers (JSON).
if env.bool("BENCH_TASKS", default=False):
    import importlib.util
    import json

    INSTALLED_APPS += ["django_tasks_db"]
    if importlib.util.find_spec("django.tasks") is None:
        INSTALLED_APPS += ["django_tasks"]
    TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
    JOBCLAIMS = {"TASK_SCHEDULES": json.loads(env("BENCH_TASK_SCHEDULES", default="{}"))}

# The retention benchmark (benchmarks/retention.py): how often its schedulers
# prune, in seconds, to the default bounds (30 days, 10,000 rows per job).
if retention_every := env("BENCH_RETENTION_EVERY", default=""):
    import datetime

    JOBCLAIMS = {
        **globals().get("JOBCLAIMS", {}),
        "RETENTION_EVERY": datetime.timedelta(seconds=float(retention_every)),
    }
