// Switchyard admin dashboard, Usage page: reads /admin/usage (the usage
// records of SWITCHYARD_USAGE, summed by the admin service) and draws its
// charts with charts.js (the vendored uPlot).
"use strict";
window.SwitchyardUsage = function (deps) {
  const { api, el, $, charts } = deps;
  // every refresh runs four reports over the range: longer ranges refresh less often
  const RANGES = {
    "1h": { from: "-1h", interval: "minute", every: 30e3 },
    "24h": { from: "-24h", interval: "hour", every: 60e3 },
    "7d": { from: "-7d", interval: "hour", every: 300e3 },
  };
  const TOP = 5; // series drawn per chart; the rest is "other"
  let range = "24h";
  let timer = null;
  let seq = 0;
  let inFlight = false;

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
  const fineMS = (v) => (v >= 1000 ? +(v / 1000).toPrecision(6) + " s" : +v.toPrecision(6) + " ms");
  const pct = (v) => +(v * 100).toFixed(1) + "%";
  function costText(g, exact) {
    if (g.cost_usd == null) return g.cost_unknown_requests ? "unknown" : "$0";
    if (exact) return "$" + (g.cost_usd < 1 ? g.cost_usd.toFixed(4) : g.cost_usd.toFixed(2));
    return usd(g.cost_usd);
  }

  // ---- series ----
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
    const top = all.slice(0, TOP);
    const rest = all.slice(TOP);
    return { top, rest };
  }

  // line values of one metric for each series (and "other" when the
  // metric adds up)
  function lines(series, buckets, metric) {
    const out = [];
    const one = (s, name, dash, pick) => ({ name, base: s.name, dash, values: buckets.map((b) => { const g = s.at.get(b); return g ? pick(g) : metric.empty; }) });
    for (const s of series.top) {
      if (metric.pcts) {
        out.push(one(s, s.name + " p95", false, (g) => metric.pcts(g)?.p95 ?? null));
        out.push(one(s, s.name + " p50", true, (g) => metric.pcts(g)?.p50 ?? null));
      } else out.push(one(s, s.name, false, metric.value));
    }
    if (series.rest.length && metric.sum) {
      out.push({ name: "other (" + series.rest.length + ")", values: buckets.map((b) => {
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
    { id: "error_rate", title: "Error rate (status ≥ 400)", fmt: (v) => +v.toFixed(1) + "%", fine: (v) => +v.toPrecision(4) + "%", empty: null, value: (g) => g.error_rate * 100,
      sum: (gs) => { const r = gs.reduce((a, g) => a + g.requests, 0); return r ? 100 * gs.reduce((a, g) => a + g.errors, 0) / r : null; } },
    { id: "cache_hit_rate", title: "Cache hit rate (answered from the response cache)", fmt: (v) => +v.toFixed(1) + "%", fine: (v) => +v.toPrecision(4) + "%", empty: null,
      value: (g) => g.cache_hit_rate * 100, none: "no request of a route with a cache policy in this range",
      sum: (gs) => { const r = gs.reduce((a, g) => a + g.requests, 0); return r ? 100 * gs.reduce((a, g) => a + g.cache_hits, 0) / r : null; } },
    { id: "cache_saved", title: "Money the cache saved (USD)", fmt: usd, empty: 0, value: (g) => g.cache_saved_usd || 0, sum: sumOf((g) => g.cache_saved_usd || 0),
      none: "no cache hit in this range" },
    { id: "latency", title: "Latency p95 (solid) and p50 (dashed)", fmt: ms, fine: fineMS, empty: null, pcts: (g) => g.latency_ms },
    { id: "ttft", title: "Time to first token p95 (solid) and p50 (dashed), streams", fmt: ms, fine: fineMS, empty: null, pcts: (g) => g.ttft_ms,
      none: "no stream with a first token in this range" },
  ];

  // ---- chart ----
  function chart(metric, buckets, all) {
    return charts.line({ id: metric.id, title: metric.title, xs: buckets, series: all, fmt: metric.fmt, fine: metric.fine,
      integer: metric.integer || metric.pcts, zeroIsEmpty: metric.empty === 0, none: metric.none });
  }

  // ---- tables ----
  function table(id, dim, label, none, ans) {
    const root = $(id);
    if (!ans.groups.length) { root.replaceChildren(el("p", { class: "none", text: "no usage in this range" })); return; }
    const head = [label, "requests", "errors", "attempts", "failed attempts", "tokens in", "tokens out", "cost", "p50", "p95", "TTFT p95"];
    const rows = ans.groups.map((g) => {
      const t = g.tokens;
      const cost = el("td", { class: "num cost" }, costText(g, true));
      if (g.cost_usd != null && g.cost_unknown_requests) cost.append(el("small", { text: " +" + g.cost_unknown_requests + " unknown" }));
      return el("tr", { "data-key": g.key[dim] },
        el("td", { class: "name", text: g.key[dim] || none }),
        el("td", { class: "num requests", text: int(g.requests) }),
        el("td", { class: "num errors", text: g.errors ? int(g.errors) + " (" + pct(g.error_rate) + ")" : "0" }),
        el("td", { class: "num attempts", text: int(g.attempts || 0) }),
        el("td", { class: "num failed-attempts", text: g.failed_attempts ? int(g.failed_attempts) + " (" + pct(g.failed_attempts / g.attempts) + ")" : "0" }),
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

  function summary(t, classes) {
    // requests the gateway itself refused (a malformed body, an unknown
    // or forbidden model, a deadline it could not meet): class rejected
    const rejected = classes.groups.filter((g) => g.key.class === "rejected").reduce((a, g) => a + g.requests, 0);
    const stat = (id, label, value, note) => el("div", { class: "stat", "data-stat": id },
      el("span", { class: "label", text: label }), el("span", { class: "value", text: value }), note ? el("span", { class: "note", text: note }) : null);
    const tk = t.tokens;
    $("usage-summary").replaceChildren(
      stat("requests", "Requests", int(t.requests), t.streams ? int(t.streams) + " streams" + (t.streams_incomplete ? ", " + int(t.streams_incomplete) + " incomplete" : "") : null),
      stat("errors", "Errors", int(t.errors), pct(t.error_rate) + (t.cancelled ? " · " + int(t.cancelled) + " cancelled" : "")),
      stat("rejected", "Rejected", int(rejected), "by the gateway: a bad request, an unknown or forbidden model"),
      stat("attempts", "Upstream attempts", int(t.attempts || 0), int(t.failed_attempts || 0) + " failed" +
        (t.attempts ? " (" + pct((t.failed_attempts || 0) / t.attempts) + ")" : "")),
      stat("tokens", "Tokens", compact(tk.total), compact(tk.input + tk.cached_input + tk.cache_write) + " in · " + compact(tk.output + tk.reasoning) + " out"),
      stat("cost", "Cost", costText(t), t.cost_unknown_requests ? "+ " + int(t.cost_unknown_requests) + " requests without a price" : "known prices"),
      stat("cache", "Cache hits", int(t.cache_hits || 0), pct(t.cache_hit_rate || 0) + " · saved " + usd(t.cache_saved_usd || 0)),
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
      const [series, clients, keys, classes] = await Promise.all([
        q("group_by=provider,model&interval=" + r.interval),
        q("group_by=client"),
        q("group_by=key"),
        q("group_by=class"),
      ]);
      if (my !== seq) return; // a newer load is on its way
      inFlight = false;
      render(series, clients, keys, classes);
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

  function render(series, clients, keys, classes) {
    const empty = series.totals.requests === 0;
    $("usage-empty").hidden = !empty;
    $("usage-data").hidden = empty;
    const trunc = [series, clients, keys].find((a) => a.truncated);
    $("usage-status").textContent = int(series.matched) + " requests in range · " + int(series.scanned) + " records read · updated " + new Date().toLocaleTimeString() +
      (trunc ? " · truncated (" + trunc.truncated_by + "): the sums cover the start of the range only" : "");
    $("usage-status").classList.toggle("warn", !!trunc);
    if (empty) return;
    summary(series.totals, classes);
    const buckets = charts.buckets(series);
    const s = seriesOf(series);
    $("usage-charts").replaceChildren(...METRICS.map((m) => chart(m, buckets, lines(s, buckets, m))));
    table("usage-by-client", "client", "client", "(no client key)", clients);
    table("usage-by-key", "key", "provider / key", "(no attempt: refused, or every target held)", keys);
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
