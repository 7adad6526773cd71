"""The claims admin in a real browser: Debian's headless Chromium via Selenium.

scripts/install-browser installs /usr/bin/chromium and /usr/bin/chromedriver.
Without them this test fails: a browser proof that silently skips proves
nothing. The screenshots land in test-output/ at the repository's root.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import Permission, User
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.expected_conditions import staleness_of
from selenium.webdriver.support.ui import Select, WebDriverWait

from jobclaims.claims.rule import State
from jobclaims.models import JobRun
from tests.support.factories import claim_in_state

pytestmark = pytest.mark.django_db(transaction=True)

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
OUTPUT = Path(__file__).resolve().parents[2] / "test-output"

# Headless, as root, with nothing that reaches beyond this machine.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    # A laptop's screen: the lists must fit it beside the admin's sidebars.
    "--window-size=1280,800",
)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[WebDriver]:
    missing = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not path.exists()]
    if missing:
        pytest.fail(f"{' and '.join(missing)} not found; run scripts/install-browser")
    if "django.contrib.staticfiles" not in settings.INSTALLED_APPS or not settings.STATIC_URL:
        pytest.fail(
            "the live server cannot serve the admin without static files: add "
            "django.contrib.staticfiles to INSTALLED_APPS and a STATIC_URL"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*FLAGS, f"--user-data-dir={tmp_path / 'profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    driver.implicitly_wait(5)
    yield driver
    driver.quit()


@pytest.fixture
def operator() -> User:
    user = User.objects.create_user("operator", password="a long passphrase", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(codename__in=["view_jobrun", "change_jobrun"])
    )
    return user


def log_in(browser: WebDriver, live_server, user: User) -> None:
    browser.get(f"{live_server.url}/admin/login/?next=/admin/jobclaims/jobrun/")
    browser.find_element(By.NAME, "username").send_keys(user.username)
    browser.find_element(By.NAME, "password").send_keys("a long passphrase")
    follow(browser, browser.find_element(By.CSS_SELECTOR, "input[type=submit]"))


def follow(browser: WebDriver, element: WebElement) -> None:
    """Click ``element`` and wait until the page it leads to has replaced its
    own: until then, what the test reads may be the old page's.

    Asked about the old page while the new one replaces it, chromedriver may
    answer with an error of its own ("Node with given id does not belong to
    the document") rather than call the element stale: the wait asks again.
    """
    page = browser.find_element(By.TAG_NAME, "html")
    element.click()
    WebDriverWait(browser, 30, ignored_exceptions=(WebDriverException,)).until(staleness_of(page))


def badges(browser: WebDriver) -> dict[str, str]:
    """Each listed claim's window and the words on its state badge."""
    shown = {}
    for row in browser.find_elements(By.CSS_SELECTOR, "#result_list tbody tr"):
        window = row.find_element(By.CSS_SELECTOR, ".field-window_key").text.replace("\n", "")
        shown[window] = row.find_element(By.CSS_SELECTOR, ".jobclaims-state").text
    return shown


def background(browser: WebDriver, state: str) -> str:
    badge = browser.find_element(By.CSS_SELECTOR, f"td .jobclaims-state--{state}")
    return badge.value_of_css_property("background-color")


def stylesheet_loaded(browser: WebDriver, name: str) -> bool:
    loaded: bool = browser.execute_script(
        "return [...document.styleSheets].some(sheet =>"
        "  (sheet.href || '').endsWith(arguments[0]) && sheet.cssRules.length > 0)",
        f"/{name}",
    )
    return loaded


def hidden_sideways(browser: WebDriver, selector: str) -> list[str]:
    """The texts of the elements ``selector`` finds that lie, even in part,
    beyond the right edge of the window or of a box that scrolls sideways:
    what a user would have to scroll to see."""
    hidden: list[str] = browser.execute_script(
        """
        const edge = element => {
            let right = document.documentElement.clientWidth;
            for (let box = element.parentElement; box; box = box.parentElement) {
                const style = getComputedStyle(box);
                if (style.overflowX !== "visible") {
                    right = Math.min(right, box.getBoundingClientRect().right);
                }
            }
            return right;
        };
        return [...document.querySelectorAll(arguments[0])]
            .filter(element => element.getBoundingClientRect().right > edge(element) + 0.5)
            .map(element => element.textContent.trim());
        """,
        selector,
    )
    return hidden


def screenshot(browser: WebDriver, name: str) -> Path:
    OUTPUT.mkdir(exist_ok=True)
    path = OUTPUT / name
    assert browser.save_screenshot(str(path)), f"Chromium could not save {path}"
    return path


def test_an_operator_sees_the_claims_filters_them_and_expires_a_stuck_one(
    browser, live_server, operator
):
    active = claim_in_state(State.ACTIVE, "charge_invoices", "2026-11-29T10:00+00:00")
    claim_in_state(State.EXPIRED, "send_reminders", "2026-11-29T09:00+00:00")
    claim_in_state(State.SUCCEEDED, "nightly_report", "2026-11-28")
    claim_in_state(
        State.FAILED,
        "nightly_report",
        "2026-11-27",
        error="Traceback (most recent call last):\nConnectionError: mail server down",
    )
    claim_in_state(State.RETRYING, "sync_ledger", "2026-11-26", failures=1)
    claim_in_state(State.TIMED_OUT, "sync_ledger", "2026-11-25", failures=1)
    claim_in_state(State.CANCELLED, "sync_ledger", "2026-11-24", cancelled_by="alice")
    log_in(browser, live_server, operator)

    assert badges(browser) == {
        "2026-11-29T10:00+00:00": "● active",
        "2026-11-29T09:00+00:00": "⚠ expired",
        "2026-11-28": "✓ succeeded",
        "2026-11-27": "✕ failed",
        "2026-11-26": "↻ retrying",
        "2026-11-25": "◷ timed out",
        "2026-11-24": "⊘ cancelled",
    }
    summary = browser.find_element(By.CSS_SELECTOR, ".jobclaims-summary").text
    assert summary == "1 active, 1 expired"
    assert stylesheet_loaded(browser, "jobclaims/admin.css")
    looks = {state.value: background(browser, state.value) for state in State}
    assert len(set(looks.values())) == len(looks)
    # At 1280 pixels, beside both sidebars: a run's key, state, lease and duration.
    first = ("job", "window_key", "state_badge", "expires", "duration")
    cells = ", ".join(f"#result_list .field-{name}, #result_list .column-{name}" for name in first)
    assert hidden_sideways(browser, cells) == []
    screenshot(browser, "admin-changelist.png")

    browser.execute_cdp_cmd(
        "Emulation.setEmulatedMedia",
        {"features": [{"name": "prefers-color-scheme", "value": "dark"}]},
    )
    assert background(browser, "succeeded") != looks["succeeded"]
    screenshot(browser, "admin-changelist-dark.png")
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})

    filters = browser.find_element(By.ID, "changelist-filter")
    follow(browser, filters.find_element(By.LINK_TEXT, "expired"))
    assert badges(browser) == {"2026-11-29T09:00+00:00": "⚠ expired"}

    filters = browser.find_element(By.ID, "changelist-filter")
    follow(browser, filters.find_element(By.LINK_TEXT, "active"))
    browser.find_element(By.CSS_SELECTOR, f"input[value='{active.pk}']").click()
    Select(browser.find_element(By.NAME, "action")).select_by_visible_text(
        "Expire selected claims now"
    )
    follow(browser, browser.find_element(By.CSS_SELECTOR, "button[name=index]"))

    message = browser.find_element(By.CSS_SELECTOR, ".messagelist .success").text
    assert message.startswith("Expired 1 claim:")
    assert JobRun.objects.expired().filter(pk=active.pk).exists()
    assert browser.find_element(By.CSS_SELECTOR, ".jobclaims-summary").text == (
        "0 active, 2 expired"
    )
