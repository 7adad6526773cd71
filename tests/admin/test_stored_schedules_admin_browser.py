"""The stored schedules' admin in a real browser: Debian's headless Chromium via Selenium.

The browser, its sign-in and its screenshots are tests/admin/test_admin_browser.py's
(scripts/install-browser installs Chromium); the screenshot of a schedule's page,
its next fires previewed, lands in test-output/admin-stored-schedule.png, at 1280
pixels, and docs/admin-stored-schedule.png is a copy.
"""

from __future__ import annotations

import datetime
from zoneinfo import ZoneInfo

import pytest
from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.contrib.auth.models import Permission, User
from django.urls import reverse
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from jobclaims.controls.schedule_edits import add_schedule
from jobclaims.models import StoredSchedule
from tests.admin import test_admin_browser as chromium
from tests.admin.test_stored_schedules_admin import PERMISSIONS, fields

pytestmark = pytest.mark.django_db(transaction=True)

browser = chromium.browser
PARIS = ZoneInfo("Europe/Paris")
CHANGELIST = reverse("admin:jobclaims_storedschedule_changelist")
HOSTILE_NAME = "<img src=x onerror=alert(1)>"
HOSTILE_ARGUMENTS = "--region '<script>window.hacked=1</script>'"


def signed_in(browser: WebDriver, live_server, name: str, *actions: str) -> User:
    """``name``, with ``actions``' permissions on stored schedules, signed
    in and on their list, reached from the admin's index by its link."""
    user = User.objects.create_user(name, password="a long passphrase", is_staff=True)
    codenames = [f"{action}_storedschedule" for action in actions]
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    # The sign-in leads to the claims' list, which this user may not see.
    chromium.log_in(browser, live_server, user)
    browser.get(f"{live_server.url}{reverse('admin:index')}")
    chromium.follow(browser, browser.find_element(By.LINK_TEXT, "Stored schedules"))
    assert browser.current_url == f"{live_server.url}{CHANGELIST}"
    return user


def absent(browser: WebDriver, selector: str) -> bool:
    """Whether the loaded page has no element ``selector`` finds, asked
    without the implicit wait that would wait for one to come."""
    WebDriverWait(browser, 30).until(
        lambda driver: driver.execute_script("return document.readyState") == "complete"
    )
    browser.implicitly_wait(0)
    try:
        return not browser.find_elements(By.CSS_SELECTOR, selector)
    finally:
        browser.implicitly_wait(5)


def listed(browser: WebDriver) -> dict[str, dict[str, str]]:
    """Each listed schedule, by the words of its first column: its other columns' words."""
    rows = {}
    for row in browser.find_elements(By.CSS_SELECTOR, "#result_list tbody tr"):
        cells = {
            (cell.get_attribute("class") or "").split("field-", 1)[1].split()[0]: cell.text
            for cell in row.find_elements(By.CSS_SELECTOR, "th, td[class*='field-']")
        }
        rows[cells.pop("__str__")] = cells
    return rows


def fill(browser: WebDriver, **values: str) -> None:
    for name, value in values.items():
        field = browser.find_element(By.NAME, name)
        field.clear()
        field.send_keys(value)


def save(browser: WebDriver) -> None:
    chromium.follow(browser, browser.find_element(By.CSS_SELECTOR, "input[name='_save']"))


def open_schedule(browser: WebDriver, shown: str) -> None:
    """From the list, the page of the schedule whose first column reads ``shown``."""
    link = browser.find_element(By.CSS_SELECTOR, "#result_list tbody th.field-__str__ a")
    assert link.text == shown
    chromium.follow(browser, link)


def next_fires(browser: WebDriver) -> list[str]:
    preview = browser.find_element(By.CSS_SELECTOR, ".field-next_fires .readonly")
    return [fire.text for fire in preview.find_elements(By.TAG_NAME, "div")]


def paris_fires(after: datetime.datetime, hour: int, minute: int) -> list[str]:
    """The next five fires of a daily ``hour``:``minute`` in Paris after
    ``after``, as the page words them."""
    day = after.astimezone(PARIS).date()
    fires: list[str] = []
    while len(fires) < 5:
        fire = datetime.datetime.combine(day, datetime.time(hour, minute), tzinfo=PARIS)
        if fire > after:
            fires.append(f"{fire:%Y-%m-%d %H:%M:%S %Z}")
        day += datetime.timedelta(days=1)
    return fires


def history() -> list[tuple[int, str, str]]:
    """The admin log: each entry's action, user and object, oldest first."""
    entries = LogEntry.objects.order_by("pk")
    return list(entries.values_list("action_flag", "user__username", "object_repr"))


def stored() -> list[tuple[str, str, str, str, str, int, str]]:
    return list(
        StoredSchedule.objects.values_list(
            "name", "command", "arguments", "expression", "time_zone", "version", "changed_by"
        )
    )


def test_an_operator_adds_a_schedule_sees_its_next_fires_edits_and_deletes_it(
    browser, live_server, changes
):
    signed_in(browser, live_server, "carol", *PERMISSIONS)
    assert listed(browser) == {}
    chromium.follow(browser, browser.find_element(By.CSS_SELECTOR, ".object-tools a.addlink"))
    # A new schedule has no fires to preview yet, nor a version to hide.
    assert absent(browser, ".field-next_fires, input[name='read_version']")
    fill(
        browser,
        name="eu",
        command="regions",
        arguments="--region eu",
        expression="0 3 * * *",
        time_zone="Europe/Paris",
    )
    save(browser)

    assert browser.current_url == f"{live_server.url}{CHANGELIST}"
    message = browser.find_element(By.CSS_SELECTOR, ".messagelist .success").text
    assert message == "The stored schedule “regions[eu]” was added successfully."
    assert stored() == [("eu", "regions", "--region eu", "0 3 * * *", "Europe/Paris", 1, "carol")]
    assert StoredSchedule.objects.get().created_by == "carol"
    assert changes() == 1
    assert history() == [(ADDITION, "carol", "regions[eu]")]
    row = listed(browser)["regions[eu]"]
    assert (row["expression"], row["time_zone"], row["arguments"], row["version"]) == (
        "0 3 * * *",
        "Europe/Paris",
        "--region eu",
        "1",
    )

    before = datetime.datetime.now(datetime.timezone.utc)
    open_schedule(browser, "regions[eu]")
    shown = next_fires(browser)
    after = datetime.datetime.now(datetime.timezone.utc)
    # 03:00 in Paris, CET or CEST as the date has it, whatever the project's TIME_ZONE (UTC).
    assert shown in (paris_fires(before, 3, 0), paris_fires(after, 3, 0))
    assert all(fire.endswith((" 03:00:00 CET", " 03:00:00 CEST")) for fire in shown)
    assert browser.find_element(By.NAME, "read_version").get_attribute("value") == "1"
    # At 1280 pixels, beside the admin's sidebar: no sideways scroll.
    assert browser.execute_script(
        "return document.documentElement.scrollWidth <= document.documentElement.clientWidth"
    )
    chromium.screenshot(browser, "admin-stored-schedule.png")

    fill(browser, expression="30 4 * * *")
    save(browser)
    assert browser.current_url == f"{live_server.url}{CHANGELIST}"
    message = browser.find_element(By.CSS_SELECTOR, ".messagelist .success").text
    assert message == "The stored schedule “regions[eu]” was changed successfully."
    assert stored() == [("eu", "regions", "--region eu", "30 4 * * *", "Europe/Paris", 2, "carol")]
    assert changes() == 2
    assert history() == [(ADDITION, "carol", "regions[eu]"), (CHANGE, "carol", "regions[eu]")]
    assert LogEntry.objects.get(action_flag=CHANGE).get_change_message() == "Changed Schedule."
    row = listed(browser)["regions[eu]"]
    assert (row["expression"], row["version"]) == ("30 4 * * *", "2")
    assert row["next_fire"].endswith((" 04:30:00 CET", " 04:30:00 CEST"))

    open_schedule(browser, "regions[eu]")
    shown = next_fires(browser)
    assert len(shown) == 5
    assert all(fire.endswith((" 04:30:00 CET", " 04:30:00 CEST")) for fire in shown)
    chromium.follow(browser, browser.find_element(By.CSS_SELECTOR, "a.deletelink"))
    question = browser.find_element(By.CSS_SELECTOR, "#content p").text
    # Its quotes are Django's to choose: straight in 5.2, curly in 6.1.
    assert question.startswith("Are you sure you want to delete the stored schedule ")
    assert "regions[eu]" in question
    # Asked, not yet done.
    assert len(stored()) == 1
    assert changes() == 2
    chromium.follow(browser, browser.find_element(By.CSS_SELECTOR, "#content input[type=submit]"))

    assert browser.current_url == f"{live_server.url}{CHANGELIST}"
    message = browser.find_element(By.CSS_SELECTOR, ".messagelist .success").text
    assert message == "The stored schedule “regions[eu]” was deleted successfully."
    assert stored() == []
    assert changes() == 3
    assert history() == [
        (ADDITION, "carol", "regions[eu]"),
        (CHANGE, "carol", "regions[eu]"),
        (DELETION, "carol", "regions[eu]"),
    ]
    assert listed(browser) == {}


def test_a_schedule_that_could_not_run_is_refused_on_the_page_with_the_fix(
    browser, live_server, changes
):
    signed_in(browser, live_server, "carol", *PERMISSIONS)
    chromium.follow(browser, browser.find_element(By.CSS_SELECTOR, ".object-tools a.addlink"))
    fill(
        browser,
        name="eu",
        command="regions",
        arguments="--region eu",
        expression="0 3 * *",
        time_zone="Europe/Paris",
    )
    save(browser)

    assert browser.find_element(By.CSS_SELECTOR, ".errornote").is_displayed()
    error = browser.find_element(By.CSS_SELECTOR, ".errorlist.nonfield")
    assert error.is_displayed()
    assert "has 4 fields" in error.text
    # The form, as typed, to fix rather than retype.
    assert browser.find_element(By.NAME, "expression").get_attribute("value") == "0 3 * *"
    assert browser.find_element(By.NAME, "arguments").get_attribute("value") == "--region eu"
    assert stored() == []
    assert changes() == 0
    assert history() == []


def test_a_view_only_user_sees_a_schedule_and_no_button_to_change_it(browser, live_server, changes):
    schedule = add_schedule(by="alice", **fields())
    signed_in(browser, live_server, "victor", "view")
    assert listed(browser)["regions[eu]"]["expression"] == "0 3 * * *"
    assert absent(browser, ".object-tools a.addlink")
    assert absent(browser, "select[name='action']")

    open_schedule(browser, "regions[eu]")
    assert browser.find_element(By.CSS_SELECTOR, ".field-expression .readonly").text == (
        "0 3 * * *"
    )
    assert len(next_fires(browser)) == 5
    assert absent(browser, "input[name='_save'], input[name='_continue'], a.deletelink")
    assert absent(browser, "input[name='expression'], input[name='read_version']")

    browser.get(f"{live_server.url}{reverse('admin:jobclaims_storedschedule_add')}")
    assert browser.find_element(By.TAG_NAME, "h1").text == "403 Forbidden"
    delete = reverse("admin:jobclaims_storedschedule_delete", args=[schedule.pk])
    browser.get(f"{live_server.url}{delete}")
    assert browser.find_element(By.TAG_NAME, "h1").text == "403 Forbidden"
    assert stored() == [("eu", "regions", "--region eu", "0 3 * * *", "Europe/Paris", 1, "alice")]
    assert changes() == 1
    assert history() == []


def alerts(browser: WebDriver) -> list[str]:
    """What the page asked ``alert()`` to show, as recorded by the hook
    ``record_alerts()`` installs; none shown leaves no dialog open."""
    try:
        dialog = browser.switch_to.alert
    except NoAlertPresentException:
        pass
    else:
        raise AssertionError(f"an alert is open: {dialog.text!r}")
    recorded: list[str] = browser.execute_script("return window.alerts")
    return recorded


def injected(browser: WebDriver) -> list[str]:
    """The elements of the page the hostile name or arguments would have
    made, had the page taken them for HTML: an ``img`` of ``src=x``, a
    ``script`` that sets ``window.hacked``."""
    made: list[str] = browser.execute_script(
        """
        return [...document.querySelectorAll("img, script")]
            .filter(element => element.getAttribute("src") === "x"
                || element.textContent.includes("window.hacked"))
            .map(element => element.outerHTML);
        """
    )
    return made


def record_alerts(browser: WebDriver) -> None:
    """Record each ``alert()`` of every page from now on, before its own scripts run."""
    browser.execute_cdp_cmd(
        "Page.addScriptToEvaluateOnNewDocument",
        {"source": "window.alerts = []; window.alert = said => window.alerts.push(String(said));"},
    )


def test_hostile_names_and_arguments_are_shown_as_text_and_run_nothing(browser, live_server):
    schedule = add_schedule(by="alice", **fields(name=HOSTILE_NAME, arguments=HOSTILE_ARGUMENTS))
    shown = f"regions[{HOSTILE_NAME}]"
    record_alerts(browser)
    signed_in(browser, live_server, "carol", *PERMISSIONS)
    # The checks see what the hostile name would do, read as HTML: its image
    # is made, and its alert is recorded once the image fails to load.
    browser.execute_script(
        "document.body.insertAdjacentHTML('beforeend', arguments[0])", HOSTILE_NAME
    )
    assert injected(browser) == ['<img src="x" onerror="alert(1)">']
    WebDriverWait(browser, 30).until(lambda driver: alerts(driver) == ["1"])
    browser.refresh()

    row = listed(browser)
    assert list(row) == [shown]
    assert row[shown]["arguments"] == HOSTILE_ARGUMENTS
    assert injected(browser) == []
    assert browser.execute_script("return typeof window.hacked") == "undefined"
    assert alerts(browser) == []

    open_schedule(browser, shown)
    assert browser.find_element(By.CSS_SELECTOR, ".breadcrumbs").text.endswith(shown)
    assert browser.find_element(By.NAME, "name").get_attribute("value") == HOSTILE_NAME
    assert browser.find_element(By.NAME, "arguments").get_attribute("value") == HOSTILE_ARGUMENTS
    assert injected(browser) == []
    assert browser.execute_script("return typeof window.hacked") == "undefined"
    assert alerts(browser) == []

    chromium.follow(browser, browser.find_element(By.CSS_SELECTOR, "a.deletelink"))
    question = browser.find_element(By.CSS_SELECTOR, "#content p").text
    assert question.startswith("Are you sure you want to delete the stored schedule ")
    assert shown in question
    assert injected(browser) == []
    assert browser.execute_script("return typeof window.hacked") == "undefined"
    assert alerts(browser) == []
    assert StoredSchedule.objects.get().pk == schedule.pk
