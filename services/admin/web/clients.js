// Switchyard admin dashboard, Clients page: each client key's consumption
// against its plan's limits (GET /admin/clients, GET /admin/plans), live:
// reloaded every few seconds while the page is open and at once on budget
// events; operators may reset a key's budgets.
"use strict";
window.SwitchyardClients = function (deps) {
  const { api, el, $, charts } = deps;
  const EVERY = 5000; // ms between reloads while the page is open
  const CHARTS_EVERY = 60e3; // ms between reloads of the charts (a usage report)
  const TOP = 5; // client keys drawn per chart; the rest is "other"
  let chartsAt = 0;
  let cseq = 0; // counts chart loads, as seq the table loads
  let timer = null;
  let seq = 0;
  let inFlight = false;
  let shown = false;
  let confirming = ""; // the client whose reset waits for a confirmation
  let last = null; // the last answers, to re-render without a reload

  // ---- number formats ----
  function num(v) {
    const a = Math.abs(v);
    if (a >= 1e6) return +(v / 1e6).toFixed(1) + "M";
    if (a >= 1e3) return +(v / 1e3).toFixed(1) + "k";
    if (a >= 100) return String(Math.round(v));
    return String(+v.toFixed(1));
  }
  function usd(v) {
    if (v === 0) return "$0.00";
    if (Math.abs(v) < 0.01) return "$" + v.toFixed(4);
    return "$" + v.toFixed(2);
  }
  function when(t) {
    const d = new Date(t);
    return d.toDateString() === new Date().toDateString() ? d.toLocaleTimeString() : d.toLocaleString();
  }

  // meter is a cell's content: used / limit with a small bar, or the
  // use alone when there is no limit
  function meter(used, limit, fmt, exhausted, none) {
    if (!(limit > 0)) {
      return [el("span", { class: "used", text: fmt(used) }), el("span", { class: "nolimit", text: " " + (none || "no limit") })];
    }
    const share = Math.min(1, used / limit);
    const level = exhausted || used >= limit ? "full" : share >= 0.8 ? "high" : "ok";
    const fill = el("span", {});
    fill.style.width = (share * 100).toFixed(1) + "%"; // CSSOM: the page's CSP refuses style attributes
    const kids = [
      el("span", { class: "used", text: fmt(used) + " / " + fmt(limit) }),
      el("span", { class: "bar " + level, role: "img", "aria-label": Math.round(share * 100) + "% of the limit" }, fill),
    ];
    if (exhausted) kids.push(el("span", { class: "badge exhausted", text: "exhausted" }));
    return kids;
  }

  // ---- client keys ----
  function clientRow(c, operator) {
    const u = c.usage, l = c.limits, b = l.budget;
    const hasBudget = b.day > 0 || b.week > 0 || b.month > 0;
    const name = el("td", { class: "client" }, el("span", { class: "id", text: c.id }));
    if (u.reset) name.append(el("small", { class: "reset-note", text: "reset by " + u.reset.by + " " + when(u.reset.at) }));
    const period = (cls, p) => el("td", { class: "num " + cls, "data-exhausted": String(p.exhausted) },
      ...meter(p.spend_usd, p.budget_usd, usd, p.exhausted, "no budget"));
    let action = null;
    if (operator && hasBudget) {
      action = confirming === c.id
        ? el("span", { class: "confirm" },
          el("span", { text: "Reset the day, week and month spend of " + c.id + "? " }),
          el("button", { class: "danger confirm-reset", "data-client": c.id, text: "Reset", onclick: () => reset(c.id) }),
          el("button", { class: "cancel-reset", text: "Cancel", onclick: () => { confirming = ""; rerender(); } }))
        : el("button", { class: "danger reset-budget", "data-client": c.id, text: "Reset budget",
          onclick: () => { confirming = c.id; rerender(); } });
    }
    return el("tr", { class: "client-row", "data-client": c.id },
      name,
      el("td", { class: "plan", text: c.plan || "—" }),
      el("td", { class: "num rpm" }, ...meter(u.requests_per_minute, l.requests_per_minute, num)),
      el("td", { class: "num tpm" }, ...meter(u.tokens_per_minute, l.tokens_per_minute, num)),
      el("td", { class: "num inflight" }, ...meter(u.in_flight, l.concurrent_requests, num)),
      period("day", u.day), period("week", u.week), period("month", u.month),
      el("td", { class: "action" }, action));
  }

  function clientsTable(ans) {
    if (!ans.clients.length) {
      return el("p", { class: "none empty", text: "No client keys are configured (clients[]): callers need no key and no plan applies." });
    }
    const operator = ans.role === "operator";
    const head = ["client key", "plan", "requests / min", "tokens / min", "in flight", "day", "week", "month", ""];
    return el("div", { class: "card scroll" }, el("table", { class: "usage limits" },
      el("thead", {}, el("tr", {}, ...head.map((h, i) => el("th", { class: i > 1 && i < 8 ? "num" : "", text: h })))),
      el("tbody", {}, ...ans.clients.map((c) => clientRow(c, operator)))));
  }

  // ---- plans ----
  function limitsText(l) {
    const parts = [];
    if (l.requests_per_minute) parts.push(num(l.requests_per_minute) + " req/min");
    if (l.tokens_per_minute) parts.push(num(l.tokens_per_minute) + " tok/min");
    if (l.concurrent_requests) parts.push(l.concurrent_requests + " in flight");
    for (const p of ["day", "week", "month"]) if (l.budget[p]) parts.push(usd(l.budget[p]) + "/" + p);
    return parts.length ? parts.join(" · ") : "no limits";
  }

  function plansTable(ans) {
    if (!ans.plans.length) return el("p", { class: "none empty", text: "No plans are configured (plans): client keys have no limits." });
    const head = ["plan", "limits per key", "models", "client keys", "requests / min", "tokens / min", "in flight", "spend day / week / month", "exhausted"];
    const rows = ans.plans.map((p) => {
      const u = p.usage, s = u.spend_usd;
      return el("tr", { class: "plan-row", "data-plan": p.name },
        el("td", { class: "name", text: p.name }),
        el("td", { class: "limits", text: limitsText(p.limits) }),
        el("td", { class: "models", text: p.models.length ? p.models.join(", ") : "all" }),
        el("td", { class: "clients", text: p.clients.length ? p.clients.join(", ") : "none" }),
        el("td", { class: "num rpm", text: num(u.requests_per_minute) }),
        el("td", { class: "num tpm", text: num(u.tokens_per_minute) }),
        el("td", { class: "num inflight", text: String(u.in_flight) }),
        el("td", { class: "num spend", text: usd(s.day) + " / " + usd(s.week) + " / " + usd(s.month) }),
        el("td", { class: "num exhausted" }, u.exhausted_clients
          ? el("span", { class: "badge exhausted", text: u.exhausted_clients + (u.exhausted_clients === 1 ? " key" : " keys") })
          : "0"));
    });
    return el("div", { class: "card scroll" }, el("table", { class: "usage plans" },
      el("thead", {}, el("tr", {}, ...head.map((h, i) => el("th", { class: i > 3 ? "num" : "", text: h })))),
      el("tbody", {}, ...rows)));
  }

  // ---- charts: requests, tokens and cost by client key ----
  const CHARTS = [
    { id: "client-requests", title: "Requests", integer: true, fmt: (v) => num(v), value: (g) => g.requests },
    { id: "client-tokens", title: "Tokens (all categories)", integer: true, fmt: (v) => num(v), value: (g) => g.tokens.total },
    { id: "client-cost", title: "Cost, known prices (USD)", fmt: (v) => usd(v), value: (g) => g.cost_usd || 0, none: "no request with a known price in the last 24 hours" },
    { id: "client-errors", title: "Errors (status ≥ 400)", integer: true, fmt: (v) => num(v), value: (g) => g.errors, none: "no errors in the last 24 hours" },
  ];

  function drawCharts(ans) {
    const xs = charts.buckets(ans);
    const by = new Map();
    for (const g of ans.groups) {
      const name = g.key.client || "(no client key)";
      if (!by.has(name)) by.set(name, { name, requests: 0, at: new Map() });
      const s = by.get(name);
      s.requests += g.requests;
      s.at.set(Date.parse(g.bucket), g);
    }
    const all = [...by.values()].sort((a, b) => b.requests - a.requests || a.name.localeCompare(b.name));
    const top = all.slice(0, TOP), rest = all.slice(TOP);
    $("clients-charts").replaceChildren(...CHARTS.map((c) => {
      const series = top.map((s) => ({ name: s.name, values: xs.map((t) => { const g = s.at.get(t); return g ? c.value(g) : 0; }) }));
      if (rest.length) {
        series.push({ name: "other (" + rest.length + ")", values: xs.map((t) => rest.reduce((a, s) => { const g = s.at.get(t); return a + (g ? c.value(g) : 0); }, 0)) });
      }
      return charts.line({ id: c.id, title: c.title, xs, series, fmt: c.fmt, integer: c.integer, zeroIsEmpty: true, none: c.none || "no requests in the last 24 hours" });
    }));
  }

  async function loadCharts() {
    const my = ++cseq;
    chartsAt = Date.now();
    try {
      const ans = await api("GET", "/admin/usage?from=-24h&interval=hour&group_by=client");
      if (my !== cseq) return;
      drawCharts(ans);
      $("clients-page").dataset.charts = "ready";
    } catch (e) {
      if (my !== cseq) return;
      $("clients-charts").replaceChildren(el("p", { class: "error", text: "usage by client key: " + e.message }));
      $("clients-page").dataset.charts = "error";
    }
  }

  // ---- page ----
  function rerender() {
    if (!last) return;
    const [clients, plans] = last;
    $("plans").replaceChildren(plansTable(plans));
    $("clients").replaceChildren(clientsTable(clients));
    $("clients-status").textContent = "live · updated " + new Date(clients.generated_at).toLocaleTimeString() +
      (clients.nats ? "" : " · NATS unreachable: the figures may be stale");
    $("clients-status").classList.toggle("warn", !clients.nats);
  }

  async function load() {
    const my = ++seq;
    inFlight = true;
    const page = $("clients-page");
    if (Date.now() - chartsAt >= CHARTS_EVERY) loadCharts();
    try {
      const ans = await Promise.all([api("GET", "/admin/clients"), api("GET", "/admin/plans")]);
      if (my !== seq) return; // a newer load is on its way
      inFlight = false;
      last = ans;
      rerender();
      $("clients-error").textContent = "";
      page.dataset.state = "ready";
    } catch (e) {
      if (my !== seq) return;
      inFlight = false;
      $("clients-error").textContent = "clients: " + e.message;
      page.dataset.state = "error";
    }
  }

  async function reset(id) {
    confirming = "";
    try {
      await api("POST", "/admin/clients/" + encodeURIComponent(id) + "/budget/reset");
      $("clients-error").textContent = "";
    } catch (e) {
      rerender();
      $("clients-error").textContent = "reset budget of " + id + ": " + e.message;
      return;
    }
    await load();
  }

  function show() {
    shown = true;
    chartsAt = 0; // the charts load again with the page
    $("clients-page").hidden = false;
    $("clients-page").dataset.state = "loading";
    clearInterval(timer);
    timer = setInterval(() => { if (!inFlight) load(); }, EVERY);
    load();
  }

  function hide() {
    shown = false;
    $("clients-page").hidden = true;
    clearInterval(timer);
    timer = null;
    seq++; cseq++; // a load still out is not shown
    inFlight = false;
    confirming = "";
  }

  // forget hides the page and drops what it showed (the token is gone)
  function forget() {
    hide();
    last = null;
    for (const id of ["plans", "clients", "clients-status", "clients-error", "clients-charts"]) $(id).replaceChildren();
    delete $("clients-page").dataset.state;
    delete $("clients-page").dataset.charts;
  }

  // onEvent reloads at once on a budget event (an exhaustion or a reset)
  function onEvent(kind) {
    if (shown && kind === "budget") load();
  }

  return { show, hide, forget, onEvent };
};
