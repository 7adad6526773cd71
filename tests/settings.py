"""Settings for the test suite: the database comes from DATABASE_URL.

SQLite tests use a file, not memory, so that the real processes the
concurrency tests start can open the same test database.
"""

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

# tests/test_pgbouncer.py sends the processes it races through PgBouncer
# ("host:port"): the same server and test database, reached another way.
# Transaction pooling gives each transaction whichever server connection is
# free, and a server-side cursor cannot outlive its transaction there.
if pooler := env("TESTS_POSTGRES_POOLER", default=""):
    pooler_host, _, pooler_port = pooler.rpartition(":")
    DATABASES["default"].update(
        HOST=pooler_host, PORT=pooler_port, DISABLE_SERVER_SIDE_CURSORS=True
    )

# tests/test_pg_failover.py gives the job processes it starts a short wait
# for a standby that does not answer, in seconds.
if standby_timeout := env("TESTS_STANDBY_TIMEOUT", default=""):
    import datetime

    JOBCLAIMS = {"STANDBY_TIMEOUT": datetime.timedelta(seconds=float(standby_timeout))}

# tests/test_isolation.py runs real processes under the stricter isolation
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

# A read replica for tests/test_routers.py: the same database under another
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
    # The health page of the health extra (tests/test_health_check.py).
    "health_check",
]

# tests/test_prometheus.py runs real jobs that count their claims in
# Prometheus metrics, and may add them up in a node_exporter textfile. Only
# there: a receiver of run_finished costs each release a read, which the
# tests that count a claim's statements would see.
if env.bool("TESTS_PROMETHEUS", default=False):
    INSTALLED_APPS.append("jobclaims.contrib.prometheus")
# tests/test_celery.py's check of a task that has @claimed under @shared_task.
if env.bool("TESTS_MISORDERED_APP", default=False):
    INSTALLED_APPS.append("tests.misordered")
if textfile := env("TESTS_METRICS_TEXTFILE", default=""):
    JOBCLAIMS = {"METRICS_TEXTFILE": textfile}

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
# tests/test_prometheus_server.py serves the metrics view to a real Prometheus.
ALLOWED_HOSTS = env.list("TESTS_ALLOWED_HOSTS", default=[])
SECRET_KEY = "tests-only"
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# The browser test's live server serves the admin's and jobclaims' static files.
STATIC_URL = "static/"

# tests/test_checks.py runs jobs that write claims to JOBCLAIMS["DATABASE"],
# a second alias (named by the variable) of the same database, with no
# router: the setup the docs give for claims kept apart.
# A raced process opens its parent's test databases (JOBCLAIMS_DATABASE_NAMES);
# the parent has no such alias, so this one follows "default" there.
if claims_alias := env("TESTS_CLAIMS_ALIAS", default=""):
    import json

    names = json.loads(env("JOBCLAIMS_DATABASE_NAMES", default="{}"))
    DATABASES[claims_alias] = {
        **DATABASES["default"],
        "NAME": names.get("default", DATABASES["default"]["NAME"]),
        "TEST": {},
    }
    JOBCLAIMS = {"DATABASE": claims_alias}
