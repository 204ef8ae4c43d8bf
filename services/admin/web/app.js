// Switchyard admin dashboard: reads the admin API with the token kept in
// session storage and follows /admin/events (fetch streaming, so the token
// travels in the Authorization header, never in a URL).
"use strict";
(function () {
  const KEY = "switchyard-admin-token";
  const $ = (id) => document.getElementById(id);
  let token = sessionStorage.getItem(KEY) || "";
  let streamAbort = null;
  let session = 0; // counts sign-ins: an event stream of an earlier one stops
  let refreshTimer = null;
  let usage = null; // the Usage page (usage.js)
  let clients = null; // the Clients page (clients.js)
  let config = null; // the Configuration page (config.js)
  let requests = null; // the Requests page and its bundle view (requests.js)
  let charts = null; // uPlot charts and sparklines (charts.js)
  let fleet = null; // the Fleet page's traffic sparklines (fleet.js)

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v;
      else if (k === "text") e.textContent = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v);
    }
    for (const k of kids) if (k != null) e.append(k);
    return e;
  }

  // api calls the admin API: body is sent as JSON, or as it is with
  // content type type. An error answer throws an Error with its message,
  // code and (invalid_config) errors.
  //
  // A call belongs to the sign-in it was made in: signed out it is not
  // sent (it would go without a token), and a 401 signs out only the
  // sign-in that sent the rejected token. Without that, a call made just
  // after Sign out (a refresh an event had scheduled) was sent with no
  // token, and its 401 signed out the token entered next ("token
  // rejected").
  async function api(method, path, body, type) {
    const mine = session, tok = token;
    if (!tok) throw new Error("signed out");
    const opts = { method, headers: { Authorization: "Bearer " + tok } };
    if (body !== undefined) {
      opts.headers["Content-Type"] = type || "application/json";
      opts.body = type ? body : JSON.stringify(body);
    }
    const r = await fetch(path, opts);
    if (r.status === 401) { if (mine === session) logout("token rejected"); throw new Error("unauthorized"); }
    if (!r.ok) {
      let msg = r.status + "", detail = {};
      try { detail = (await r.json()).error || {}; msg = detail.message || msg; } catch (_) {}
      const e = new Error(msg);
      e.code = detail.code;
      e.errors = detail.errors;
      throw e;
    }
    return r.status === 204 ? null : r.json();
  }

  function showLogin(msg) {
    $("app").hidden = true; $("logout").hidden = true; $("login").hidden = false;
    $("login-error").textContent = msg || "";
  }

  function logout(msg) {
    sessionStorage.removeItem(KEY); token = "";
    session++;
    clearTimeout(refreshTimer);
    if (streamAbort) streamAbort.abort();
    // what the token showed goes with it (the next sign-in replays the
    // last 10 minutes of events)
    $("events").replaceChildren(); $("providers").replaceChildren(); $("error").textContent = "";
    if (usage) usage.hide();
    if (clients) clients.forget();
    if (config) config.forget();
    if (requests) requests.forget();
    showLogin(msg);
  }

  // route shows the page the location's hash names: #usage, #clients,
  // #requests (#requests/<request id>: one request's debug bundle),
  // #config, else the fleet
  function route() {
    const pages = { "#usage": "usage", "#clients": "clients", "#requests": "requests", "#config": "config" };
    const hash = location.hash;
    let page = pages[hash] || "fleet", request = "";
    if (hash.startsWith("#requests/")) {
      page = "requests";
      try { request = decodeURIComponent(hash.slice("#requests/".length)); } catch (_) { request = hash.slice("#requests/".length); }
    }
    $("fleet-page").hidden = page !== "fleet";
    for (const p of ["fleet", "usage", "clients", "requests", "config"]) $("tab-" + p).classList.toggle("on", p === page);
    if (page === "usage") usage.show(); else usage.hide();
    if (page === "clients") clients.show(); else clients.hide();
    if (page === "requests") requests.show(request); else requests.hide();
    if (page === "config") config.show(); else config.hide();
  }

  const labels = { healthy: "Healthy", degraded: "Degraded", circuit_open: "Circuit Open", recovering: "Recovering", offline: "Offline" };

  function fmtLeft(ms) {
    if (ms <= 0) return "due";
    const s = Math.ceil(ms / 1000), h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
    return (h ? h + "h " : "") + (h || m ? m + "m " : "") + r + "s";
  }

  function holdRow(h, keyLabel) {
    const end = Date.now() + h.remaining_ms;
    const cd = el("span", { class: "countdown", "data-end": String(end), text: fmtLeft(h.remaining_ms) });
    const scope = h.scope.model ? h.scope.kind + " · " + h.scope.model : h.scope.kind;
    const state = h.live ? h.state : "ramping";
    const btn = h.live ? el("button", { class: "danger release", "data-hold-id": h.id, text: "Release",
      onclick: () => release(h.id) }) : null;
    return el("tr", { class: "hold", "data-hold-id": h.id, "data-state": h.state },
      el("td", { text: keyLabel }), el("td", { text: scope }), el("td", { text: h.class }),
      el("td", { class: "reason", text: h.reason + (h.code ? " (" + h.code + ")" : "") }),
      el("td", { text: state }), el("td", {}, cd), el("td", {}, btn));
  }

  // verdict says what decides the provider's routing now, in words: an
  // open breaker wins over the prober's check (health is advice), so a
  // "healthy" check beside an open circuit says which one counts
  function verdict(p) {
    const health = p.health + (p.health_reason ? " (" + p.health_reason + ")" : "");
    switch (p.circuit_state) {
    case "open":
      return el("p", { class: "verdict circuit-open" }, el("strong", { text: "Circuit open: the breaker wins. " }),
        "No request goes to " + p.name + " until its cooldown ends and a trial request succeeds" +
        (p.health === "healthy" ? "; the prober's last check said healthy, but a check is advice and the breaker decides." : "; the prober's last check: " + health + "."));
    case "half-open":
      return el("p", { class: "verdict circuit-half-open" }, el("strong", { text: "Circuit half-open: " }),
        "trial requests decide whether " + p.name + " takes traffic again (the prober's last check: " + health + ").");
    }
    if (p.health === "unhealthy" || p.health === "degraded") {
      return el("p", { class: "verdict health-" + p.health }, el("strong", { text: "Prober: " + health + ". " }),
        "The breaker is " + (p.circuit_state === "disabled" ? "off" : "closed") + ": proxies still send traffic, preferring healthy targets.");
    }
    return null;
  }

  // keyState is a key's state in words; an open circuit (or a hold of
  // the whole provider) wins over the key's own health, and says so
  function keyState(p, k) {
    const held = k.holds.filter((h) => h.live).length;
    const health = k.health && k.health !== "unknown" ? "health " + k.health + (k.health_reason ? " (" + k.health_reason + ")" : "") : "";
    const holds = held ? held + " hold" + (held > 1 ? "s" : "") : "";
    if (k.enabled === false) return "switched off";
    if (p.circuit_state === "open") return "no traffic: the open circuit wins" + (health ? " over " + health : "") + (holds ? " · " + holds : "");
    if (p.holds.some((h) => h.live && !h.scope.model)) return "no traffic: the provider is held" + (health ? " (" + health + ")" : "") + (holds ? " · " + holds : "");
    return (holds || "in rotation") + (health ? " · " + health : "");
  }

  // headroomCell shows what a key's provider last stated is left of its
  // tightest rate-limit window (all windows in the title), with a
  // countdown to its reset; empty when nothing was stated
  function headroomCell(k) {
    const ws = k.headroom || [];
    if (!ws.length) return el("td", { class: "headroom", text: "—" });
    const share = (w) => (w.share === undefined ? 1 : w.share);
    const tight = ws.reduce((a, w) => (share(w) < share(a) ? w : a));
    const line = (w) => w.kind + " " + w.remaining + (w.limit ? "/" + w.limit : "") + (w.model ? " (" + w.model + ")" : "");
    const left = new Date(tight.reset).getTime() - Date.now();
    return el("td", { class: "headroom", "data-share": String(share(tight)), title: ws.map(line).join("\n") },
      el("span", { class: "room", text: line(tight) + (tight.share === undefined ? "" : " · " + Math.round(100 * tight.share) + "%") }),
      left > 0 ? el("small", {}, " · resets in ", el("span", { class: "countdown", "data-end": String(Date.now() + left), text: fmtLeft(left) })) : null);
  }

  // trafficTable lists the provider (all keys together) and each of its
  // keys: its state and its traffic, error rate and latency over the last
  // minutes (fleet.js)
  function trafficTable(p) {
    const rows = [el("tr", { class: "provider-row" }, el("td", { class: "id" }, el("span", { class: "kid", text: "all keys" })),
      el("td", { class: "state", text: labels[p.status] || p.status }), el("td", { class: "headroom" }), ...fleet.provider(p.name))];
    for (const k of p.keys) {
      rows.push(el("tr", { class: "key-row", "data-key": k.id, "data-health": k.health },
        el("td", { class: "id" }, el("span", { class: "kid", text: k.id }), el("small", { text: " fp " + k.fingerprint })),
        el("td", { class: "state", text: keyState(p, k) }),
        headroomCell(k),
        ...fleet.key(p.name, k.id)));
    }
    return el("table", { class: "traffic-table", "data-provider": p.name },
      el("thead", {}, el("tr", {}, ...["key", "state", "headroom", ...fleet.header].map((t) => el("th", { text: t })))),
      el("tbody", {}, ...rows));
  }

  function render(data) {
    lastStatus = data;
    const root = $("providers");
    const cards = data.providers.map((p) => {
      const rows = [];
      for (const h of p.holds) rows.push(holdRow(h, h.scope.key || "(all keys)"));
      for (const k of p.keys) for (const h of k.holds) rows.push(holdRow(h, k.id));
      const table = rows.length
        ? el("table", { class: "holds" }, el("thead", {}, el("tr", {}, ...["key", "scope", "class", "reason", "state", "until", ""].map((t) => el("th", { text: t })))), el("tbody", {}, ...rows))
        : el("p", { class: "none", text: "no holds" });
      const reset = p.resilience.breaker.enabled
        ? el("button", { class: "reset", "data-provider": p.name, text: "Reset", onclick: () => reset(p.name) }) : null;
      const breaker = p.circuit_state === "disabled" ? "no breaker" : "circuit " + p.circuit_state;
      return el("div", { class: "card provider", "data-provider": p.name, "data-status": p.status },
        el("div", { class: "head" },
          el("span", { class: "name", text: p.name }),
          el("span", { class: "pill " + p.status, text: labels[p.status] || p.status }),
          el("span", { class: "meta", text: p.type + " · " + breaker + " · prober " + p.health }),
          reset),
        verdict(p),
        trafficTable(p),
        table);
    });
    root.replaceChildren(...cards);
  }

  async function refresh() {
    if (!token) return; // signed out since it was scheduled (soon)
    try {
      // the status first; the traffic (usage reports, slower) when it comes
      const traffic = fleet.load();
      const status = await api("GET", "/admin/providers/status");
      render(status);
      if (await traffic !== fleet.shown()) render(status);
      $("error").textContent = "";
    } catch (e) {
      if (token) $("error").textContent = "status: " + e.message;
    }
  }

  // refreshRoom redraws the status alone (not the traffic) while the
  // fleet page shows a key's headroom: it moves with every answer
  let lastStatus = null;
  async function refreshRoom() {
    if (!lastStatus || !$("tab-fleet").classList.contains("on")) return;
    if (!lastStatus.providers.some((p) => p.keys.some((k) => k.headroom))) return;
    try { render(await api("GET", "/admin/providers/status")); } catch (_) {}
  }

  function soon() {
    clearTimeout(refreshTimer);
    refreshTimer = setTimeout(refresh, 100);
  }

  // A 202 answer is {"status":"queued","message":...}: applied by the admin
  // service, written to NATS once JetStream answers. Say so.
  function queuedNote(what, res) {
    $("error").textContent = res && res.status === "queued" ? what + " queued, not written yet: " + res.message : "";
  }

  async function release(id) {
    try { queuedNote("release " + id, await api("DELETE", "/admin/holds/" + encodeURIComponent(id))); await refresh(); }
    catch (e) { $("error").textContent = "release " + id + ": " + e.message; }
  }

  async function reset(name) {
    try { queuedNote("reset " + name, await api("POST", "/admin/providers/" + encodeURIComponent(name) + "/reset")); await refresh(); }
    catch (e) { $("error").textContent = "reset " + name + ": " + e.message; }
  }

  function addEvent(kind, data) {
    let ev = {};
    try { ev = JSON.parse(data); } catch (_) {}
    const sc = ev.scope || {};
    // a budget event names a client key and its plan, a config event the
    // version activated, a health event its provider and key (at the top
    // level) and how its status moved; others a scope
    const what = kind === "budget" ? [ev.client, ev.plan, ev.period].filter(Boolean).join(" · ")
      : kind === "config" ? "version " + ev.version + " (" + ev.source + ") by " + ev.by + (ev.edit ? ": " + ev.edit : "") + (ev.comment ? " — " + ev.comment : "")
      : kind === "health" ? [ev.provider, ev.key].filter(Boolean).join("/") + "  " + (ev.previous && ev.previous !== ev.status ? ev.previous + " → " : "") + ev.status
      : [sc.provider, sc.key, sc.model].filter(Boolean).join("/");
    const reason = ev.reason ? ev.reason + (kind === "health" && ev.code ? " (" + ev.code + ")" : "") : "";
    const line = (ev.at ? new Date(ev.at).toLocaleTimeString() : "") + "  " + kind + "  " + what +
      (ev.class && ev.class !== "unrecognised" ? "  " + ev.class : "") + (ev.outcome ? "  " + ev.outcome : "") +
      (reason ? "  — " + reason : "");
    const list = $("events");
    const li = el("li", { class: "event", "data-kind": kind, text: line });
    // an event of a request links to its debug bundle
    if (ev.request_id) {
      li.dataset.requestId = ev.request_id;
      li.append("  ", el("a", { class: "request-link", href: requests.href(ev.request_id), text: "request " + ev.request_id }));
    }
    list.prepend(li);
    while (list.children.length > 200) list.lastChild.remove();
  }

  async function follow() {
    const mine = session;
    let lastId = "";
    for (;;) {
      if (!token || mine !== session) return;
      streamAbort = new AbortController();
      try {
        const headers = { Authorization: "Bearer " + token };
        if (lastId) headers["Last-Event-ID"] = lastId;
        const r = await fetch(lastId ? "/admin/events" : "/admin/events?since=10m", { headers, signal: streamAbort.signal });
        if (r.status === 401) { if (mine === session) logout("token rejected"); return; }
        if (!r.ok || !r.body) throw new Error("events: " + r.status);
        $("live").className = "live on"; $("live").textContent = "live";
        soon();
        const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += value;
          let i;
          while ((i = buf.indexOf("\n\n")) >= 0) {
            if (mine !== session) return;
            const block = buf.slice(0, i); buf = buf.slice(i + 2);
            let kind = "message", data = "", id = "";
            for (const line of block.split("\n")) {
              if (line.startsWith("event: ")) kind = line.slice(7);
              else if (line.startsWith("data: ")) data += line.slice(6);
              else if (line.startsWith("id: ")) id = line.slice(4);
            }
            if (id) lastId = id;
            if (data && kind !== "error") { addEvent(kind, data); soon(); clients.onEvent(kind); config.onEvent(kind); }
          }
        }
      } catch (e) {
        if (e.name === "AbortError" && (!token || mine !== session)) return;
      }
      if (mine !== session) return;
      $("live").className = "live off"; $("live").textContent = "reconnecting";
      await new Promise((res) => setTimeout(res, 2000));
    }
  }

  function tick() {
    const now = Date.now();
    for (const e of document.querySelectorAll(".countdown[data-end]")) e.textContent = fmtLeft(Number(e.dataset.end) - now);
  }

  function start() {
    $("login").hidden = true; $("app").hidden = false; $("logout").hidden = false;
    refresh();
    follow();
    route();
  }

  document.addEventListener("DOMContentLoaded", () => {
    charts = window.SwitchyardCharts({ el });
    fleet = window.SwitchyardFleet({ api, el, charts });
    usage = window.SwitchyardUsage({ api, el, $, charts });
    clients = window.SwitchyardClients({ api, el, $, charts });
    config = window.SwitchyardConfig({ api, el, $ });
    requests = window.SwitchyardRequests({ api, el, $ });
    window.addEventListener("hashchange", () => { if (token) route(); });
    $("login-form").addEventListener("submit", (e) => {
      e.preventDefault();
      token = $("token").value.trim();
      if (!token) return;
      sessionStorage.setItem(KEY, token);
      $("token").value = "";
      start();
    });
    $("logout").addEventListener("click", () => logout(""));
    setInterval(tick, 1000);
    setInterval(() => { if (token) refresh(); }, 15000);
    setInterval(() => { if (token) refreshRoom(); }, 2000);
    if (token) start(); else showLogin("");
  });
})();
