// Switchyard admin dashboard, charts: line charts and sparklines drawn with
// the vendored uPlot (web/vendor/uplot, served from /assets: nothing is
// loaded from elsewhere). Every chart has a tooltip that follows the
// cursor; line charts zoom on a drag across the plot (a double click
// zooms back out). A series keeps one colour for the whole session, across
// refreshes and pages (kept in session storage by name).
"use strict";
window.SwitchyardCharts = function (deps) {
  const { el } = deps;
  const PALETTE = ["#2b6cb0", "#dd6b20", "#2f855a", "#b83280", "#6b46c1", "#c05621", "#00838f", "#975a16",
    "#d53f8c", "#2c7a7b", "#744210", "#553c9a"];
  const OTHER = "#a0aec0"; // "other (n)": the series beyond a chart's top few
  const STORE = "switchyard-series-colours";
  let colours = {};
  try { colours = JSON.parse(sessionStorage.getItem(STORE) || "{}") || {}; } catch (_) { colours = {}; }
  const live = []; // every chart drawn: [host, uPlot, ResizeObserver]

  // colour is the series' colour: the one it had before, else the palette
  // entry fewest series have (the first of those), kept from then on
  function colour(name) {
    if (name.startsWith("other (")) return OTHER;
    if (colours[name] != null) return PALETTE[colours[name] % PALETTE.length];
    const used = PALETTE.map(() => 0);
    for (const i of Object.values(colours)) used[i % PALETTE.length]++;
    const i = used.indexOf(Math.min(...used));
    colours[name] = i;
    try { sessionStorage.setItem(STORE, JSON.stringify(colours)); } catch (_) {}
    return PALETTE[i];
  }

  // sweep destroys the charts no longer in the page (a re-render replaced
  // them)
  function sweep() {
    for (let i = live.length - 1; i >= 0; i--) {
      const [host, u, ro] = live[i];
      if (!host.isConnected) { ro.disconnect(); u.destroy(); live.splice(i, 1); }
    }
  }

  // tooltip is a uPlot plugin: a box over the plot at the cursor with the
  // time and each shown series' value there (fmt formats a value)
  function tooltip(fmt, timeFmt) {
    let tip = null;
    return {
      hooks: {
        init: (u) => { tip = el("div", { class: "chart-tip" }); tip.hidden = true; u.over.append(tip); },
        setCursor: (u) => {
          const i = u.cursor.idx;
          if (i == null || u.cursor.left < 0) { tip.hidden = true; return; }
          const rows = [el("div", { class: "tip-time", text: timeFmt(u.data[0][i]) })];
          for (let s = 1; s < u.series.length; s++) {
            const sr = u.series[s], v = u.data[s][i];
            if (!sr.show || v == null) continue;
            const sw = el("span", { class: "tip-swatch" });
            sw.style.background = sr.swatch; // CSSOM: the page's CSP refuses style attributes
            rows.push(el("div", { class: "tip-row" }, sw, el("span", { class: "tip-name", text: sr.label }), el("span", { class: "tip-value", text: fmt(v) })));
          }
          if (rows.length === 1) rows.push(el("div", { class: "tip-row none", text: "no value" }));
          tip.replaceChildren(...rows);
          tip.hidden = false;
          const w = tip.offsetWidth, h = tip.offsetHeight, W = u.over.clientWidth, H = u.over.clientHeight;
          let left = u.cursor.left + 12, top = u.cursor.top + 12;
          if (left + w > W) left = Math.max(0, u.cursor.left - w - 12);
          if (top + h > H) top = Math.max(0, H - h);
          tip.style.transform = "translate(" + left + "px," + top + "px)";
        },
      },
    };
  }

  const two = (v) => String(v).padStart(2, "0");
  function clock(sec) { const d = new Date(sec * 1000); return two(d.getHours()) + ":" + two(d.getMinutes()); }
  function stamp(sec) { return new Date(sec * 1000).toLocaleString(); }

  // time ticks: round minutes and hours (labelled 15:30) up to two days,
  // whole days beyond (labelled Wed 2, at local midnights)
  const DAY = 86400;
  const TIMES = [60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 14400, 21600, 43200, DAY];
  const DAYS = [DAY, 2 * DAY, 7 * DAY];
  const WEEKDAYS = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
  const timeIncrs = (u, ai, min, max) => (max - min > 2 * DAY ? DAYS : TIMES);
  const timeValues = (u, splits, ai, space, incr) => splits.map((t) => {
    if (incr < DAY) return clock(t);
    const d = new Date(t * 1000);
    return WEEKDAYS[d.getDay()] + " " + d.getDate();
  });

  // integer ticks: 1, 2, 5 times a power of ten (never a tick between
  // whole numbers that would print twice, rounded)
  const WHOLE = [];
  for (let p = 1; p <= 1e12; p *= 10) WHOLE.push(p, 2 * p, 5 * p);

  // axisLabels are the y axis's tick labels in the chart's format, or,
  // where that format would print two ticks alike (0.02 % and 0.04 % as
  // "0%"), in its finer one (o.fine, else more digits)
  function axisLabels(vals, o) {
    const labels = vals.map((v) => o.fmt(v));
    if (new Set(labels).size === labels.length) return labels;
    return vals.map(o.fine || ((v) => String(+v.toPrecision(6))));
  }

  // yRange starts the y axis at 0 and ends it a little above the largest
  // value (1 when there is none)
  function yRange(u, min, max) {
    if (!(max > 0)) return [0, 1];
    return [0, uPlot.rangeNum(0, max, 0.1, true)[1]];
  }

  // mount creates the uPlot chart in host once host has a width, and keeps
  // its width the host's
  function mount(host, opts, data, height) {
    sweep();
    let u = null;
    const ro = new ResizeObserver(() => {
      const w = Math.floor(host.clientWidth);
      if (w <= 0) return;
      if (!u) {
        u = new uPlot({ ...opts, width: w, height }, data, host);
        live.push([host, u, ro]);
        host.__uplot = u; // for the browser tests: scales, series, colours
        host.dataset.ready = "true";
      } else if (u.width !== w) u.setSize({ width: w, height });
    });
    ro.observe(host);
  }

  // line draws a time series chart in a figure:
  //   id, title: the figure's data-metric and caption
  //   xs: the buckets' starts (ms); series: [{name, values, dash}]
  //   fmt: a value's text; fine: a finer one for the axis where fmt
  //   would print two ticks alike; integer: whole values only (counts, ms)
  //   none: the text shown when no series has a value
  function line(o) {
    const shown = o.series.filter((s) => s.values.some((v) => v != null && (o.zeroIsEmpty ? v > 0 : true)));
    const fig = el("figure", { class: "card chart-card", "data-metric": o.id },
      el("figcaption", {}, el("span", { text: o.title }), el("small", { class: "hint", text: "drag to zoom · double-click to reset" })));
    if (!shown.length) { fig.append(el("p", { class: "none", text: o.none || "nothing in this range" })); return fig; }
    const ss = o.series.filter((s) => s.values.some((v) => v != null));
    const many = o.xs.length > 60;
    const host = el("div", { class: "chart", "data-metric": o.id, role: "img", "aria-label": o.title });
    host.dataset.series = JSON.stringify(ss.map((s) => s.name));
    const opts = {
      tzDate: (ts) => new Date(ts * 1000),
      cursor: { drag: { x: true, y: false, setScale: true }, points: { size: 7 } },
      legend: { show: true, live: false },
      scales: { x: { time: true }, y: { range: yRange } },
      axes: [
        { stroke: "#6b7385", grid: { stroke: "#e1e4ea", width: 1 }, ticks: { stroke: "#6b7385", width: 1, size: 4 }, font: "11px system-ui, sans-serif",
          space: 60, incrs: timeIncrs, values: timeValues },
        { stroke: "#6b7385", grid: { stroke: "#e1e4ea", width: 1 }, ticks: { show: false }, size: 62, space: 28,
          font: "11px system-ui, sans-serif", incrs: o.integer ? WHOLE : undefined, values: (u, vals) => axisLabels(vals, o) },
      ],
      series: [{ value: (u, v) => v == null ? "" : stamp(v) }, ...ss.map((s) => ({
        label: s.name, stroke: s.color || colour(s.base || s.name), swatch: s.color || colour(s.base || s.name), width: 1.8, dash: s.dash ? [4, 3] : undefined,
        spanGaps: false, value: (u, v) => v == null ? "—" : o.fmt(v),
        points: { show: true, size: 5, filter: (u, sidx, show) => isolated(u.data[sidx], many) },
      }))],
      plugins: [tooltip(o.fmt, stamp), labels(host)],
    };
    const data = [o.xs.map((t) => t / 1000), ...ss.map((s) => s.values)];
    mount(host, opts, data, o.height || 190);
    fig.append(host);
    return fig;
  }

  // labels is a uPlot plugin that writes the axes' labels as drawn and
  // the number of series drawn as lines to the host's data attributes (the
  // canvas has no text to read: the browser tests read these)
  function labels(host) {
    return {
      hooks: {
        draw: (u) => {
          host.dataset.xlabels = JSON.stringify(u.axes[0]._values || []);
          host.dataset.ylabels = JSON.stringify(u.axes[1]._values || []);
          let lines = 0;
          for (let s = 1; s < u.data.length; s++) {
            const v = u.data[s];
            if (v.some((x, i) => x != null && v[i + 1] != null)) lines++;
          }
          host.dataset.lines = String(lines);
        },
      },
    };
  }

  // isolated is the indexes of the values drawn as dots: a value with no
  // neighbour (no line shows it), or every value when they are few
  function isolated(vals, many) {
    const out = [];
    for (let i = 0; i < vals.length; i++) {
      if (vals[i] == null) continue;
      const alone = (i === 0 || vals[i - 1] == null) && (i === vals.length - 1 || vals[i + 1] == null);
      if (alone || !many) out.push(i);
    }
    return out;
  }

  // baseline is a uPlot plugin that draws the line of 0 under the series,
  // across the whole range (minutes without a value draw nothing)
  const baseline = {
    hooks: {
      drawClear: (u) => {
        const y = Math.round(u.valToPos(0, "y", true)) + 0.5, c = u.ctx;
        c.save();
        c.strokeStyle = "#cbd2e0";
        c.lineWidth = 1;
        c.beginPath();
        c.moveTo(u.bbox.left, y);
        c.lineTo(u.bbox.left + u.bbox.width, y);
        c.stroke();
        c.restore();
      },
    },
  };

  // spark draws a sparkline (no axes, a tooltip, no zoom) of one series:
  //   xs: the buckets' starts (ms), values, color, fmt, label (the
  //   tooltip's series name and the aria label), max (the top of the y
  //   axis at least, e.g. 100 for percentages)
  function spark(o) {
    const host = el("span", { class: "spark", role: "img", "aria-label": o.label, "data-spark": o.id || "" });
    host.dataset.values = JSON.stringify(o.values);
    const opts = {
      tzDate: (ts) => new Date(ts * 1000),
      cursor: { drag: { x: false, y: false }, points: { size: 5 } },
      legend: { show: false },
      // the top at least o.max; the bottom a little under 0, so a run of
      // zeros shows as a line
      scales: { x: { time: true }, y: { range: (u, min, max) => { const top = Math.max(o.max || 0, max > 0 ? max * 1.15 : 1); return [-top * 0.08, top]; } } },
      axes: [{ show: false }, { show: false }],
      series: [{}, { label: o.label, stroke: o.color, swatch: o.color, fill: o.color + "22", width: 1.4, spanGaps: false,
        points: { show: true, size: 3, filter: (u, sidx) => isolated(u.data[sidx], true) } }],
      plugins: [tooltip(o.fmt, clock), baseline],
    };
    mount(host, opts, [o.xs.map((t) => t / 1000), o.values], o.height || 26);
    return host;
  }

  // buckets are the starts (ms) of every time bucket of a usage answer's
  // range (GET /admin/usage with an interval)
  const STEP = { minute: 60e3, hour: 3600e3, day: 86400e3 };
  function buckets(ans) {
    const step = STEP[ans.interval];
    const out = [];
    if (!step) return out;
    const from = Date.parse(ans.from), to = Date.parse(ans.to);
    for (let t = Math.floor(from / step) * step; t < to; t += step) out.push(t);
    return out;
  }

  return { line, spark, colour, sweep, buckets };
};
