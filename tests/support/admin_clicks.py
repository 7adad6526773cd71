"""An admin user's click, in a process of its own: ``python -m tests.support.admin_clicks``.

Each process sets Django up on its parent's test databases, signs its user
in, says it is ready and waits on the starting line (a pipe, released by the
parent) before it posts the schedules page's form; then it prints the
messages the page answered with, as JSON, and exits. Two of them are two web
workers serving two admins who click at the same instant.
"""

from __future__ import annotations

import json
import os
import sys

from jobclaims.running.children import connect_child

#: The starting line's read end, passed by the parent.
START_VARIABLE = "ADMIN_CLICKS_START_FD"
READY = "ready"


def main(username: str, action: str, job: str) -> None:
    connect_child()
    from django.contrib.auth.models import User
    from django.test import Client
    from django.test.utils import setup_test_environment
    from django.urls import reverse

    setup_test_environment()
    client = Client()
    client.force_login(User.objects.get(username=username))
    page = reverse("admin:jobclaims_scheduledjob_changelist")
    print(READY, flush=True)
    os.read(int(os.environ[START_VARIABLE]), 1)  # Returns once the line is released.
    response = client.post(page, {"action": action, "job": job}, follow=True)
    said = [str(message) for message in response.context["messages"]]
    print(json.dumps({"status": response.status_code, "messages": said}), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
