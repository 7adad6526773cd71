"""The admin's stored schedules: each change checked, counted, signed and logged."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from jobclaims.admin.stored_schedules import StoredScheduleForm
from jobclaims.controls.schedule_edits import add_schedule, change_schedule
from jobclaims.models import StoredSchedule

pytestmark = pytest.mark.django_db

ADD = reverse("admin:jobclaims_storedschedule_add")
CHANGELIST = reverse("admin:jobclaims_storedschedule_changelist")
PERMISSIONS = ("view", "add", "change", "delete")


def staff(name: str, *actions: str) -> Client:
    user = User.objects.create_user(name, is_staff=True)
    codenames = [f"{action}_storedschedule" for action in actions]
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client


def change_url(stored: StoredSchedule) -> str:
    return reverse("admin:jobclaims_storedschedule_change", args=[stored.pk])


def form(**fields: object) -> dict[str, object]:
    return {
        "name": "eu",
        "command": "regions",
        "arguments": "--region eu",
        "expression": "0 3 * * *",
        "time_zone": "Europe/Paris",
        "start": "",
        "end": "",
        "skip_dates": "",
        "max_runs": "",
        "overlap": "",
        **fields,
    }


def fields(**more: object) -> dict[str, object]:
    """The form's fields as the API takes them."""
    return {**form(**more), "max_runs": None}


def test_a_schedule_added_in_the_admin_is_stored_counted_and_logged(changes):
    response = staff("carol", *PERMISSIONS).post(ADD, form())
    assert response.status_code == 302, response.content.decode()
    stored = StoredSchedule.objects.get()
    assert (str(stored), stored.arguments, stored.created_by) == (
        "regions[eu]",
        "--region eu",
        "carol",
    )
    assert changes() == 1
    entry = LogEntry.objects.get()
    assert (entry.action_flag, entry.object_id, entry.user_id) == (
        ADDITION,
        str(stored.pk),
        User.objects.get(username="carol").pk,
    )


def test_a_schedule_that_could_not_run_is_refused_in_the_form_with_the_fix(changes):
    response = staff("carol", *PERMISSIONS).post(ADD, form(expression="0 3 * *"))
    assert response.status_code == 200
    assert "has 4 fields" in response.content.decode()
    assert not StoredSchedule.objects.exists()
    assert changes() == 0


def test_the_change_page_previews_the_next_fires_in_the_schedules_zone():
    stored = add_schedule(by="alice", **fields())
    page = staff("carol", "view").get(change_url(stored)).content.decode()
    # 03:00 in Paris, whatever the project's TIME_ZONE.
    assert page.count(" 03:00:00 CE") == 5


def test_an_edit_is_counted_versioned_and_logged(changes):
    stored = add_schedule(by="alice", **fields())
    response = staff("carol", *PERMISSIONS).post(
        change_url(stored), form(expression="30 4 * * *", read_version=1)
    )
    assert response.status_code == 302, response.content.decode()
    stored.refresh_from_db()
    assert (stored.expression, stored.version, stored.changed_by) == ("30 4 * * *", 2, "carol")
    assert changes() == 2
    assert LogEntry.objects.get().action_flag == CHANGE


def test_an_edit_read_before_another_is_refused_naming_who_and_changes_nothing():
    stored = add_schedule(by="alice", **fields())
    change_schedule("eu", by="bob", expression="15 3 * * *")
    response = staff("carol", *PERMISSIONS).post(
        change_url(stored), form(expression="30 4 * * *", read_version=1)
    )
    assert response.status_code == 200
    assert "bob changed this schedule meanwhile (version 2, not 1)" in response.content.decode()
    assert StoredSchedule.objects.get().expression == "15 3 * * *"
    assert not LogEntry.objects.exists()


def test_an_edit_that_another_overtakes_between_its_check_and_its_save_changes_nothing(
    monkeypatch,
):
    stored = add_schedule(by="alice", **fields())

    def overtaken(form, version):
        change_schedule("eu", by="bob", expression="15 3 * * *")

    monkeypatch.setattr(StoredScheduleForm, "_refuse_a_stale_edit", overtaken)
    response = staff("carol", *PERMISSIONS).post(
        change_url(stored), form(expression="30 4 * * *", read_version=1), follow=True
    )
    assert "was changed by bob meanwhile (version 2, not 1)" in response.content.decode()
    assert StoredSchedule.objects.get().expression == "15 3 * * *"
    assert not LogEntry.objects.exists()


def test_a_deleted_schedule_is_counted_and_logged(changes):
    stored = add_schedule(by="alice", **fields())
    response = staff("carol", *PERMISSIONS).post(
        reverse("admin:jobclaims_storedschedule_delete", args=[stored.pk]), {"post": "yes"}
    )
    assert response.status_code == 302
    assert not StoredSchedule.objects.exists()
    assert changes() == 2
    assert LogEntry.objects.get().action_flag == DELETION


def test_a_view_only_user_sees_the_schedules_and_can_change_nothing(changes):
    stored = add_schedule(by="alice", **fields())
    viewer = staff("victor", "view")
    page = viewer.get(change_url(stored)).content.decode()
    assert "regions[eu]" in page
    assert 'name="_save"' not in page
    assert (
        viewer.post(change_url(stored), form(expression="0 4 * * *", read_version=1)).status_code
        == 403
    )
    assert viewer.post(ADD, form(name="us")).status_code == 403
    delete = reverse("admin:jobclaims_storedschedule_delete", args=[stored.pk])
    assert viewer.post(delete, {"post": "yes"}).status_code == 403
    assert StoredSchedule.objects.get().expression == "0 3 * * *"
    assert changes() == 1


def test_a_post_without_the_csrf_token_is_refused():
    user = User.objects.create_superuser("mallory")
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    assert client.post(ADD, form()).status_code == 403
    assert not StoredSchedule.objects.exists()


def test_hostile_names_and_arguments_are_shown_as_text():
    add_schedule(
        by="alice",
        **fields(name="<b>eu</b>", arguments="--region '<script>x</script>'"),
    )
    page = staff("carol", "view").get(CHANGELIST).content.decode()
    assert "<script>x</script>" not in page
    assert "&lt;script&gt;x&lt;/script&gt;" in page
    assert "<b>eu</b>" not in page
