"""The schedules page in a real browser: Debian's headless Chromium via Selenium.

The browser, its sign-in and its screenshots are tests/admin/test_admin_browser.py's
(scripts/install-browser installs Chromium); the screenshot of the page lands
in test-output/admin-schedules.png, at 1280 pixels, and docs/admin-schedules.png is a copy.
"""

from __future__ import annotations

import datetime

import pytest
from django.contrib.auth.models import Permission, User
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement

from jobclaims.claims.rule import State
from jobclaims.models import JobPause, JobRun, SchedulerSeen
from jobclaims.testing import schedules_in_force_since
from jobclaims.time.clock import database_now
from tests.admin import test_admin_browser as chromium
from tests.admin.test_schedules_admin import wait_until_finished
from tests.support.factories import claim_in_state

pytestmark = pytest.mark.django_db(transaction=True)

browser = chromium.browser
DAY = datetime.timedelta(days=1)


def signed_in(browser: WebDriver, live_server, name: str, *codenames: str) -> None:
    user = User.objects.create_user(name, password="a long passphrase", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    chromium.log_in(browser, live_server, user)
    # From the claims' list, where the log-in lands, by its link to the page.
    chromium.follow(
        browser, browser.find_element(By.CSS_SELECTOR, ".object-tools .jobclaims-schedules-link")
    )


def row(browser: WebDriver, job: str) -> WebElement:
    return browser.find_element(By.CSS_SELECTOR, f"tr[data-job='{job}']")


def press(browser: WebDriver, job: str, action: str) -> str:
    """Press ``job``'s ``action`` button; the message the page answers with."""
    chromium.follow(
        browser, row(browser, job).find_element(By.CSS_SELECTOR, f"button[value='{action}']")
    )
    return browser.find_element(By.CSS_SELECTOR, ".messagelist li").text


def history(now: datetime.datetime) -> None:
    """A fortnight of nightly runs of varied lengths, one failed and two
    nights missed; a running tick; a live scheduler."""
    schedules_in_force_since(14 * DAY)
    for ago in range(1, 15):
        if ago in (4, 9):
            continue
        state = State.FAILED if ago == 6 else State.SUCCEEDED
        run = claim_in_state(
            state, "nightly_latest", f"{(now - ago * DAY).date()}T00:00+00:00", age=ago * DAY
        )
        assert run.finished_at is not None
        took = datetime.timedelta(seconds=40 + (ago * 37) % 90)
        JobRun.objects.filter(pk=run.pk).update(claimed_at=run.finished_at - took)
    claim_in_state(State.ACTIVE, "tick", f"{now:%Y-%m-%dT%H:%M:%S}+00:00")
    SchedulerSeen.objects.create(
        host="web-1", pid=4242, schedules={"nightly_latest": "0 0 * * *"}, fingerprint="f"
    )


def test_an_operator_pauses_resumes_runs_now_and_cancels_from_the_page(browser, live_server):
    history(database_now())
    signed_in(
        browser,
        live_server,
        "carol",
        "view_jobrun",
        "change_jobrun",
        "view_jobpause",
        "add_jobpause",
    )
    nightly = row(browser, "nightly_latest")
    assert "At 00:00 every day" in nightly.text
    assert len(nightly.find_elements(By.CSS_SELECTOR, ".jobclaims-fires li")) == 5
    assert len(nightly.find_elements(By.CSS_SELECTOR, "svg.jobclaims-sparkline rect")) == 12
    assert "web-1 (pid 4242)" in nightly.text

    row(browser, "nightly_latest").find_element(By.NAME, "reason").send_keys("the bank is down")
    assert press(browser, "nightly_latest", "pause").startswith("Paused nightly_latest:")
    assert JobPause.objects.in_force().filter(job="nightly_latest").exists()
    assert "paused" in row(browser, "nightly_latest").text
    # At 1280 pixels, beside the admin's sidebar: every column and button, no sideways scroll.
    assert chromium.hidden_sideways(browser, "#result_list th, #result_list td, button") == []
    assert browser.execute_script(
        "return document.documentElement.scrollWidth <= document.documentElement.clientWidth"
    )
    chromium.screenshot(browser, "admin-schedules.png")

    assert press(browser, "nightly_latest", "resume").startswith("Resumed nightly_latest:")
    assert press(browser, "nightly_latest", "run").startswith("Started nightly_latest ")
    today = f"{database_now().date()}T00:00+00:00"
    assert wait_until_finished("nightly_latest", today).status == JobRun.Status.SUCCEEDED
    browser.refresh()
    assert (
        "succeeded"
        in row(browser, "nightly_latest").find_element(By.CSS_SELECTOR, ".field-last-run").text
    )

    assert (
        press(browser, "tick", "cancel")
        == "Cancelled 1 run of tick: its process is told and stops."
    )
    assert JobRun.objects.get(job="tick").status == JobRun.Status.CANCELLED
    assert not row(browser, "tick").find_elements(By.CSS_SELECTOR, "button[value='cancel']")


def test_a_view_only_user_sees_the_page_without_a_button(browser, live_server):
    history(database_now())
    signed_in(browser, live_server, "vera", "view_jobrun", "view_jobpause")
    assert "At 00:00 every day" in row(browser, "nightly_latest").text
    assert browser.find_elements(By.CSS_SELECTOR, "#result_list tbody tr")
    assert not browser.find_elements(By.CSS_SELECTOR, "button[name='action']")
    assert not browser.find_elements(By.CSS_SELECTOR, "td.field-actions")
