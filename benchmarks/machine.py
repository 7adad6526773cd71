"""What the figures were measured on: the machine and the database.

The floor is mostly the cost of making a commit durable, so the settings
that decide it (fsync, synchronous commit) are recorded with the version.
"""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import django
from django.db.backends.base.base import BaseDatabaseWrapper

_VERSION_AND_DURABILITY = {
    "postgresql": (
        "PostgreSQL",
        "SHOW server_version",
        ["SHOW fsync", "SHOW synchronous_commit"],
    ),
    "mysql": (
        "MariaDB",
        "SELECT VERSION()",
        ["SELECT @@innodb_flush_log_at_trx_commit", "SELECT @@sync_binlog"],
    ),
    "sqlite": (
        "SQLite",
        "SELECT sqlite_version()",
        ["PRAGMA journal_mode", "PRAGMA synchronous"],
    ),
}


def database(connection: BaseDatabaseWrapper) -> dict[str, Any]:
    name, version_query, durability_queries = _VERSION_AND_DURABILITY[connection.vendor]
    with connection.cursor() as cursor:
        cursor.execute(version_query)
        version = str(cursor.fetchone()[0])
        durability = {}
        for query in durability_queries:
            cursor.execute(query)
            durability[query.split()[-1].lstrip("@")] = str(cursor.fetchone()[0])
    return {
        "vendor": connection.vendor,
        "name": name,
        "version": version,
        "durability": durability,
    }


def describe() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "cpu": _cpu_model(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "system": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "django": django.get_version(),
        "load_average_before": load_average(),
    }


def code() -> dict[str, Any]:
    """The commit measured, and the app's files changed since it, if any.

    Figures are only comparable between runs of the same code.
    """
    root = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str:
        try:
            return subprocess.run(
                ["git", *args], cwd=root, capture_output=True, text=True, check=True
            ).stdout
        except (OSError, subprocess.CalledProcessError):
            return ""

    changed = git("status", "--porcelain", "--", "jobclaims")
    return {
        "commit": git("rev-parse", "--short", "HEAD").strip() or "unknown",
        "changed": [line[3:] for line in changed.splitlines()],
    }


def load_average() -> list[float]:
    """The 1, 5 and 15-minute load: how busy the shared machine was."""
    return [round(load, 2) for load in os.getloadavg()]


def _cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"
