// Sluice admin: confirmation of destructive actions, copy buttons, and the dashboard's
// live refresh. No framework; works without it too (except the live refresh).
"use strict";

document.addEventListener("submit", (event) => {
  const message = event.target.dataset.confirm;
  if (message && !window.confirm(message)) {
    event.preventDefault();
  }
});

document.addEventListener("click", (event) => {
  const button = event.target.closest("[data-copy]");
  if (!button) return;
  const input = document.getElementById(button.dataset.copy);
  input.select();
  if (navigator.clipboard) {
    navigator.clipboard.writeText(input.value).then(() => { button.textContent = "Copied"; },
      () => { button.textContent = "Press Ctrl+C"; });
  }
});

function cell(text, className) {
  const td = document.createElement("td");
  if (className) {
    const span = document.createElement("span");
    span.className = className;
    span.textContent = text;
    td.appendChild(span);
  } else {
    td.textContent = text;
  }
  return td;
}

function renderGateways(tbody, gateways) {
  const rows = gateways.map((gw) => {
    const tr = document.createElement("tr");
    tr.append(cell(gw.name), cell(gw.internal_url),
      cell(gw.acked_version === null ? "—" : String(gw.acked_version)),
      cell(gw.state, "state " + (gw.in_sync ? "ok" : "warn")),
      cell(gw.last_push_at || "—"), cell(gw.last_error || ""));
    return tr;
  });
  if (rows.length === 0) {
    const tr = document.createElement("tr");
    const td = cell("No gateway has been registered yet: the controller adds them as it pushes.");
    td.colSpan = 6;
    td.className = "empty";
    tr.append(td);
    rows.push(tr);
  }
  tbody.replaceChildren(...rows);
}

function startDashboard(root) {
  const url = root.dataset.statusUrl;
  const every = Number(root.dataset.refreshMs) || 2000;
  const stateLine = document.getElementById("refresh-state");
  async function refresh() {
    try {
      const resp = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
      if (resp.status === 401) { window.location.reload(); return; }
      if (!resp.ok) throw new Error("HTTP " + resp.status);
      const status = await resp.json();
      root.querySelector('[data-field="version"]').textContent = status.version;
      root.querySelector('[data-field="drained_backends"]').textContent = status.drained_backends;
      for (const [kind, n] of Object.entries(status.counts)) {
        const el = root.querySelector('[data-field="counts.' + kind + '"]');
        if (el) el.textContent = n;
      }
      renderGateways(document.getElementById("gateway-rows"), status.gateways);
      stateLine.textContent = "Updated " + new Date().toLocaleTimeString() + "; refreshes every " + every / 1000 + " s.";
      root.dataset.refreshedAt = String(Date.now());
    } catch (err) {
      stateLine.textContent = "Could not refresh (" + err.message + "); retrying.";
    }
  }
  window.setInterval(refresh, every);
}

const dashboard = document.getElementById("dashboard");
if (dashboard) startDashboard(dashboard);
