"""Database routers for tests/models/test_routers.py and tests/package/test_checks.py."""

from __future__ import annotations

from typing import Any


class ReadReplicaRouter:
    """The usual primary/replica split: reads from "replica", writes to "default"."""

    def db_for_read(self, model: type, **hints: Any) -> str:
        return "replica"

    def db_for_write(self, model: type, **hints: Any) -> str:
        return "default"

    def allow_relation(self, obj1: object, obj2: object, **hints: Any) -> bool:
        return True

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool:
        return db == "default"


class WritesToReplicaRouter(ReadReplicaRouter):
    """A misconfigured router that sends writes to the replica as well."""

    def db_for_write(self, model: type, **hints: Any) -> str:
        return "replica"


class ClaimsApartRouter(ReadReplicaRouter):
    """Claims in a database of their own, "replica" here (the tests make it
    no mirror): the jobclaims app is written and migrated there."""

    def db_for_write(self, model: type, **hints: Any) -> str:
        return "replica" if model._meta.app_label == "jobclaims" else "default"  # type: ignore[attr-defined]

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool:
        return db == ("replica" if app_label == "jobclaims" else "default")
