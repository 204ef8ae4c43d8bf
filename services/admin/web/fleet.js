// Switchyard admin dashboard, Fleet page traffic: per provider and per key,
// the requests, error rate and p95 latency of the last 15 minutes as
// sparklines (one point a minute), from /admin/usage (the usage records
// of SWITCHYARD_USAGE: a request counts under the provider and key that
// answered it, or that it tried last), so healthy keys show their traffic
// too. The provider cards themselves are drawn by app.js.
"use strict";
window.SwitchyardFleet = function (deps) {
  const { api, el, charts } = deps;
  const RANGE = "-15m";
  const EVERY = 10e3; // at most one load of the two reports per 10 s
  let last = null; // { providers: Map, keys: Map, xs }
  let loadedAt = 0;
  let pending = null;
  let drawn = null; // the data the cells were last drawn from

  // groups maps each group's value of dim to its per-minute values
  function groups(ans, dim, xs) {
    const out = new Map();
    for (const g of ans.groups) {
      const name = g.key[dim] || "";
      let s = out.get(name);
      if (!s) {
        s = { requests: xs.map(() => 0), errors: xs.map(() => null), p95: xs.map(() => null), total: 0, failed: 0 };
        out.set(name, s);
      }
      const i = xs.indexOf(Date.parse(g.bucket));
      if (i < 0) continue;
      s.requests[i] = g.requests;
      s.errors[i] = g.requests ? (100 * g.errors) / g.requests : null;
      s.p95[i] = g.latency_ms ? g.latency_ms.p95 : null;
      s.total += g.requests;
      s.failed += g.errors;
    }
    return out;
  }

  // load reads the two reports, at most once per EVERY (force: now)
  async function load(force) {
    if (pending) return pending;
    if (!force && last && Date.now() - loadedAt < EVERY) return last;
    pending = (async () => {
      try {
        const q = (dim) => api("GET", "/admin/usage?from=" + RANGE + "&interval=minute&group_by=" + dim);
        const [byProvider, byKey] = await Promise.all([q("provider"), q("key")]);
        const xs = charts.buckets(byProvider);
        last = { providers: groups(byProvider, "provider", xs), keys: groups(byKey, "key", xs), xs, error: "" };
      } catch (e) {
        last = { providers: new Map(), keys: new Map(), xs: [], error: e.message };
      }
      loadedAt = Date.now();
      pending = null;
      return last;
    })();
    return pending;
  }

  const ms = (v) => v == null ? "—" : v >= 1000 ? (v / 1000).toFixed(2) + " s" : Math.round(v) + " ms";
  const pct = (v) => +v.toFixed(1) + "%";

  // cells are the three sparklines of one series (s may be absent: no
  // request in the range), each with its figure over the range
  function cells(s, what) {
    drawn = last;
    if (!last || !last.xs.length) return [el("td", { class: "traffic none", colspan: "3", text: last && last.error ? "usage: " + last.error : "loading…" })];
    if (!s || !s.total) {
      return [el("td", { class: "traffic none", colspan: "3", "data-requests": "0", text: "no requests in the last 15 minutes" })];
    }
    const p95s = s.p95.filter((v) => v != null);
    const worst = p95s.length ? Math.max(...p95s) : null;
    const cell = (cls, figure, sp) => el("td", { class: "traffic " + cls }, sp, el("span", { class: "figure", text: figure }));
    return [
      cell("requests", s.total + " req", charts.spark({ id: "requests", xs: last.xs, values: s.requests, color: "#2b6cb0", fmt: (v) => v + " req/min", label: what + " requests per minute" })),
      cell("errors", s.failed ? s.failed + " err (" + pct((100 * s.failed) / s.total) + ")" : "0 err",
        charts.spark({ id: "errors", xs: last.xs, values: s.errors, color: "#c53030", max: 5, fmt: pct, label: what + " error rate (status ≥ 400)" })),
      cell("latency", "p95 ≤ " + ms(worst), charts.spark({ id: "latency", xs: last.xs, values: s.p95, color: "#2f855a", fmt: ms, label: what + " latency p95" })),
    ];
  }

  // provider is the traffic cells of a provider, all keys together
  function provider(name) {
    return cells(last && last.providers.get(name), name);
  }

  // key is the traffic cells of one key of a provider (the usage key
  // dimension is <provider>/<key id>)
  function key(prov, id) {
    return cells(last && last.keys.get(prov + "/" + id), prov + "/" + id);
  }

  return { load, provider, key, shown: () => drawn, header: ["requests, last 15 min", "error rate", "latency p95"] };
};
