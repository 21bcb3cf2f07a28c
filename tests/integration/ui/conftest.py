"""A real headless Chromium (Debian's, driven through its chromedriver) against the
admin UI of the test's `own_stack` (these tests count what a stack holds): API under
gunicorn, controller, nginx, Postgres."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions as EC
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.support.ui import WebDriverWait

from control_plane.db import make_engine, make_sessionmaker
from control_plane.services import admin_users

REPO = Path(__file__).resolve().parents[3]
SCREENSHOTS = REPO / "artifacts" / "screenshots"
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
PASSWORD = "browser test password"
WAIT_S = 20  # generous: five engineers share two cores


@pytest.fixture(scope="session")
def chromium() -> tuple[str, str]:
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        pytest.fail(f"{', '.join(missing)} missing: run scripts/setup.sh (it installs "
                    "Debian's chromium and chromium-driver)")
    return str(CHROMIUM), str(CHROMEDRIVER)


@pytest.fixture
def browser(chromium):
    binary, driver_path = chromium
    profile = tempfile.mkdtemp(prefix="sluice-chromium-")
    options = Options()
    options.binary_location = binary
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1366,900",
                 f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def ui_users(own_stack):
    """An admin and a viewer in the stack's database, made the way the CLI makes them."""
    engine = make_engine(own_stack.db_url)
    with make_sessionmaker(engine)() as session:
        admin_users.create_user(session, "olga", PASSWORD, "admin")
        admin_users.create_user(session, "vik", PASSWORD, "viewer")
    engine.dispose()
    return {"admin": "olga", "viewer": "vik"}


class Ui:
    """What a person does in the admin UI, in words a test reads easily."""

    def __init__(self, driver, base: str):
        self.driver = driver
        self.base = base

    def wait(self, condition, timeout: float = WAIT_S):
        # The dashboard re-renders its rows every refresh: an element found a moment
        # ago may be gone; that is "not yet", not a failure.
        return WebDriverWait(self.driver, timeout,
                             ignored_exceptions=(StaleElementReferenceException,)
                             ).until(condition)

    def open(self, path: str) -> None:
        self.driver.get(self.base + path)

    def find(self, css: str):
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def text(self) -> str:
        return self.find("body").text

    def sign_in_with_the_keyboard(self, username: str) -> None:
        """Type and press keys only: the login form must work without a mouse."""
        self.open("/login")
        focused = self.driver.switch_to.active_element
        assert focused.get_attribute("id") == "username"
        focused.send_keys(username, Keys.TAB)
        self.driver.switch_to.active_element.send_keys(PASSWORD, Keys.ENTER)
        self.wait(EC.presence_of_element_located((By.CSS_SELECTOR, ".whoami")))

    def fill(self, fields: dict[str, str]) -> None:
        for name, value in fields.items():
            el = self.find(f"[name='{name}']")
            if el.tag_name == "select":
                for option in el.find_elements(By.TAG_NAME, "option"):
                    if option.text == value:
                        option.click()
                        break
                else:
                    raise AssertionError(f"no option {value!r} in {name}")
            else:
                el.clear()
                el.send_keys(value)

    def submit(self) -> None:
        self.find("form button.primary[type='submit']").click()

    def create(self, kind: str, fields: dict[str, str]) -> None:
        self.open(f"/{kind}/new")
        self.fill(fields)
        self.submit()
        self.wait(EC.presence_of_element_located((By.CSS_SELECTOR, ".flash, .warn-box")))

    def screenshot(self, name: str) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / name
        assert self.driver.save_screenshot(str(path)), path
        return path


@pytest.fixture
def ui(own_stack, browser, ui_users) -> Ui:
    return Ui(browser, own_stack.admin_url.replace("/api/v1", "/admin"))
