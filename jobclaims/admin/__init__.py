"""The admin: claims and the schedulers seen (``runs``), pauses (``pauses``),
the schedules page with its buttons (``schedules``) and the schedules
operators add at runtime (``stored_schedules``), each registered as
Django's admin autodiscovery imports this package."""

from jobclaims.admin import pauses, runs, schedules, stored_schedules

__all__ = ["pauses", "runs", "schedules", "stored_schedules"]
