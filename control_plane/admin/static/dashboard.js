// Sluice dashboard: fetches /admin/status.json every few seconds (with the session
// cookie) and updates the page in place. The gateways' counters are cumulative; two
// readings give requests/s, the share of 5xx answers and p99 latency for the interval.
"use strict";

const HISTORY = 60;          // points per chart (2 minutes at the default 2 s)
const SVG_NS = "http://www.w3.org/2000/svg";

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  if (className) node.className = className;
  return node;
}

function stateCell(text, ok) {
  const td = el("td");
  td.append(el("span", text, "state " + (ok ? "ok" : "warn")));
  return td;
}

// "H200 #0: 62% busy, 81.2 of 139.0 GiB free" per GPU; stale readings say so.
function fmtGpus(gpus) {
  if (!gpus || !gpus.length) return "—";
  return gpus.map((g) => {
    const gib = (mb) => (mb / 1024).toFixed(1);
    const busy = g.utilization_pct == null ? "" : ` ${Math.round(g.utilization_pct)}% busy,`;
    const text = `${g.gpu_class} #${g.index}:${busy} ${gib(g.memory_free_mb)} of ${gib(g.memory_total_mb)} GiB free`;
    return g.stale ? `${text} (stale)` : text;
  }).join("; ");
}

function emptyRow(columns, text) {
  const tr = el("tr");
  const td = el("td", text, "empty");
  td.colSpan = columns;
  tr.append(td);
  return tr;
}

// p99 from cumulative buckets [[upper bound or null (+Inf), count]] of one interval:
// linear within the bucket, as Prometheus' histogram_quantile does.
function quantile(q, buckets) {
  const total = buckets.length ? buckets[buckets.length - 1][1] : 0;
  if (!(total > 0)) return null;
  const rank = q * total;
  let lowerBound = 0, lowerCount = 0;
  for (const [bound, count] of buckets) {
    if (count >= rank) {
      if (bound === null) return lowerBound;  // beyond the last finite bucket
      const inBucket = count - lowerCount;
      return inBucket > 0 ? lowerBound + (bound - lowerBound) * (rank - lowerCount) / inBucket
                          : bound;
    }
    lowerBound = bound === null ? lowerBound : bound;
    lowerCount = count;
  }
  return lowerBound;
}

function bucketDelta(now, before) {
  const old = new Map((before || []).map(([bound, count]) => [String(bound), count]));
  return now.map(([bound, count]) => [bound, count - (old.get(String(bound)) || 0)]);
}

// A small line chart of the latest points, newest on the right; the x axis spans at
// least MIN_SLOTS readings so a fresh page does not stretch two points across it.
const MIN_SLOTS = 12;

function sparkline(points, label) {
  const width = 120, height = 28;
  const svg = document.createElementNS(SVG_NS, "svg");
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("class", "spark");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", label);
  const values = points.filter((v) => v !== null);
  if (values.length < 2) return svg;
  const max = Math.max(...values) || 1;
  const slots = Math.max(points.length, MIN_SLOTS);
  const step = width / (slots - 1);
  const offset = slots - points.length;
  const coords = [];
  points.forEach((v, i) => {
    if (v !== null) coords.push([(offset + i) * step, height - 2 - (v / max) * (height - 4)]);
  });
  const text = (pairs) => pairs.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(" ");
  const area = document.createElementNS(SVG_NS, "polygon");
  area.setAttribute("points", text([[coords[0][0], height], ...coords,
                                     [coords[coords.length - 1][0], height]]));
  const line = document.createElementNS(SVG_NS, "polyline");
  line.setAttribute("points", text(coords));
  svg.append(area, line);
  return svg;
}

// The Requests page prints rates and latencies by the same rules (admin/formats.py):
// req/s with one decimal from 10 up and two significant digits below; whole ms.
function fmtRate(v) {
  if (v === null) return "—";
  if (v <= 0) return "0";
  if (v >= 10) return v.toFixed(1);
  const text = v.toFixed(Math.max(1, 1 - Math.floor(Math.log10(v))));
  return Number(text) >= 10 ? v.toFixed(1) : text;
}
function fmtShare(v) { return v === null ? "—" : (v * 100).toFixed(v < 0.1 ? 2 : 1) + " %"; }
function fmtLatency(v) { return v === null ? "—" : Math.round(v * 1000) + " ms"; }

function metricCell(value, text, history, label) {
  const td = el("td", undefined, "metric");
  const number = el("span", text, "metric-value");
  number.dataset.value = value === null ? "" : String(value);
  td.append(number, sparkline(history, label));
  return td;
}

class Dashboard {
  constructor(root) {
    this.root = root;
    this.url = root.dataset.statusUrl;
    this.every = Number(root.dataset.refreshMs) || 2000;
    this.previous = null;    // the last traffic reading
    this.history = new Map(); // model -> {rps: [], errors: [], p99: []}
    this.stateLine = document.getElementById("refresh-state");
  }

  start() {
    this.refresh();
    window.setInterval(() => this.refresh(), this.every);
  }

  async refresh() {
    try {
      const resp = await fetch(this.url, { credentials: "same-origin", headers: { Accept: "application/json" } });
      if (resp.status === 401) { window.location.reload(); return; }
      if (!resp.ok) throw new Error("HTTP " + resp.status);
      const status = await resp.json();
      this.renderTiles(status);
      this.renderTraffic(status);
      this.renderBackends(status);
      this.renderGateways(status);
      this.stateLine.textContent = `Updated ${new Date().toLocaleTimeString()}; refreshes every ${this.every / 1000} s.`;
      this.root.dataset.refreshedAt = String(Date.now());
    } catch (err) {
      this.stateLine.textContent = `Could not refresh (${err.message}); retrying.`;
    }
  }

  renderTiles(status) {
    this.root.querySelector('[data-field="version"]').textContent = status.version;
    this.root.querySelector('[data-field="drained_backends"]').textContent = status.drained_backends;
    this.root.querySelector('[data-field="fleet.text"]').textContent = status.fleet.text;
    this.root.querySelector('[data-field="fleet.controller"]').textContent = status.fleet.controller || "none";
    for (const [kind, n] of Object.entries(status.counts)) {
      const node = this.root.querySelector(`[data-field="counts.${kind}"]`);
      if (node) node.textContent = n;
    }
  }

  // Per-interval figures for each model; null where there is no earlier reading or
  // the counters went backwards (a gateway restarted).
  rates(traffic) {
    const out = { models: {}, backends: {} };
    const before = this.previous;
    if (!traffic) return out;
    this.previous = traffic;
    if (!before) return out;
    const seconds = traffic.sampled_at - before.sampled_at;
    if (!(seconds > 0)) return out;
    for (const [model, now] of Object.entries(traffic.models)) {
      const old = before.models[model] || { requests: 0, errors: 0, buckets: [] };
      const requests = now.requests - old.requests;
      if (requests < 0) continue;
      out.models[model] = {
        rps: requests / seconds,
        errors: requests > 0 ? (now.errors - old.errors) / requests : null,
        p99: quantile(0.99, bucketDelta(now.buckets, old.buckets)),
      };
    }
    for (const [name, now] of Object.entries(traffic.backends)) {
      const old = before.backends[name] || { requests: 0 };
      const requests = now.requests - old.requests;
      if (requests >= 0) out.backends[name] = requests / seconds;
    }
    return out;
  }

  renderTraffic(status) {
    this.currentRates = this.rates(status.traffic);
    const names = [...new Set([...status.models, ...Object.keys(status.traffic ? status.traffic.models : {})])];
    const rows = names.map((model) => {
      const r = this.currentRates.models[model] || { rps: status.traffic && this.previous ? 0 : null, errors: null, p99: null };
      const h = this.history.get(model) || { rps: [], errors: [], p99: [] };
      for (const key of ["rps", "errors", "p99"]) {
        h[key].push(r[key]);
        if (h[key].length > HISTORY) h[key].shift();
      }
      this.history.set(model, h);
      const tr = el("tr");
      tr.dataset.model = model;
      tr.append(el("td", model),
        metricCell(r.rps, fmtRate(r.rps), h.rps, `requests per second of ${model}`),
        metricCell(r.errors, fmtShare(r.errors), h.errors, `5xx share of ${model}`),
        metricCell(r.p99, fmtLatency(r.p99), h.p99, `p99 latency of ${model}`),
        // requests waiting in the gateways' queues for a slot, now (not a rate)
        el("td", status.traffic && status.traffic.models[model]
          ? String(Math.round(status.traffic.models[model].queued || 0)) : "—"),
        // realtime (WebSocket) sessions open now, all gateways
        el("td", status.traffic && status.traffic.models[model]
          ? String(Math.round(status.traffic.models[model].sessions || 0)) : "—"));
      return tr;
    });
    document.getElementById("traffic-rows").replaceChildren(...(rows.length ? rows : [emptyRow(6, "No models yet.")]));
  }

  renderBackends(status) {
    const rates = this.currentRates.backends;
    const rows = status.backends.map((b) => {
      const tr = el("tr");
      const rps = b.name in rates ? rates[b.name] : (this.previous && status.traffic ? 0 : null);
      const live = (status.traffic && status.traffic.backends[b.name]) || {};
      tr.append(el("td", b.name), el("td", b.model), el("td", String(b.weight)),
        el("td", "weight" in live ? String(Math.round(live.weight)) : "—"),
        stateCell(b.state, b.state === "serving"),
        live.circuit ? stateCell(live.circuit, live.circuit === "closed") : el("td", "—"),
        el("td", fmtRate(rps)), el("td", fmtGpus(b.gpus)));
      return tr;
    });
    document.getElementById("backend-rows").replaceChildren(...(rows.length ? rows : [emptyRow(8, "No backends yet.")]));
  }

  renderGateways(status) {
    const unreachable = status.traffic ? status.traffic.unreachable : {};
    const rows = status.gateways.map((gw) => {
      const tr = el("tr");
      const error = [gw.last_error, gw.name in unreachable ? `metrics: ${unreachable[gw.name]}` : ""]
        .filter(Boolean).join("; ");
      tr.append(el("td", gw.name), el("td", gw.internal_url),
        el("td", gw.acked_version === null ? "—" : String(gw.acked_version)),
        stateCell(gw.state, gw.in_sync), el("td", gw.last_push_at || "—"), el("td", error));
      return tr;
    });
    document.getElementById("gateway-rows").replaceChildren(...(rows.length ? rows
      : [emptyRow(6, "No gateway yet: gateways join by themselves (SLUICE_CONTROL_PLANE_URL), or are listed in SLUICE_GATEWAYS.")]));
  }
}

const root = document.getElementById("dashboard");
if (root) new Dashboard(root).start();
