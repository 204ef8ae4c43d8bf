// Switchyard admin dashboard, Configuration page: the fleet's routing
// configuration (GET /admin/config, /admin/config/versions,
// /admin/config/routing): the active version, its chains with their steps,
// keys with their weight and priority, trip rules per provider, the
// history with each version's changes; for operators, step switches, key
// edits, rollbacks and a preview / activate panel. It reloads at once on
// config events.
"use strict";
window.SwitchyardConfig = function (deps) {
  const { api, el, $ } = deps;
  let seq = 0;
  let shown = false;
  let last = null; // {active, versions, routing, error}
  let preview = null; // the last valid preview: {doc, base, active_version}
  let confirmingActivate = false;
  let confirmingRollback = 0;
  const diffs = new Map(); // version -> its changes against the one it replaced
  let catchUp = null; // the timer of a reload until the active version is applied here

  function when(t) {
    const d = new Date(t);
    return d.toDateString() === new Date().toDateString() ? d.toLocaleTimeString() : d.toLocaleString();
  }

  function value(v) {
    if (v === undefined) return "";
    return typeof v === "string" ? v : JSON.stringify(v);
  }

  // changeList shows changes: "+ path value", "− path value", "~ path
  // a → b"; values longer than max are cut (the whole in the tooltip)
  function changeList(ch, cls, max) {
    if (!ch || !ch.changes.length) return el("p", { class: "none " + (cls || ""), text: "no changes" });
    const cut = (t) => (max && t.length > max ? t.slice(0, max - 1) + "…" : t);
    return el("ul", { class: "changes " + (cls || "") }, ...ch.changes.map((c) => {
      const sign = c.op === "added" ? "+" : c.op === "removed" ? "−" : "~";
      const what = c.op === "added" ? value(c.after) : c.op === "removed" ? value(c.before) : value(c.before) + " → " + value(c.after);
      return el("li", { class: "change " + c.op, "data-op": c.op, "data-path": c.path, title: c.path + " " + what },
        el("span", { class: "sign", text: sign }),
        el("span", {}, el("code", { class: "path", text: c.path }), el("span", { class: "val", text: cut(what) })));
    }));
  }

  function describe(v) {
    if (v.source === "rollback") return "rollback to version " + v.from_version;
    if (v.source === "edit") return "edit of version " + v.from_version;
    return v.source;
  }

  // ---- the active version ----
  function activeCard() {
    const { active, routing } = last;
    if (!active) {
      return el("div", { class: "card active-version none" },
        el("p", { text: last.activeError || "No routing configuration version is active: the fleet routes with its files." }));
    }
    const applied = routing && routing.version === active.version
      ? el("span", { class: "badge ok", text: "applied here" })
      : el("span", { class: "badge warn", text: "this instance applies version " + (routing ? routing.version : "?") });
    const kids = [
      el("div", { class: "head" },
        el("span", { class: "name", id: "config-version", text: "Version " + active.version }),
        el("span", { class: "meta", id: "config-who", text: describe(active) + " · by " + active.by + " · " + when(active.at) }),
        applied),
    ];
    if (active.edit) kids.push(el("p", { class: "edit", id: "config-edit", text: active.edit }));
    kids.push(el("p", { class: "comment", id: "config-comment-text", text: active.comment ? "“" + active.comment + "”" : "no comment" }));
    if (routing && routing.routing_error) {
      kids.push(el("p", { class: "error", text: "version " + routing.routing_error.version + " could not be applied here: " + routing.routing_error.error }));
    }
    return el("div", { class: "card active-version", "data-version": String(active.version) }, ...kids);
  }

  // ---- chains: one row per step, with a switch for operators ----
  function chainsView(operator) {
    const chains = last.routing.chains;
    if (!chains.length) return el("p", { class: "none empty", text: "No chains are configured." });
    return el("div", {}, ...chains.map((c) => el("div", { class: "card chain", "data-chain": c.name },
      el("div", { class: "head" }, el("span", { class: "name", text: c.name }),
        el("span", { class: "meta", text: c.steps.filter((s) => s.active && !s.unavailable).length + " of " + c.steps.length + " steps on" })),
      el("table", { class: "steps" }, el("tbody", {}, ...c.steps.map((s) => {
        const state = s.unavailable ? "unavailable" : s.active ? "on" : "off";
        let sw;
        if (operator) {
          sw = el("input", { type: "checkbox", class: "switch step-switch", "data-chain": c.name, "data-step": String(s.index),
            "aria-label": "step " + s.index + " of " + c.name + " on", onchange: (e) => setStep(c.name, s.index, e.target) });
          sw.checked = s.active;
        }
        return el("tr", { class: "step", "data-chain": c.name, "data-step": String(s.index), "data-state": state },
          el("td", { class: "idx", text: String(s.index) }), el("td", { class: "target", text: s.target }),
          el("td", { class: "state" }, el("span", { class: "pill step-" + state, text: state })),
          el("td", { class: "action" }, sw));
      }))))));
  }

  async function setStep(chain, i, box) {
    box.disabled = true;
    try {
      const r = await api("POST", "/admin/config/chains/" + encodeURIComponent(chain) + "/steps/" + i,
        { active: box.checked, base: last.active ? last.active.active_revision : 0 });
      note(saved(r));
    } catch (e) {
      box.checked = !box.checked;
      $("config-error").textContent = "step " + i + " of " + chain + ": " + e.message;
    }
    await load();
  }

  // ---- keys: on/off, priority and weight, editable by operators ----
  function keysView(operator) {
    const provs = last.routing.providers.filter((p) => p.keys.length);
    if (!provs.length) return el("p", { class: "none empty", text: "No provider has keys." });
    return el("div", {}, ...provs.map((p) => el("div", { class: "card keys", "data-provider": p.name },
      el("div", { class: "head" }, el("span", { class: "name", text: p.name }), el("span", { class: "meta", text: p.type })),
      el("table", { class: "keys" },
        el("thead", {}, el("tr", {}, ...["key", "on", "priority", "weight", ""].map((h) => el("th", { text: h })))),
        el("tbody", {}, ...p.keys.map((k) => keyRow(p.name, k, operator)))))));
  }

  function keyRow(provider, k, operator) {
    const cell = (field) => {
      if (!operator) return el("td", { class: "num " + field, text: String(k[field]) });
      const input = el("input", { type: "number", step: "1", class: "key-" + field, value: String(k[field]),
        "aria-label": field + " of " + provider + "/" + k.id });
      return el("td", { class: "num " + field }, input);
    };
    let on;
    if (operator) {
      on = el("input", { type: "checkbox", class: "switch key-switch", "data-provider": provider, "data-key": k.id,
        "aria-label": provider + "/" + k.id + " takes traffic", onchange: (e) => setKeyEnabled(provider, k.id, e.target) });
      on.checked = k.enabled;
    } else {
      on = el("span", { class: "pill step-" + (k.enabled ? "on" : "off"), text: k.enabled ? "on" : "off" });
    }
    const row = el("tr", { class: "key" + (k.enabled ? "" : " disabled"), "data-provider": provider, "data-key": k.id,
      "data-enabled": String(k.enabled) },
      el("td", { class: "id", text: k.id }), el("td", { class: "enabled" }, on), cell("priority"), cell("weight"));
    row.append(el("td", { class: "action" }, operator ? el("button", { class: "save-key", text: "Save",
      onclick: () => saveKey(provider, k, row) }) : null));
    return row;
  }

  async function setKeyEnabled(provider, id, box) {
    box.disabled = true;
    try {
      const r = await api("PATCH", "/admin/config/providers/" + encodeURIComponent(provider) + "/keys/" + encodeURIComponent(id),
        { enabled: box.checked, base: last.active ? last.active.active_revision : 0 });
      note(saved(r));
    } catch (e) {
      box.checked = !box.checked;
      $("config-error").textContent = provider + "/" + id + ": " + e.message;
    }
    await load();
  }

  async function saveKey(provider, k, row) {
    const body = { base: last.active ? last.active.active_revision : 0 };
    for (const f of ["priority", "weight"]) {
      const n = Number(row.querySelector("input.key-" + f).value);
      if (!Number.isInteger(n)) { $("config-error").textContent = provider + "/" + k.id + ": " + f + " must be an integer"; return; }
      if (n !== k[f]) body[f] = n;
    }
    if (body.priority === undefined && body.weight === undefined) { note("nothing changed"); render(); return; }
    try {
      const r = await api("PATCH", "/admin/config/providers/" + encodeURIComponent(provider) + "/keys/" + encodeURIComponent(k.id), body);
      note(saved(r));
    } catch (e) {
      $("config-error").textContent = provider + "/" + k.id + ": " + e.message;
    }
    await load();
  }

  // ---- trip rules (read-only) ----
  function tripView() {
    const rows = [];
    for (const p of last.routing.providers) {
      if (!p.trip_on.length) {
        rows.push(el("tr", { class: "trip", "data-provider": p.name }, el("td", { class: "provider", text: p.name }),
          el("td", { class: "none", colspan: "4", text: p.trip_on_source === "provider" ? "none (its own empty list replaces the global rules)" : "none" }),
          el("td", { class: "source", text: p.trip_on_source })));
        continue;
      }
      p.trip_on.forEach((r, i) => rows.push(el("tr", { class: "trip", "data-provider": p.name, "data-rule": r.name },
        el("td", { class: "provider", text: i === 0 ? p.name : "" }), el("td", { class: "rule", text: r.name }),
        el("td", {}, el("code", { text: r.match })), el("td", { text: r.class }), el("td", { text: r.ttl || "ladder" }),
        el("td", { class: "source", text: p.trip_on_source }))));
    }
    if (!rows.length) return el("p", { class: "none empty", text: "No providers." });
    return el("div", { class: "card scroll" }, el("table", { class: "trip-rules" },
      el("thead", {}, el("tr", {}, ...["provider", "rule", "match", "class", "ttl", "from"].map((h) => el("th", { text: h })))),
      el("tbody", {}, ...rows)));
  }

  // ---- history, each version with its changes ----
  function historyView(operator) {
    const vs = last.versions;
    if (!vs.length) return el("p", { class: "none empty", text: "No versions yet." });
    return el("div", { class: "card scroll" }, el("table", { class: "history" },
      el("thead", {}, el("tr", {}, ...["version", "when", "by", "source", "comment", "changes against the version before", ""].map((h) => el("th", { text: h })))),
      el("tbody", {}, ...vs.map((v) => {
        let action = null;
        if (operator && !v.active) {
          action = confirmingRollback === v.version
            ? el("span", { class: "confirm" }, el("span", { text: "Make version " + v.version + "'s document active again? " }),
              el("button", { class: "danger confirm-rollback", "data-version": String(v.version), text: "Roll back", onclick: () => rollback(v.version) }),
              el("button", { class: "cancel-rollback", text: "Cancel", onclick: () => { confirmingRollback = 0; render(); } }))
            : el("button", { class: "rollback", "data-version": String(v.version), text: "Roll back to this",
              onclick: () => { confirmingRollback = v.version; render(); } });
        }
        const d = diffs.get(v.version);
        return el("tr", { class: "version" + (v.active ? " active" : ""), "data-version": String(v.version) },
          el("td", { class: "num" }, el("strong", { text: String(v.version) }), v.active ? el("span", { class: "badge ok", text: "active" }) : null),
          el("td", { class: "when", text: when(v.at) }), el("td", { text: v.by }), el("td", { text: describe(v) }),
          el("td", { class: "comment", text: v.comment || "—" }),
          el("td", { class: "diff" }, d ? changeList(d, "", 90) : el("span", { class: "none", text: "…" })),
          el("td", { class: "action" }, action));
      }))));
  }

  async function rollback(n) {
    confirmingRollback = 0;
    try {
      const r = await api("POST", "/admin/config/rollback", { version: n, comment: "rolled back from the dashboard", base: last.active ? last.active.active_revision : 0 });
      note(saved(r));
    } catch (e) {
      $("config-error").textContent = "roll back to version " + n + ": " + e.message;
    }
    await load();
  }

  // loadDiffs fetches the changes of the versions not seen yet (each
  // version's document never changes, so neither do its changes)
  async function loadDiffs(my) {
    const todo = last.versions.filter((v) => !diffs.has(v.version)).slice(0, 30);
    await Promise.all(todo.map(async (v) => {
      try { diffs.set(v.version, await api("GET", "/admin/config/diff?to=" + v.version)); } catch (_) { /* shown as … */ }
    }));
    if (my === seq && todo.length) render();
  }

  // ---- preview and activate ----
  function result(kids, state) {
    const r = $("config-result");
    r.dataset.state = state;
    r.replaceChildren(...kids);
  }

  async function runPreview() {
    preview = null;
    confirmingActivate = false;
    const doc = $("config-doc").value;
    if (!doc.trim()) { result([el("p", { class: "error", text: "Paste a routing document first." })], "empty"); return; }
    result([el("p", { class: "meta", text: "checking…" })], "loading");
    let p;
    try {
      p = await api("POST", "/admin/config/preview", doc, "application/yaml");
    } catch (e) {
      result([el("p", { class: "error", text: "preview: " + e.message })], "error");
      return;
    }
    const kids = [];
    if (!p.valid) {
      kids.push(el("p", { class: "verdict invalid", text: "Invalid: " + p.errors.length + (p.errors.length === 1 ? " problem" : " problems") + ". Nothing can be activated." }),
        el("ul", { id: "config-preview-errors", class: "problems" }, ...p.errors.map((m) => el("li", { text: m }))));
      result(kids, "invalid");
      return;
    }
    for (const w of p.warnings) kids.push(el("p", { class: "warn", text: "warning: " + w }));
    if (p.unchanged) {
      kids.push(el("p", { class: "verdict valid", text: "Valid, and the same as the active version " + p.active_version + ": activating it would change nothing." }));
      result(kids, "unchanged");
      return;
    }
    preview = { doc, base: p.base, active: p.active_version };
    kids.push(el("p", { class: "verdict valid", text: "Valid. Changes against the active version " + p.active_version + ": " +
      p.diff.added + " added, " + p.diff.changed + " changed, " + p.diff.removed + " removed." }),
      changeList(p.diff, "preview-diff"));
    kids.push(activateControls());
    result(kids, "valid");
  }

  function activateControls() {
    const comment = el("input", { id: "config-comment", type: "text", placeholder: "comment (why this change)", autocomplete: "off" });
    if (!confirmingActivate) {
      return el("div", { class: "activate" }, comment,
        el("button", { id: "config-activate", class: "danger", text: "Activate…", onclick: () => {
          confirmingActivate = true;
          const c = comment.value;
          const box = $("config-result").querySelector(".activate");
          box.replaceWith(activateControls());
          $("config-comment").value = c;
        } }));
    }
    return el("div", { class: "activate confirm" }, comment,
      el("span", { class: "question", text: "Activate this document for the whole fleet? Every proxy switches to it at once." }),
      el("button", { id: "config-confirm-activate", class: "danger", text: "Activate", onclick: () => activate() }),
      el("button", { id: "config-cancel-activate", text: "Cancel", onclick: () => {
        confirmingActivate = false;
        const c = $("config-comment").value;
        $("config-result").querySelector(".activate").replaceWith(activateControls());
        $("config-comment").value = c;
      } }));
  }

  async function activate() {
    if (!preview) return;
    const comment = $("config-comment").value.trim();
    const p = preview;
    preview = null;
    confirmingActivate = false;
    try {
      const r = await api("POST", "/admin/config/activate", { document: p.doc, comment, base: p.base });
      const kids = [el("p", { class: "verdict valid", id: "config-activated",
        text: r.changed ? "Version " + r.version.version + " is active (replaces " + r.version.replaces + ")." + (r.applied ? "" : " This instance has not applied it yet.")
          : "Nothing changed: version " + r.version.version + " is active and already says so." })];
      if (r.summary) kids.push(...instanceOutcomes(r));
      result(kids, "activated");
      $("config-doc").value = "";
    } catch (e) {
      const kids = [el("p", { class: "error", text: "activate: " + e.message })];
      if (e.errors) kids.push(el("ul", { class: "problems" }, ...e.errors.map((m) => el("li", { text: m }))));
      result(kids, "error");
    }
    await load();
  }

  // instanceOutcomes: what every instance that answered did of the
  // version written (applied, refused with the reason, pending).
  function instanceOutcomes(r) {
    const s = r.summary;
    const out = [el("p", { id: "config-instances", class: s.refused ? "error" : "meta",
      text: "Instances: " + s.applied + " applied, " + s.refused + " refused, " + s.pending + " pending." })];
    const others = (r.instances || []).filter((o) => o.outcome !== "applied");
    if (others.length) {
      out.push(el("ul", { class: "problems", id: "config-instance-problems" }, ...others.map((o) => el("li", {
        text: o.instance + " (" + o.service + ") " + o.outcome + (o.error ? ": " + o.error : ": no report yet") +
          "; routes with version " + o.routing_version }))));
    }
    return out;
  }

  async function loadActive() {
    try {
      const a = await api("GET", "/admin/config");
      $("config-doc").value = a.document;
      result([el("p", { class: "meta", text: "Version " + a.version + "'s document: edit it, then Preview." })], "loaded");
    } catch (e) {
      result([el("p", { class: "error", text: "load the active document: " + e.message })], "error");
    }
  }

  // note says how the last write went, in the status line (the active
  // version's card says what changed)
  let lastNote = "";
  function note(msg) {
    $("config-error").textContent = "";
    lastNote = msg;
  }

  function saved(r) {
    return r.changed ? "saved as version " + r.version.version : "nothing changed: the active version already says so";
  }

  // ---- page ----
  function render() {
    if (!last || !last.routing) return;
    const operator = last.routing.role === "operator";
    $("config-active").replaceChildren(activeCard());
    $("config-chains").replaceChildren(chainsView(operator));
    $("config-keys").replaceChildren(keysView(operator));
    $("config-trip").replaceChildren(tripView());
    $("config-history").replaceChildren(historyView(operator));
    $("config-editor").hidden = !operator;
    $("config-readonly").hidden = operator;
    const st = $("config-status");
    st.textContent = (last.active ? "version " + last.active.version + " active" : "no active version") +
      " · " + last.versions.length + (last.versions.length === 1 ? " version" : " versions") + " stored · updated " +
      new Date().toLocaleTimeString() + (lastNote ? " · " + lastNote : "");
  }

  async function load() {
    const my = ++seq;
    const page = $("config-page");
    const [active, versions, routing] = await Promise.allSettled([
      api("GET", "/admin/config"), api("GET", "/admin/config/versions"), api("GET", "/admin/config/routing")]);
    if (my !== seq) return; // a newer load is on its way
    if (routing.status === "rejected") {
      $("config-error").textContent = "configuration: " + routing.reason.message;
      page.dataset.state = "error";
      return;
    }
    last = {
      active: active.status === "fulfilled" ? active.value : null,
      activeError: active.status === "rejected" ? active.reason.message : "",
      versions: versions.status === "fulfilled" ? versions.value.versions : [],
      routing: routing.value,
    };
    $("config-error").textContent = active.status === "rejected" && !/no routing configuration version/.test(active.reason.message)
      ? "configuration: " + active.reason.message : "";
    render();
    page.dataset.state = "ready";
    page.dataset.version = last.active ? String(last.active.version) : "0";
    page.dataset.applied = String(last.routing.version);
    loadDiffs(my);
    // a version activated a moment ago may not be applied here yet: look
    // again shortly (unless this instance could not apply it)
    const a = last.active, rt = last.routing;
    if (a && rt.version < a.version && !(rt.routing_error && rt.routing_error.version >= a.version)) {
      clearTimeout(catchUp);
      catchUp = setTimeout(() => { if (shown && my === seq) load(); }, 300);
    }
  }

  function show() {
    shown = true;
    $("config-page").hidden = false;
    $("config-page").dataset.state = "loading";
    load();
  }

  function hide() {
    shown = false;
    $("config-page").hidden = true;
    clearTimeout(catchUp);
    seq++; // a load still out is not shown
    confirmingRollback = 0;
  }

  // forget hides the page and drops what it showed (the token is gone)
  function forget() {
    hide();
    last = null;
    lastNote = "";
    preview = null;
    confirmingActivate = false;
    diffs.clear();
    $("config-doc").value = "";
    for (const id of ["config-active", "config-chains", "config-keys", "config-trip", "config-history", "config-result", "config-status", "config-error"]) $(id).replaceChildren();
    delete $("config-page").dataset.state;
  }

  // onEvent reloads at once when a version was activated (here or elsewhere)
  function onEvent(kind) {
    if (shown && kind === "config") load();
  }

  function init() {
    $("config-preview").addEventListener("click", runPreview);
    $("config-load").addEventListener("click", loadActive);
    $("config-doc").addEventListener("input", () => {
      if (preview || confirmingActivate) {
        preview = null;
        confirmingActivate = false;
        result([el("p", { class: "meta", text: "The document changed: preview it again." })], "stale");
      }
    });
  }

  init();
  return { show, hide, forget, onEvent };
};
