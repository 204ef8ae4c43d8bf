// Switchyard admin dashboard, Requests page: the newest request debug
// bundles (GET /admin/requests: failed by default, a filter for rejected
// and all), reloaded every few seconds while the list is open; each
// request opens its bundle (GET /admin/requests/{id}, #requests/<id>):
// the header, the route's steps and the attempt timeline, a bar per
// attempt on a time axis from the request's arrival.
"use strict";
window.SwitchyardRequests = function (deps) {
  const { api, el, $ } = deps;
  const EVERY = 10000; // ms between reloads of the list while it is open
  const SVG = "http://www.w3.org/2000/svg";
  let timer = null;
  let seq = 0; // counts loads: an answer of an earlier one is dropped
  let inFlight = false;
  let outcome = "failed";
  let since = "1h";

  function svg(tag, attrs, ...kids) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "text") e.textContent = v;
      else e.setAttribute(k, String(v));
    }
    for (const k of kids) if (k != null) e.append(k);
    return e;
  }

  // ---- formats ----
  function ms(v) {
    if (v == null) return "—";
    if (v >= 1000) return (v / 1000).toFixed(2) + "s";
    if (v > 0 && v < 10) return v.toFixed(1) + "ms";
    return Math.round(v) + "ms";
  }
  function when(t) {
    const d = new Date(t);
    return d.toDateString() === new Date().toDateString() ? d.toLocaleTimeString() : d.toLocaleString();
  }
  function bundleHref(id) { return "#requests/" + encodeURIComponent(id); }

  // kind is an attempt's colour: ok (served), limit (rate limit, quota),
  // refused (the key or the model is refused), rejected (the request
  // itself), failed (everything else: transient, unrecognised)
  function kind(a) {
    if (a.action === "served" || (a.status >= 200 && a.status < 300)) return "ok";
    switch (a.class) {
      case "rate_limit": case "quota_exhausted": return "limit";
      case "credential_rejected": case "model_not_accessible": case "model_retired": case "region_blocked": return "refused";
      case "request_rejected": return "rejected";
    }
    return "failed";
  }

  // ---- the list ----
  // NOTES say which requests each filter lists: only those with a debug
  // bundle, which is not every request
  const KEPT = "The proxies keep a bundle for every failed request, a sampled share of the successful ones (debug.sample_successes) " +
    "and every request sent with X-Switchyard-Debug: true; none for a caller not authenticated (401), a plan's limit (429), the in-flight limit (503) " +
    "or a request refused before routing (malformed, an unknown model). The Usage tab counts every request.";
  const NOTES = {
    all: "All requests with a debug bundle, not all requests. " + KEPT,
    failed: "Failed requests with a debug bundle. " + KEPT,
    rejected: "Requests the gateway refused, with a debug bundle. " + KEPT,
  };
  function listTable(ans) {
    if (!ans.requests.length) {
      const what = outcome === "all" ? "" : outcome + " ";
      return el("p", { class: "none empty", text: "No " + what + "requests with a debug bundle in the last " + since +
        ". The proxies keep a bundle for every failure, a sampled share of successes and every request sent with X-Switchyard-Debug: true." });
    }
    const head = ["at", "request id", "outcome", "status", "error", "model", "provider", "client", "attempts", "latency", "instance"];
    const rows = ans.requests.map((r) => el("tr", { class: "request-row", "data-id": r.request_id, "data-outcome": r.outcome },
      el("td", { class: "when", text: when(r.at) }),
      el("td", { class: "id" }, el("a", { class: "request-link", href: bundleHref(r.request_id), "data-id": r.request_id, text: r.request_id })),
      el("td", { class: "outcome" }, el("span", { class: "pill outcome-" + r.outcome, text: r.outcome })),
      el("td", { class: "num status", text: r.status ? String(r.status) : "—" }),
      el("td", { class: "error-code", text: r.error_code || "—" }),
      el("td", { class: "model", text: r.model || "—" }),
      el("td", { class: "provider", text: r.provider || "—" }),
      el("td", { class: "client", text: r.client || "—" }),
      el("td", { class: "num attempts", text: String(r.attempts) }),
      el("td", { class: "num latency", text: ms(r.latency_ms) }),
      el("td", { class: "instance", text: r.instance || "—" })));
    return el("div", { class: "card scroll" }, el("table", { class: "usage requests" },
      el("thead", {}, el("tr", {}, ...head.map((h) => el("th", { class: h === "status" || h === "attempts" || h === "latency" ? "num" : "", text: h })))),
      el("tbody", {}, ...rows)));
  }

  async function loadList() {
    const my = ++seq;
    inFlight = true;
    const page = $("requests-page");
    const q = new URLSearchParams({ outcome, since, limit: "100" });
    try {
      const ans = await api("GET", "/admin/requests?" + q.toString());
      if (my !== seq) return;
      inFlight = false;
      $("requests-list").replaceChildren(listTable(ans));
      $("requests-note").textContent = NOTES[outcome] || "";
      $("requests-page").dataset.outcome = outcome;
      $("requests-status").textContent = "live · " + ans.requests.length + " shown · updated " + new Date().toLocaleTimeString();
      $("requests-error").textContent = "";
      page.dataset.state = "ready";
    } catch (e) {
      if (my !== seq) return;
      inFlight = false;
      $("requests-error").textContent = "requests: " + e.message;
      page.dataset.state = "error";
    }
  }

  // ---- one bundle ----
  function field(label, value, cls) {
    return el("div", { class: "stat " + (cls || "") }, el("span", { class: "label", text: label }), el("span", { class: "value", text: value || "—" }));
  }

  function header(b) {
    const r = b.route;
    const route = r ? r.name + " (" + [r.kind, r.strategy].filter(Boolean).join(", ") + ")" +
      (r.needs && r.needs.length ? " · needs " + r.needs.join(", ") : "") + (r.region ? " · region " + r.region + (r.region_required ? " (required)" : "") : "") : "";
    const tokens = b.tokens ? b.tokens.input + " in · " + b.tokens.output + " out" + (b.tokens.estimated ? " (estimated)" : "") : "";
    const cost = b.cost_usd != null ? "$" + b.cost_usd.toFixed(6) : "";
    const client = [b.client, b.plan ? "plan " + b.plan : "", b.client_type].filter(Boolean).join(" · ");
    const limits = b.limits ? [b.limits.decision, b.limits.code, b.limits.limit].filter(Boolean).join(" ") : "";
    return el("div", { class: "summary bundle-head" },
      field("outcome", (b.status || "—") + " " + b.outcome + (b.error_code ? " · " + b.error_code : "") + (b.class ? " · " + b.class : ""), "outcome-" + b.outcome),
      field("model", b.model + (route ? " → " + route : "")),
      field("served by", b.provider ? b.provider + "/" + (b.served_model || "—") + (b.key_id ? " · key " + b.key_id : "") : ""),
      field("latency", ms(b.latency_ms) + (b.ttft_ms ? " · first token " + ms(b.ttft_ms) : "") + (b.cancelled ? " · cancelled" : "")),
      field("client", client + (b.access && b.access !== "allowed" ? " · refused " + b.access : "") + (limits ? " · limits " + limits : "")),
      field("tokens / cost", [tokens, cost].filter(Boolean).join(" · ")),
      field("guardrails", (b.guardrails || []).map((g) => g.guardrail + " " + g.verdict + " (" + [g.stage, g.check].filter(Boolean).join(", ") + ")").join(" · ")),
      field("policy", b.policy ? [b.policy.plan ? "plan " + b.policy.plan + ": " + ((b.policy.rules || []).map((x) => x.rule + " " + x.limit + " " + x.verdict).join(", ") || "no limits") : "",
        (b.policy.guardrails || []).map((g) => g.guardrail + ":" + g.action + " from " + g.from).join(", ")].filter(Boolean).join(" · ") : ""),
      field("arrived", when(b.at) + " · " + (b.instance || "—")),
      field("endpoint", (b.endpoint || "—") + (b.stream ? " · stream" + (b.stream_completed ? " completed" : " not completed") : "") + " · kept: " + (b.sampled || "—")));
  }

  function stepsTable(b) {
    const steps = (b.route && b.route.steps) || [];
    if (!steps.length) return el("p", { class: "none", text: "no route steps (the request was refused before routing, or its model named one target)" });
    return el("div", { class: "card scroll" }, el("table", { class: "steps route-steps" },
      el("thead", {}, el("tr", {}, ...["step", "target", "tried", "reason", "held keys"].map((h) => el("th", { text: h })))),
      el("tbody", {}, ...steps.map((s) => el("tr", { class: "route-step", "data-step": String(s.step), "data-tried": String(s.tried || 0) },
        el("td", { class: "idx", text: String(s.step) }),
        el("td", { class: "target", text: s.target }),
        el("td", { class: "tried", text: s.tried ? "#" + s.tried : "—" }),
        el("td", { class: "reason", text: s.reason || "—" }),
        el("td", { class: "held", text: (s.held || []).map((h) => h.key_id + (h.hold_id || h.class ? " (" + [h.hold_id ? "hold " + h.hold_id : "", h.class].filter(Boolean).join(", ") + ")" : "")).join("; ") || "—" }))))));
  }

  // niceStep is a round tick step for an axis of span ms
  function niceStep(span) {
    const raw = span / 5, p = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
    return 10 * p;
  }

  // textWidth measures a line of the timeline's text (12px, the page's
  // font before it is in the page (bold: the target's part)
  let measure = null;
  function textWidth(t, bold) {
    if (!measure) measure = document.createElement("canvas").getContext("2d");
    measure.font = (bold ? "600 " : "") + "12px " + getComputedStyle(document.body).fontFamily;
    return measure.measureText(t).width * 1.02; // a margin for rounding
  }
  // fit cuts t (ending it with …) until it is at most room wide
  function fit(t, room, bold) {
    while (t.length > 1 && textWidth(t, bold) > room) t = t.slice(0, -2) + "…";
    return t;
  }

  // timeline draws a bar per attempt on a time axis from the request's
  // arrival (start_ms, duration_ms), the backoff waited after it lighter,
  // coloured by kind(); the end of the request is a dashed line. Each
  // attempt has a row of its own: a line of text (which target, what it
  // answered, what the gateway did), starting where its bar starts and
  // moved left as far as it must to stay whole, then its bar under it,
  // so no text covers another attempt's text or bar however close the
  // attempts of a failover are.
  function timeline(b) {
    const atts = b.attempts || [];
    if (!atts.length) return el("p", { class: "none timeline-none", text: "no attempts: no upstream was tried (" + (b.error_code || b.access || "refused") + ")" });
    const W = 860, PAD = 10, ROW = 40, TOP = 4, AX = 24, GAP = 10, BAR = 14;
    let end = b.latency_ms || 0;
    for (const a of atts) end = Math.max(end, a.start_ms + a.duration_ms + (a.backoff_ms || 0));
    end = end > 0 ? end : 1;
    const step = niceStep(end), span = Math.ceil(end / step) * step;
    const x = (v) => PAD + (W - 2 * PAD) * (v / span);
    const H = TOP + atts.length * ROW + AX;
    const root = svg("svg", { class: "timeline", viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": "attempt timeline" });
    for (let t = 0; t <= span + 1e-9; t += step) {
      const anchor = t === 0 ? "start" : t + step > span + 1e-9 ? "end" : "middle"; // the end labels stay inside
      root.append(svg("line", { class: "grid", x1: x(t), x2: x(t), y1: TOP, y2: H - AX + 4 }),
        svg("text", { class: "xlabel", x: x(t), y: H - 8, "text-anchor": anchor, text: ms(t) }));
    }
    atts.forEach((a, i) => {
      const row = TOP + i * ROW, y = row + ROW - BAR - 6, k = kind(a);
      const label = "#" + a.n + " " + a.provider + "/" + (a.model || "—") + (a.key_id ? " · " + a.key_id : "");
      const outcome = (a.status ? a.status : "no answer") + (a.class ? " " + a.class : "") + (a.error && (a.error.code || a.error.type) ? " (" + (a.error.code || a.error.type) + ")" : "");
      const action = (a.action || "—") + (a.backoff_ms ? ", waited " + ms(a.backoff_ms) : "") + (a.probe ? " · probe" : "") + (a.soft ? " · soft" : "");
      const x0 = x(a.start_ms), w = Math.max(2, x(a.start_ms + a.duration_ms) - x0);
      // the whole text is in the title; what is cut is the outcome first
      const shown = fit(label, (W - 2 * PAD) * 0.6, true);
      const txt = fit(outcome + " → " + action, W - 2 * PAD - textWidth(shown, true) - GAP);
      const lw = textWidth(shown, true) + GAP + textWidth(txt);
      const tx = Math.max(PAD, Math.min(x0, W - PAD - lw));
      const g = svg("g", { class: "attempt " + k, "data-n": a.n, "data-class": a.class || "", "data-action": a.action || "", "data-kind": k,
        "data-start": a.start_ms, "data-duration": a.duration_ms },
      svg("title", { text: label + "\n+" + ms(a.start_ms) + " for " + ms(a.duration_ms) + "\n" + outcome + " → " + action +
        (a.error && a.error.message ? "\n" + a.error.message : "") }),
      svg("text", { class: "aline", x: tx, y: row + 14 },
        svg("tspan", { class: "alabel", text: shown }),
        svg("tspan", { class: "outcome", dx: GAP, text: txt })),
      svg("rect", { class: "abar", x: x0, y, width: w, height: BAR, rx: 2 }));
      if (a.backoff_ms) g.append(svg("rect", { class: "backoff", x: x0 + w, y: y + BAR / 2 - 2, width: Math.max(1, x(a.start_ms + a.duration_ms + a.backoff_ms) - x0 - w), height: 4 }));
      root.append(g);
    });
    if (b.latency_ms) {
      root.append(svg("line", { class: "end", x1: x(b.latency_ms), x2: x(b.latency_ms), y1: TOP, y2: H - AX + 4 }));
    }
    const legend = el("div", { class: "legend" }, ...[["ok", "served"], ["limit", "rate limit, quota"], ["refused", "key or model refused"], ["failed", "transient, unrecognised"], ["rejected", "request rejected"]]
      .map(([k, t]) => el("span", { class: "key" }, el("span", { class: "swatch " + k }), t)),
    el("span", { class: "key" }, el("span", { class: "swatch backoff" }), "backoff"),
    el("span", { class: "key" }, el("span", { class: "swatch end" }), "request ended"));
    return el("figure", { class: "card timeline-card" }, root, legend);
  }

  function attemptsTable(b) {
    const atts = b.attempts || [];
    if (!atts.length) return null;
    const head = ["#", "start", "duration", "target", "key", "status", "class", "error", "action", "flags"];
    return el("div", { class: "card scroll" }, el("table", { class: "usage attempts" },
      el("thead", {}, el("tr", {}, ...head.map((h) => el("th", { text: h })))),
      el("tbody", {}, ...atts.map((a) => el("tr", { class: "attempt-row", "data-n": String(a.n) },
        el("td", { text: String(a.n) }),
        el("td", { class: "num", text: "+" + ms(a.start_ms) }),
        el("td", { class: "num", text: ms(a.duration_ms) }),
        el("td", { text: a.provider + "/" + (a.model || "—") }),
        el("td", { text: (a.key_id || "—") + (a.fingerprint ? " (fp " + a.fingerprint + ")" : "") }),
        el("td", { class: "num", text: a.status ? String(a.status) : "—" }),
        el("td", { class: "class", text: a.class || "—" }),
        el("td", { class: "error-code", title: a.error && a.error.message ? a.error.message : "", text: a.error ? (a.error.code || a.error.type || "—") : "—" }),
        el("td", { class: "action", text: (a.action || "—") + (a.backoff_ms ? ", waited " + ms(a.backoff_ms) : "") }),
        el("td", { text: [a.probe ? "probe" : "", a.soft ? "soft" : "", a.stream_completed ? "stream completed" : ""].filter(Boolean).join(", ") || "—" }))))));
  }

  async function loadBundle(id) {
    const my = ++seq;
    const view = $("request-view");
    view.dataset.state = "loading";
    view.dataset.id = id;
    $("request-title").textContent = "Request " + id;
    $("request-bundle").replaceChildren();
    $("request-error").textContent = "";
    try {
      const b = await api("GET", "/admin/requests/" + encodeURIComponent(id));
      if (my !== seq) return;
      $("request-bundle").replaceChildren(header(b),
        el("h2", { text: "Attempts" }), timeline(b), attemptsTable(b),
        el("h2", { text: "Route steps" }), stepsTable(b));
      view.dataset.state = "ready";
    } catch (e) {
      if (my !== seq) return;
      $("request-error").textContent = e.message;
      view.dataset.state = e.code === "not_found" ? "not_found" : "error";
    }
  }

  // ---- page ----
  function show(id) {
    $("requests-page").hidden = false;
    clearInterval(timer);
    timer = null;
    if (id) {
      $("requests-list-view").hidden = true;
      $("request-view").hidden = false;
      loadBundle(id);
      return;
    }
    $("requests-list-view").hidden = false;
    $("request-view").hidden = true;
    $("requests-page").dataset.state = "loading";
    timer = setInterval(() => { if (!inFlight) loadList(); }, EVERY);
    loadList();
  }

  function hide() {
    $("requests-page").hidden = true;
    clearInterval(timer);
    timer = null;
    seq++;
    inFlight = false;
  }

  function forget() {
    hide();
    for (const id of ["requests-list", "requests-status", "requests-error", "requests-note", "request-bundle", "request-error"]) $(id).replaceChildren();
    delete $("requests-page").dataset.state;
    delete $("request-view").dataset.state;
  }

  function pick(groupId, attr, set) {
    for (const b of $(groupId).querySelectorAll("button")) {
      b.addEventListener("click", () => {
        set(b.dataset[attr]);
        for (const o of $(groupId).querySelectorAll("button")) o.classList.toggle("on", o === b);
        $("requests-page").dataset.state = "loading";
        loadList();
      });
    }
  }
  pick("requests-outcome", "outcome", (v) => { outcome = v; });
  pick("requests-range", "since", (v) => { since = v; });

  return { show, hide, forget, href: bundleHref };
};
