// Switchyard admin dashboard, Usage page: reads /admin/usage (the usage
// records of SWITCHYARD_USAGE, summed by the admin service) and draws its
// own SVG charts: nothing is loaded from elsewhere.
"use strict";
window.SwitchyardUsage = function (deps) {
  const { api, el, $ } = deps;
  const SVG = "http://www.w3.org/2000/svg";
  // every refresh runs three reports over the range: longer ranges refresh less often
  const RANGES = {
    "1h": { from: "-1h", interval: "minute", every: 30e3 },
    "24h": { from: "-24h", interval: "hour", every: 60e3 },
    "7d": { from: "-7d", interval: "hour", every: 300e3 },
  };
  const STEP = { minute: 60e3, hour: 3600e3, day: 86400e3 };
  const COLORS = ["#2b6cb0", "#dd6b20", "#2f855a", "#b83280", "#6b46c1", "#718096"];
  const TOP = 5; // series drawn per chart; the rest is "other"
  let range = "24h";
  let timer = null;
  let seq = 0;
  let inFlight = false;

  function svg(tag, attrs, ...kids) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    for (const k of kids) if (k != null) e.append(k);
    return e;
  }

  // ---- number formats ----
  const int = (n) => Math.round(n).toLocaleString("en-US");
  function compact(v) {
    const a = Math.abs(v);
    if (a >= 1e9) return +(v / 1e9).toFixed(1) + "G";
    if (a >= 1e6) return +(v / 1e6).toFixed(1) + "M";
    if (a >= 1e3) return +(v / 1e3).toFixed(1) + "k";
    return String(+v.toFixed(2));
  }
  function usd(v) {
    if (v === 0) return "$0";
    if (Math.abs(v) < 0.01) return "$" + +v.toPrecision(2);
    if (Math.abs(v) < 100) return "$" + v.toFixed(2);
    return "$" + compact(v);
  }
  function ms(v) {
    if (v == null) return "—";
    return v >= 1000 ? +(v / 1000).toFixed(2) + " s" : Math.round(v) + " ms";
  }
  const pct = (v) => +(v * 100).toFixed(1) + "%";
  function costText(g, exact) {
    if (g.cost_usd == null) return g.cost_unknown_requests ? "unknown" : "$0";
    if (exact) return "$" + (g.cost_usd < 1 ? g.cost_usd.toFixed(4) : g.cost_usd.toFixed(2));
    return usd(g.cost_usd);
  }

  // ---- series ----
  // buckets are the starts of every time bucket of the answer's range
  function bucketsOf(ans) {
    const step = STEP[ans.interval];
    const out = [];
    const from = Date.parse(ans.from), to = Date.parse(ans.to);
    for (let t = Math.floor(from / step) * step; t < to; t += step) out.push(t);
    return out;
  }

  function seriesOf(ans) {
    const by = new Map();
    for (const g of ans.groups) {
      const name = g.key.provider ? g.key.provider + "/" + (g.key.model || "?") : "(no attempt)";
      let s = by.get(name);
      if (!s) { s = { name, requests: 0, at: new Map() }; by.set(name, s); }
      s.requests += g.requests;
      s.at.set(Date.parse(g.bucket), g);
    }
    const all = [...by.values()].sort((a, b) => b.requests - a.requests || a.name.localeCompare(b.name));
    const top = all.slice(0, TOP).map((s, i) => ({ ...s, color: COLORS[i] }));
    const rest = all.slice(TOP);
    return { top, rest };
  }

  // line values of one metric for each series (and "other" when the
  // metric adds up)
  function lines(series, buckets, metric) {
    const out = [];
    const one = (s, dash, pick) => ({ name: s.name, color: s.color, dash, values: buckets.map((b) => { const g = s.at.get(b); return g ? pick(g) : metric.empty; }) });
    for (const s of series.top) {
      if (metric.pcts) {
        out.push(one(s, "", (g) => metric.pcts(g)?.p95 ?? null));
        out.push(one(s, "4 3", (g) => metric.pcts(g)?.p50 ?? null));
      } else out.push(one(s, "", metric.value));
    }
    if (series.rest.length && metric.sum) {
      out.push({ name: "other (" + series.rest.length + ")", color: COLORS[TOP], dash: "", values: buckets.map((b) => {
        const gs = series.rest.map((s) => s.at.get(b)).filter(Boolean);
        return gs.length ? metric.sum(gs) : metric.empty;
      }) });
    }
    return out;
  }

  const sumOf = (f) => (gs) => gs.reduce((a, g) => a + f(g), 0);
  const METRICS = [
    { id: "requests", title: "Requests", fmt: compact, integer: true, empty: 0, value: (g) => g.requests, sum: sumOf((g) => g.requests) },
    { id: "tokens", title: "Tokens (all categories)", fmt: compact, integer: true, empty: 0, value: (g) => g.tokens.total, sum: sumOf((g) => g.tokens.total) },
    { id: "cost", title: "Cost, known prices (USD)", fmt: usd, empty: 0, value: (g) => g.cost_usd || 0, sum: sumOf((g) => g.cost_usd || 0),
      none: "no request with a known price in this range" },
    { id: "error_rate", title: "Error rate (status ≥ 400)", fmt: (v) => +v.toFixed(1) + "%", empty: null, value: (g) => g.error_rate * 100,
      sum: (gs) => { const r = gs.reduce((a, g) => a + g.requests, 0); return r ? 100 * gs.reduce((a, g) => a + g.errors, 0) / r : null; } },
    { id: "latency", title: "Latency p95 (solid) and p50 (dashed)", fmt: ms, empty: null, pcts: (g) => g.latency_ms },
    { id: "ttft", title: "Time to first token p95 (solid) and p50 (dashed), streams", fmt: ms, empty: null, pcts: (g) => g.ttft_ms,
      none: "no stream with a first token in this range" },
  ];

  // ---- chart ----
  function niceStep(raw) {
    if (!(raw > 0)) return 1;
    const e = Math.pow(10, Math.floor(Math.log10(raw))), f = raw / e;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10) * e;
  }

  // xTicks labels the x axis at round times (local): every 1, 2, 5, 10,
  // 15, 30 or 60 minutes or 1, 2, 3, 4, 6 or 12 hours, whichever gives at
  // most 7 labels; at midnights (weekday and day) beyond two days.
  function xTicks(buckets, interval) {
    const n = buckets.length;
    const two = (v) => String(v).padStart(2, "0");
    const at = buckets.map((t, i) => [i, new Date(t)]);
    if (interval === "day" || (interval === "hour" && n > 48)) {
      const days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
      return at.filter(([, x]) => interval === "day" || x.getHours() === 0)
        .map(([i, x]) => [i, days[x.getDay()] + " " + x.getDate()]);
    }
    const span = (n * STEP[interval]) / 60e3; // minutes
    const step = [1, 2, 5, 10, 15, 30, 60, 120, 180, 240, 360, 720].find((m) => span / m <= 7) || 1440;
    return at.filter(([, x]) => x.getMinutes() % Math.min(step, 60) === 0 && (step < 60 || (x.getHours() * 60) % step === 0 && x.getMinutes() === 0))
      .map(([i, x]) => [i, two(x.getHours()) + ":" + two(x.getMinutes())]);
  }

  function chart(metric, buckets, interval, all) {
    const ls = all.filter((l) => l.values.some((v) => v != null)); // a series with no value here is not drawn
    const W = 520, H = 190, L = 58, R = 12, T = 10, B = 24;
    const pw = W - L - R, ph = H - T - B;
    let max = 0;
    for (const l of ls) for (const v of l.values) if (v != null && v > max) max = v;
    const step = metric.integer ? Math.max(1, niceStep(max / 4)) : niceStep(max / 4), top = Math.max(step, Math.ceil(max / step) * step);
    const x = (i) => L + (buckets.length > 1 ? (i * pw) / (buckets.length - 1) : pw / 2);
    const y = (v) => T + ph - (v / top) * ph;
    const root = svg("svg", { class: "chart", "data-metric": metric.id, viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": metric.title });
    for (let v = 0; v <= top + step / 2; v += step) {
      root.append(svg("line", { class: "grid", x1: L, x2: W - R, y1: y(v), y2: y(v) }));
      root.append(svg("text", { class: "ylabel", x: L - 6, y: y(v) + 4, "text-anchor": "end" }, metric.fmt(v)));
    }
    for (const [i, label] of xTicks(buckets, interval)) {
      root.append(svg("line", { class: "tick", x1: x(i), x2: x(i), y1: T + ph, y2: T + ph + 4 }));
      root.append(svg("text", { class: "xlabel", x: x(i), y: H - 6, "text-anchor": "middle" }, label));
    }
    root.append(svg("line", { class: "axis", x1: L, x2: W - R, y1: T + ph, y2: T + ph }));
    for (const l of ls) {
      let d = "", pen = false;
      l.values.forEach((v, i) => {
        if (v == null) { pen = false; return; }
        d += (pen ? "L" : "M") + x(i).toFixed(1) + " " + y(v).toFixed(1);
        pen = true;
      });
      const path = svg("path", { class: "series", d: d || "M0 0", fill: "none", stroke: l.color, "stroke-width": 1.8, "data-series": l.name });
      if (l.dash) path.setAttribute("stroke-dasharray", l.dash);
      root.append(path);
      // a dot per value (and a tooltip) where a bucket stands alone or the
      // buckets are few enough to see
      l.values.forEach((v, i) => {
        if (v == null) return;
        const alone = (i === 0 || l.values[i - 1] == null) && (i === l.values.length - 1 || l.values[i + 1] == null);
        if (!alone && buckets.length > 60) return;
        root.append(svg("circle", { cx: x(i), cy: y(v), r: alone ? 2.5 : 1.8, fill: l.color },
          svg("title", {}, l.name + (l.dash ? " p50" : metric.pcts ? " p95" : "") + " · " + new Date(buckets[i]).toLocaleString() + " · " + metric.fmt(v))));
      });
    }
    const legend = el("div", { class: "legend" });
    for (const l of ls) {
      if (l.dash) continue;
      legend.append(el("span", { class: "key" },
        svg("svg", { width: 18, height: 8, "aria-hidden": "true" }, svg("line", { x1: 0, x2: 18, y1: 4, y2: 4, stroke: l.color, "stroke-width": 2.5 })),
        l.name));
    }
    const drawn = ls.some((l) => l.values.some((v) => v != null && (metric.empty === 0 ? v > 0 : true)));
    return el("figure", { class: "card chart-card", "data-metric": metric.id },
      el("figcaption", { text: metric.title }),
      drawn ? root : el("p", { class: "none", text: metric.none || "nothing in this range" }),
      drawn ? legend : null);
  }

  // ---- tables ----
  function table(id, dim, label, none, ans) {
    const root = $(id);
    if (!ans.groups.length) { root.replaceChildren(el("p", { class: "none", text: "no usage in this range" })); return; }
    const head = [label, "requests", "errors", "tokens in", "tokens out", "cost", "p50", "p95", "TTFT p95"];
    const rows = ans.groups.map((g) => {
      const t = g.tokens;
      const cost = el("td", { class: "num cost" }, costText(g, true));
      if (g.cost_usd != null && g.cost_unknown_requests) cost.append(el("small", { text: " +" + g.cost_unknown_requests + " unknown" }));
      return el("tr", { "data-key": g.key[dim] },
        el("td", { class: "name", text: g.key[dim] || none }),
        el("td", { class: "num requests", text: int(g.requests) }),
        el("td", { class: "num errors", text: g.errors ? int(g.errors) + " (" + pct(g.error_rate) + ")" : "0" }),
        el("td", { class: "num tokens-in", text: int(t.input + t.cached_input + t.cache_write) }),
        el("td", { class: "num tokens-out", text: int(t.output + t.reasoning) }),
        cost,
        el("td", { class: "num p50", text: ms(g.latency_ms.p50) }),
        el("td", { class: "num p95", text: ms(g.latency_ms.p95) }),
        el("td", { class: "num ttft", text: g.ttft_ms ? ms(g.ttft_ms.p95) : "—" }));
    });
    root.replaceChildren(el("div", { class: "card scroll" }, el("table", { class: "usage" },
      el("thead", {}, el("tr", {}, ...head.map((h, i) => el("th", { class: i ? "num" : "", text: h })))),
      el("tbody", {}, ...rows))));
  }

  function summary(t) {
    const stat = (id, label, value, note) => el("div", { class: "stat", "data-stat": id },
      el("span", { class: "label", text: label }), el("span", { class: "value", text: value }), note ? el("span", { class: "note", text: note }) : null);
    const tk = t.tokens;
    $("usage-summary").replaceChildren(
      stat("requests", "Requests", int(t.requests), t.streams ? int(t.streams) + " streams" + (t.streams_incomplete ? ", " + int(t.streams_incomplete) + " incomplete" : "") : null),
      stat("errors", "Errors", int(t.errors), pct(t.error_rate) + (t.cancelled ? " · " + int(t.cancelled) + " cancelled" : "")),
      stat("tokens", "Tokens", compact(tk.total), compact(tk.input + tk.cached_input + tk.cache_write) + " in · " + compact(tk.output + tk.reasoning) + " out"),
      stat("cost", "Cost", costText(t), t.cost_unknown_requests ? "+ " + int(t.cost_unknown_requests) + " requests without a price" : "known prices"),
      stat("latency", "Latency p50", ms(t.latency_ms.p50), "p95 " + ms(t.latency_ms.p95)),
      stat("ttft", "Time to first token p50", t.ttft_ms ? ms(t.ttft_ms.p50) : "—", t.ttft_ms ? "p95 " + ms(t.ttft_ms.p95) : "no streams"));
  }

  // ---- page ----
  async function load() {
    const my = ++seq;
    inFlight = true;
    schedule();
    const r = RANGES[range];
    const page = $("usage-page");
    page.dataset.state = "loading";
    for (const b of document.querySelectorAll("#usage-range button")) b.classList.toggle("on", b.dataset.range === range);
    try {
      const q = (extra) => api("GET", "/admin/usage?from=" + r.from + "&" + extra);
      const [series, clients, keys] = await Promise.all([
        q("group_by=provider,model&interval=" + r.interval),
        q("group_by=client"),
        q("group_by=key"),
      ]);
      if (my !== seq) return; // a newer load is on its way
      inFlight = false;
      render(series, clients, keys);
      $("usage-error").textContent = "";
      page.dataset.range = range;
      page.dataset.state = "ready";
    } catch (e) {
      if (my !== seq) return;
      inFlight = false;
      $("usage-error").textContent = "usage: " + e.message;
      page.dataset.state = "error";
    }
  }

  function render(series, clients, keys) {
    const empty = series.totals.requests === 0;
    $("usage-empty").hidden = !empty;
    $("usage-data").hidden = empty;
    const trunc = [series, clients, keys].find((a) => a.truncated);
    $("usage-status").textContent = int(series.matched) + " requests in range · " + int(series.scanned) + " records read · updated " + new Date().toLocaleTimeString() +
      (trunc ? " · truncated (" + trunc.truncated_by + "): the sums cover the start of the range only" : "");
    $("usage-status").classList.toggle("warn", !!trunc);
    if (empty) return;
    summary(series.totals);
    const buckets = bucketsOf(series);
    const s = seriesOf(series);
    $("usage-charts").replaceChildren(...METRICS.map((m) => chart(m, buckets, series.interval, lines(s, buckets, m))));
    table("usage-by-client", "client", "client", "(no client key)", clients);
    table("usage-by-key", "key", "provider / key", "(no attempt)", keys);
  }

  // schedule the next refresh of the range shown; a refresh due while a
  // load is still out waits for the one after
  function schedule() {
    clearInterval(timer);
    timer = setInterval(() => { if (!inFlight) load(); }, RANGES[range].every);
  }

  function show() {
    $("usage-page").hidden = false;
    load();
  }

  function hide() {
    $("usage-page").hidden = true;
    clearInterval(timer);
    timer = null;
    seq++; // a load still out is not shown
    inFlight = false;
  }

  for (const b of document.querySelectorAll("#usage-range button")) {
    b.addEventListener("click", () => { range = b.dataset.range; load(); });
  }
  return { show, hide };
};
