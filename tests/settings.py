"""Settings for the test suite: the database comes from DATABASE_URL.

SQLite tests use a file, not memory, so that the real processes the
concurrency tests start can open the same test database.
"""

import importlib.util
import json
from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()

# SQLite's files live here; git ignores the folder, so make it on first use.
(BASE_DIR / ".databases").mkdir(exist_ok=True)

DATABASES = {
    "default": env.db(
        "DATABASE_URL", default=f"sqlite:///{BASE_DIR / '.databases' / 'tests.sqlite3'}"
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["TEST"] = {"NAME": str(BASE_DIR / ".databases" / "test_jobclaims.sqlite3")}
elif DATABASES["default"]["ENGINE"] == "django.db.backends.mysql":
    DATABASES["default"]["TEST"] = {"CHARSET": "utf8mb4"}

# tests/faults/test_pgbouncer.py sends the processes it races through PgBouncer
# ("host:port"): the same server and test database, reached another way.
# Transaction pooling gives each transaction whichever server connection is
# free, and a server-side cursor cannot outlive its transaction there.
if pooler := env("TESTS_POSTGRES_POOLER", default=""):
    pooler_host, _, pooler_port = pooler.rpartition(":")
    DATABASES["default"].update(
        HOST=pooler_host, PORT=pooler_port, DISABLE_SERVER_SIDE_CURSORS=True
    )

# tests/faults/test_pg_failover.py gives the job processes it starts a short wait
# for a standby that does not answer, in seconds.
if standby_timeout := env("TESTS_STANDBY_TIMEOUT", default=""):
    import datetime

    JOBCLAIMS = {"STANDBY_TIMEOUT": datetime.timedelta(seconds=float(standby_timeout))}

# tests/claims/test_isolation.py runs real processes under the stricter isolation
# a project may choose: REPEATABLE READ or SERIALIZABLE, and SQLite's
# transactions that take the write lock as they begin.
if isolation := env("TESTS_ISOLATION_LEVEL", default=""):
    options = DATABASES["default"].setdefault("OPTIONS", {})
    if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
        import psycopg

        options["isolation_level"] = psycopg.IsolationLevel[isolation.upper().replace(" ", "_")]
    elif DATABASES["default"]["ENGINE"] == "django.db.backends.mysql":
        options["isolation_level"] = isolation
    else:
        options["transaction_mode"] = isolation.upper()

# A read replica for tests/models/test_routers.py: the same database under another
# alias, which the test runner treats as a mirror of default.
DATABASES["replica"] = {**DATABASES["default"], "TEST": {"MIRROR": "default"}}

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "jobclaims",
    "tests.testapp",
    # The health page of the health extra (tests/monitoring/test_health_check.py).
    "health_check",
    # The task queue of tests/scheduling/test_task_fires.py, in the test database.
    "django_tasks_db",
]
# Django 6's tasks framework; on Django 5.2, the django-tasks backport.
if importlib.util.find_spec("django.tasks") is None:
    INSTALLED_APPS.append("django_tasks")
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend", "QUEUES": ["default"]}}

# tests/contrib/test_prometheus.py runs real jobs that count their claims in
# Prometheus metrics, and may add them up in a node_exporter textfile. Only
# there: the other tests' processes have nothing to count.
if env.bool("TESTS_PROMETHEUS", default=False):
    INSTALLED_APPS.append("jobclaims.contrib.prometheus")
# tests/contrib/test_celery.py's check of a task that has @claimed under @shared_task.
if env.bool("TESTS_MISORDERED_APP", default=False):
    INSTALLED_APPS.append("tests.support.misordered")
# tests/package/test_checks.py's check of a claimed task with a bad option.
if env.bool("TESTS_BAD_TASKS_APP", default=False):
    INSTALLED_APPS.append("tests.support.badtasks")
if textfile := env("TESTS_METRICS_TEXTFILE", default=""):
    JOBCLAIMS = {"METRICS_TEXTFILE": textfile}

# tests/contrib/test_alarms.py's and tests/monitoring/test_bounded.py's processes:
# a health timeout short enough for a test to wait out, in seconds.
if health_timeout := env("TESTS_HEALTH_TIMEOUT", default=""):
    import datetime

    JOBCLAIMS = {
        **globals().get("JOBCLAIMS", {}),
        "HEALTH_TIMEOUT": datetime.timedelta(seconds=float(health_timeout)),
    }

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

ROOT_URLCONF = "tests.urls"
# tests/contrib/test_prometheus_server.py serves the metrics view to a real Prometheus.
ALLOWED_HOSTS = env.list("TESTS_ALLOWED_HOSTS", default=[])
SECRET_KEY = "tests-only"
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# The browser test's live server serves the admin's and jobclaims' static files.
STATIC_URL = "static/"

# tests/package/test_checks.py runs jobs that write claims to JOBCLAIMS["DATABASE"],
# a second alias (named by the variable) of the same database, with no
# router: the setup the docs give for claims kept apart.
# A raced process opens its parent's test databases (JOBCLAIMS_DATABASE_NAMES);
# the parent has no such alias, so this one follows "default" there.
if claims_alias := env("TESTS_CLAIMS_ALIAS", default=""):
    names = json.loads(env("JOBCLAIMS_DATABASE_NAMES", default="{}"))
    DATABASES[claims_alias] = {
        **DATABASES["default"],
        "NAME": names.get("default", DATABASES["default"]["NAME"]),
        "TEST": {},
    }
    JOBCLAIMS = {"DATABASE": claims_alias}

# tests/scheduling/test_task_fires.py schedules tasks in the schedulers it starts
# (JSON), and may shorten how long an enqueued fire waits for a worker (seconds).
# Spans are given in seconds.
if task_schedules := env("TESTS_TASK_SCHEDULES", default=""):
    import datetime

    declared: dict[str, object] = {
        name: {
            key: datetime.timedelta(seconds=value)
            if key in ("lease", "jitter", "retry_backoff")
            else value
            for key, value in entry.items()
        }
        for name, entry in json.loads(task_schedules).items()
    }
    # Earlier values held spans only: mypy typed the dict by them.
    JOBCLAIMS = {**globals().get("JOBCLAIMS", {}), "TASK_SCHEDULES": declared}  # type: ignore[dict-item]
if queue_lease := env("TESTS_QUEUE_LEASE", default=""):
    import datetime

    JOBCLAIMS = {
        **globals().get("JOBCLAIMS", {}),
        "QUEUE_LEASE": datetime.timedelta(seconds=float(queue_lease)),
    }

# tests/running/test_checkins.py: the monitors the job processes it starts check
# in with (JSON), how long a check-in may take (seconds), and the local
# endpoint (a DSN) that sentry-sdk sends Sentry's envelopes to.
if monitors := env("TESTS_MONITORS", default=""):
    import datetime

    JOBCLAIMS = {
        **globals().get("JOBCLAIMS", {}),
        "MONITORS": json.loads(monitors),
        "MONITOR_TIMEOUT": datetime.timedelta(
            seconds=float(env("TESTS_MONITOR_TIMEOUT", default="3"))
        ),
    }
if sentry_dsn := env("TESTS_SENTRY_DSN", default=""):
    import sentry_sdk

    # Its default integrations flush what is queued at exit; nothing of the
    # project's own (Django, Celery) is hooked.
    sentry_sdk.init(dsn=sentry_dsn, environment="tests", auto_enabling_integrations=False)
# tests/scheduling/test_retention.py: the schedulers it starts prune this often
# to these bounds (JSON, spans in seconds: age, look_back; and rows per job).
if retention_every := env("TESTS_RETENTION_EVERY", default=""):
    import datetime

    bounds = json.loads(env("TESTS_RETENTION_BOUNDS", default="{}"))
    JOBCLAIMS = {
        **globals().get("JOBCLAIMS", {}),
        "RETENTION_EVERY": datetime.timedelta(seconds=float(retention_every)),
        "HISTORY_MAX_AGE": datetime.timedelta(seconds=bounds["age"]),
        "MISSED_LOOK_BACK": datetime.timedelta(seconds=bounds["look_back"]),
        "HISTORY_MAX_ROWS_PER_JOB": bounds["rows"],
    }
