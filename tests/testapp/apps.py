import datetime
import os

from django.apps import AppConfig


class TestAppConfig(AppConfig):
    name = "tests.testapp"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from tests.testapp import faults

        faults.install()
        if os.environ.get("TESTAPP_FROZEN_SETTINGS"):
            from tests.testapp import frozen_settings

            frozen_settings.install()
        # Simulates a host whose clock is off: every Python clock in this
        # process (time.time, datetime.now, timezone.now) is shifted.
        offset = os.environ.get("TESTAPP_HOST_CLOCK_OFFSET")
        if offset:
            import time_machine

            shifted = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(
                seconds=float(offset)
            )
            time_machine.travel(shifted, tick=True).start()
