"""The admin UI in a real headless Chromium, against the real stack: what an operator
does in it reaches the gateway."""
from __future__ import annotations

import threading
import time

from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC


def _row_with(ui, text: str):
    return ui.find("table.grid").find_element(
        By.XPATH, f".//tr[td[contains(normalize-space(.), '{text}')]]")


def test_operator_sets_up_a_model_in_the_browser_and_the_key_works(own_stack, ui):
    stack = own_stack  # it counts what the whole stack holds: a stack of its own
    backend_url = stack.start_backend("ui-chat-a")
    ui.sign_in_with_the_keyboard("olga")

    ui.create("models", {"name": "ui-chat", "timeout_ms": "5000"})
    assert "Created model ui-chat." in ui.text()

    # A mistake first: the form names the field and keeps what was typed.
    ui.open("/backends/new")
    ui.fill({"name": "ui-chat-a", "model_id": "ui-chat", "url": "localhost:99999",
             "protocol": "openai"})
    ui.submit()
    error = ui.wait(EC.presence_of_element_located((By.ID, "url-error")))
    assert "URL must be a URL of the form http[s]://host:port[/base]" in error.text
    assert ui.find("#url").get_attribute("aria-invalid") == "true"
    assert ui.find("#name").get_attribute("value") == "ui-chat-a"
    ui.screenshot("backend-form-errors.png")
    ui.fill({"url": backend_url})
    ui.submit()
    ui.wait(EC.presence_of_element_located((By.CSS_SELECTOR, ".flash")))
    assert "Created backend ui-chat-a." in ui.text()

    ui.create("consumers", {"name": "ui-team"})
    ui.create("keys", {"consumer_id": "ui-team", "name": "from the browser"})
    key = ui.find("#new-key").get_attribute("value")
    assert key.startswith("sk-") and "shown only this once" in ui.text()

    stack.wait_served()
    resp = stack.chat(key, "ui-chat", text="from the UI")
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["message"]["content"] == "echo: from the UI"
    assert resp.headers["X-Demo-Backend"] == "ui-chat-a"

    # Only the prefix is shown from now on; revoking asks first, then the gateway
    # refuses the key.
    ui.open("/keys/")
    assert key not in ui.text() and key[:10] + "…" in ui.text()
    _row_with(ui, key[:10]).find_element(By.XPATH, ".//button[starts-with(., 'Revoke')]").click()
    ui.wait(EC.alert_is_present()).dismiss()   # "no": nothing happens
    assert key[:10] in ui.text()
    _row_with(ui, key[:10]).find_element(By.XPATH, ".//button[starts-with(., 'Revoke')]").click()
    ui.wait(EC.alert_is_present()).accept()
    ui.wait(EC.text_to_be_present_in_element((By.CSS_SELECTOR, ".flash"), "Revoked API key"))
    stack.wait_served()
    assert stack.chat(key, "ui-chat").status_code == 403

    # Every one of those changes is in the audit trail under the operator's name.
    ui.open("/audit/?actor=ui:olga")
    text = ui.text()
    for resource in ("model #", "backend #", "consumer #", "key #"):
        assert resource in text
    assert text.count("delete") >= 1 and "[redacted]" in text  # the key's hash
    ui.screenshot("audit.png")


def test_drain_toggle_moves_traffic_away_and_back(own_stack, ui):
    stack = own_stack  # it counts what the whole stack holds: a stack of its own
    urls = {name: stack.start_backend(name) for name in ("dr-a", "dr-b")}
    admin = stack.admin
    model = admin.create("models", name="drain-me")
    for name, url in urls.items():
        admin.create("backends", name=name, model_id=model["id"], url=url,
                     protocol="openai", weight=100)
    consumer = admin.create("consumers", name="drainers")
    key = admin.create("keys", consumer_id=consumer["id"])["key"]
    ui.sign_in_with_the_keyboard("olga")

    ui.open("/backends/")
    _row_with(ui, "dr-a").find_element(By.XPATH, ".//button[starts-with(., 'Drain')]").click()
    ui.wait(EC.alert_is_present()).accept()
    ui.wait(EC.text_to_be_present_in_element((By.CSS_SELECTOR, ".flash"), "Drained backend"))
    stack.wait_served()
    seen = {stack.chat(key, "drain-me").headers["X-Demo-Backend"] for _ in range(8)}
    assert seen == {"dr-b"}

    _row_with(ui, "dr-a").find_element(By.XPATH, ".//button[starts-with(., 'Restore')]").click()
    ui.wait(EC.text_to_be_present_in_element((By.CSS_SELECTOR, ".flash"), "weight 100"))
    stack.wait_served()
    # Counting, not timing: with equal weights 40 requests all landing on one
    # backend would have odds of about 1 in 10^12.
    seen = {stack.chat(key, "drain-me").headers["X-Demo-Backend"] for _ in range(40)}
    assert seen == {"dr-a", "dr-b"}


def test_dashboard_shows_acked_versions_and_refreshes_in_place(own_stack, ui):
    stack = own_stack  # it counts what the whole stack holds: a stack of its own
    ui.sign_in_with_the_keyboard("olga")
    stack.wait_served()
    ui.open("/")
    version = str(stack.admin.config_version())
    ui.wait(EC.text_to_be_present_in_element((By.ID, "gateway-rows"), "in sync"))
    ui.wait(lambda d: version in d.find_element(By.CSS_SELECTOR, "#gateway-rows tr").text)
    ui.driver.execute_script("window.__stillHere = true;")

    stack.admin.create("models", name="appears-live")
    stack.wait_served()
    newer = str(stack.admin.config_version())
    ui.wait(EC.text_to_be_present_in_element(
        (By.CSS_SELECTOR, "[data-field='version']"), newer))
    ui.wait(lambda d: newer in d.find_element(By.ID, "gateway-rows").text
            and "in sync" in d.find_element(By.ID, "gateway-rows").text)
    ui.wait(EC.presence_of_element_located((By.CSS_SELECTOR, "tr[data-model='appears-live']")))
    assert ui.driver.execute_script("return window.__stillHere === true;"), \
        "the page reloaded instead of refreshing in place"


def _metric(ui, model: str, column: int) -> float | None:
    cells = ui.driver.find_elements(
        By.CSS_SELECTOR, f"tr[data-model='{model}'] .metric-value")
    raw = cells[column].get_attribute("data-value") if len(cells) > column else ""
    return float(raw) if raw else None


def test_dashboard_charts_live_traffic_per_model(own_stack, demo, ui):
    stack = own_stack  # it counts what the whole stack holds: a stack of its own
    ui.sign_in_with_the_keyboard("olga")
    ui.open("/")
    key = demo["key"]["key"]
    stop = threading.Event()
    sent = []

    def traffic():  # bounded: at most 1000 requests, to 127.0.0.1 only
        while not stop.is_set() and len(sent) < 1000:
            sent.append(stack.chat(key, "chat-demo").status_code)
            time.sleep(0.02)

    worker = threading.Thread(target=traffic)
    worker.start()
    try:
        ui.wait(lambda _d: (_metric(ui, "chat-demo", 0) or 0) > 0
                and _metric(ui, "chat-demo", 2) is not None, timeout=40)
        # a few more readings, so the charts have a line to draw
        ui.wait(lambda d: len(d.find_element(
            By.CSS_SELECTOR, "tr[data-model='chat-demo'] svg.spark polyline")
            .get_attribute("points").split()) >= 5, timeout=60)
    finally:
        stop.set()
        worker.join()
    assert set(sent) == {200}
    ui.wait(lambda _d: _metric(ui, "chat-demo", 1) == 0)  # no 5xx among them
    # the Waiting column: requests in the gateways' queues now (none: never saturated);
    # the last one, realtime sessions open now (chat-demo has no realtime backend)
    ui.wait(lambda d: d.find_element(
        By.CSS_SELECTOR, "tr[data-model='chat-demo'] td:nth-child(5)").text == "0")
    ui.wait(lambda d: d.find_element(
        By.CSS_SELECTOR, "tr[data-model='chat-demo'] td:last-child").text == "0")
    ui.wait(lambda d: "chat-a" in d.find_element(By.CSS_SELECTOR, "#backend-rows tr").text
            and "serving" in d.find_element(By.CSS_SELECTOR, "#backend-rows tr").text)
    ui.screenshot("dashboard.png")


def test_a_viewer_sees_everything_and_can_change_nothing(own_stack, ui):
    stack = own_stack  # it counts what the whole stack holds: a stack of its own
    model = stack.admin.create("models", name="look-dont-touch")
    ui.sign_in_with_the_keyboard("vik")
    assert "viewer" in ui.find(".whoami").text

    ui.open("/models/")
    assert "look-dont-touch" in ui.text()
    assert not ui.driver.find_elements(By.LINK_TEXT, "New model")
    assert not ui.driver.find_elements(By.XPATH, "//button[starts-with(., 'Delete')]")

    ui.open(f"/models/{model['id']}")
    assert ui.find("fieldset").get_attribute("disabled") is not None
    assert not ui.driver.find_elements(By.CSS_SELECTOR, "button.primary")

    # Past the hidden buttons: a hand-made POST with a valid CSRF token is still refused.
    token = ui.find("input[name='csrf_token']").get_attribute("value")
    statuses = ui.driver.execute_async_script("""
        const [token, paths, done] = arguments;
        Promise.all(paths.map((p) => fetch(p, {method: 'POST', credentials: 'same-origin',
            body: new URLSearchParams({csrf_token: token, name: 'hacked'})})
          .then((r) => r.status))).then(done);
    """, token, [f"/admin/models/{model['id']}", f"/admin/models/{model['id']}/delete",
                 "/admin/models/new"])
    assert statuses == [403, 403, 403]
    assert [m["name"] for m in stack.admin.list("models")] == ["look-dont-touch"]

    # Read-only pages are all there for a viewer.
    plan = stack.admin.create("plans", name="starter", daily_requests=1000)
    stack.admin.create("consumers", name="on-starter", plan_id=plan["id"])
    ui.open("/plans/")
    ui.find("a.button[href$='/admin/usage/']").click()
    ui.wait(EC.title_contains("Quota usage"))
    assert "on-starter" in ui.text() and "0 / 1,000" in ui.text()
    ui.screenshot("usage.png")


def test_signing_out_returns_to_the_login_page(own_stack, ui):
    stack = own_stack  # it counts what the whole stack holds: a stack of its own
    ui.sign_in_with_the_keyboard("olga")
    ui.find(".whoami button").click()
    ui.wait(EC.text_to_be_present_in_element((By.CSS_SELECTOR, ".flash"), "signed out"))
    ui.open("/models/")
    assert ui.driver.current_url.split("?")[0].endswith("/admin/login")


# The words of each table header that the browser laid out over more than one line.
_BROKEN_HEADER_WORDS = """
const broken = [];
for (const th of document.querySelectorAll("table.grid th")) {
  const walker = document.createTreeWalker(th, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    for (const m of node.data.matchAll(/\\S+/g)) {
      const range = document.createRange();
      range.setStart(node, m.index);
      range.setEnd(node, m.index + m[0].length);
      const lines = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
      if (lines.size > 1) broken.push(m[0]);
    }
  }
}
return broken;
"""


def test_column_headers_break_between_words_only(own_stack, ui):
    """The Gateways page has many columns and long cells (boot ids, times, errors);
    its headers may wrap between words, never inside one ("Joine d", "Stat e")."""
    ui.sign_in_with_the_keyboard("olga")
    own_stack.wait_served()
    # a second, unreachable gateway: the controller's push error fills its row
    gw = own_stack.admin.create("gateways", name="a-gateway-with-a-rather-long-name",
                            internal_url="http://127.0.0.1:9/a/rather/long/internal/path")
    try:
        ui.open("/gateways/")

        def errored(d) -> bool:   # the page does not refresh by itself
            if "connection refused" in d.find_element(By.CSS_SELECTOR,
                                                       "table.grid").text.lower():
                return True
            d.refresh()
            return False
        ui.wait(errored, timeout=30)
        headers = [th.text for th in ui.driver.find_elements(By.CSS_SELECTOR, "table.grid th")]
        assert "Joined" in headers and "State" in headers, headers
        ui.screenshot("gateways.png")
        assert ui.driver.execute_script(_BROKEN_HEADER_WORDS) == []
        for page in ("/backends/", "/logs/"):
            ui.open(page)
            assert ui.driver.execute_script(_BROKEN_HEADER_WORDS) == [], page
    finally:
        own_stack.admin.delete("gateways", gw["id"])
