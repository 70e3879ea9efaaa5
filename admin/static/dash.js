"use strict";
// The dashboard: polls dashboard.json every 2 s (the sampler's interval),
// draws the history the gateway keeps, and calls the admin API for the
// actions. Everything from the gateway goes into the page as text, never
// as markup: route ids, limit names and keys are the clients' words.

const pageSize = 25;      // routes per page of the table
const maxOpen = 6;        // routes whose charts show at once
const keepPoints = 300;   // 10 minutes at 2 s
const colors = {
  admitted: "#2e7d32", limited: "#ef6c00", breaker: "#c62828", "5xx": "#6a1b9a",
  client_4xx: "#1565c0", other: "#777", p50: "#1565c0", p99: "#c62828",
  "limit/s": "#222", "admitting/s": "#00838f", "forwarded/s": "#2e7d32", "turned away/s": "#c62828",
};
const palette = ["#ef6c00", "#1565c0", "#6a1b9a", "#00838f", "#ad1457", "#558b2f", "#4e342e"];

let token = "";            // the admin token: in this variable only
let last = null;           // the newest dashboard.json
let routes = [];           // last.routes, by id order
let page = 0;
let filter = "";
const open = new Set();    // routes shown with their charts
let openedOnce = false;
const hist = { times: [], global: {}, series: {}, asked: "" };
const charts = new Map();  // element id -> {plot, sig}
const tops = new Map();    // "route/limit" -> {at, keys, error}

const $ = id => document.getElementById(id);

function el(tag, props, ...kids) {
  const e = document.createElement(tag);
  Object.assign(e, props || {});
  for (const k of kids) if (k !== null && k !== undefined) e.append(k);
  return e;
}

function fmt(x) {
  if (x === null || x === undefined || Number.isNaN(x)) return "–";
  return x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2);
}
const ms = x => (x === null || x === undefined ? "–" : fmt(x * 1000));
const pct = x => (x === null || x === undefined ? "–" : (100 * x).toFixed(x < 0.1 ? 1 : 0) + "%");
const perSec = x => (x >= 10 || Number.isInteger(x) ? x.toFixed(0) : fmt(x)) + "/s";

// say shows the outcome of an action; a 401 says what is missing.
function say(text, bad) {
  const m = $("message");
  m.textContent = text;
  m.className = bad ? "bad" : "good";
}

// api calls the admin API with the token, and returns the parsed answer
// with its status; it throws with the gateway's message when not 2xx.
async function api(method, path, body) {
  const headers = {};
  if (token) headers.Authorization = "Bearer " + token;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch(path, { method, headers, cache: "no-store", body: body === undefined ? undefined : JSON.stringify(body) });
  let data = null;
  try { data = await resp.json(); } catch (e) { data = null; }
  if (resp.status === 401) {
    const err = new Error(token ? "401 unauthorized: the admin token was refused; enter the right one above"
      : "401 unauthorized: this action needs the admin token; enter it above");
    err.status = 401;
    $("token").focus();
    throw err;
  }
  if (!resp.ok) {
    let msg = data && (data.message || (data.errors && data.errors.join("; "))) || resp.statusText;
    const err = new Error(`${resp.status}: ${msg}`);
    err.status = resp.status;
    throw err;
  }
  return data;
}

async function act(what, f) {
  try {
    const r = await f();
    say(what + (r ? ": " + r : ""), false);
  } catch (e) {
    say(what + " failed: " + e.message, true);
  }
}

// --- charts ---

const clock = v => new Date(v * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });

function chart(id, host, labels, data, opts) {
  const sig = labels.join("\u0000");
  let c = charts.get(id);
  const width = Math.max(240, Math.floor(host.clientWidth || 320));
  if (c && (c.sig !== sig || c.host !== host)) {
    c.plot.destroy();
    charts.delete(id);
    c = null;
  }
  if (!c) {
    const series = [{}];
    labels.forEach((l, i) => series.push({
      label: l, stroke: colors[l] || palette[i % palette.length], width: 1.5, dash: opts && opts.dash && opts.dash[l],
      value: (u, v) => (v === null || v === undefined ? "–" : fmt(v)),
    }));
    const plot = new uPlot({
      width, height: 150, series, legend: { show: true, live: false }, padding: [8, 28, 0, 0],
      cursor: { drag: { x: false, y: false } },
      scales: { x: { time: true }, y: { range: (u, lo, hi) => [0, Math.max(hi || 0, (opts && opts.min) || 1)] } },
      axes: [{ size: 28, space: 90, values: (u, vs) => vs.map(clock) }, { size: 46 }],
    }, data, host);
    c = { plot, sig, host };
    charts.set(id, c);
    return;
  }
  if (Math.abs(c.plot.width - width) > 8) c.plot.setSize({ width, height: 150 });
  c.plot.setData(data);
}

function dropCharts(keep) {
  for (const [id, c] of charts) {
    if (!keep(id)) { c.plot.destroy(); charts.delete(id); }
  }
}

const secs = () => hist.times.map(t => t / 1000);
const scaled = (s, k) => (s || []).map(v => (v === null ? null : v * k));

// --- history: since= keeps the polls small ---

function mergeHistory(h, replace) {
  if (replace) {
    hist.times = h.times; hist.global = h.global; hist.series = h.series;
    return;
  }
  const before = hist.times.length;
  const cut = Math.max(0, hist.times.length + h.times.length - keepPoints);
  const join = (a, b) => (a || []).concat(b || []).slice(cut);
  hist.times = join(hist.times, h.times);
  for (const [k, v] of Object.entries(h.global)) {
    if (k === "limits") continue;
    hist.global[k] = join(hist.global[k], v);
  }
  const gl = hist.global.limits || (hist.global.limits = {});
  for (const [name, l] of Object.entries(h.global.limits || {})) gl[name] = join(gl[name], l);
  for (const [route, s] of Object.entries(h.series)) {
    const o = hist.series[route];
    if (!o) { hist.series[route] = s; continue; }
    for (const k of ["admitted", "limited", "breaker", "upstream", "client_4xx", "other", "p50", "p99", "passed"]) o[k] = join(o[k], s[k]);
    for (const [lim, v] of Object.entries(s.rejected || {})) o.rejected[lim] = join(o.rejected[lim], v);
    // A reload may give a route protection, or take it away.
    if (!s.protect) { delete o.protect; continue; }
    const op = o.protect || (o.protect = {});
    for (const k of ["limit", "admitting", "forwarded", "refused"]) op[k] = join(op[k] || new Array(before).fill(null), s.protect[k]);
  }
}

// --- drawing ---

function drawHeader(d) {
  let T = 0, A = 0, L = 0, B = 0, U = 0;
  for (const r of d.routes) {
    if (!r.now) continue;
    T += r.now.rate || 0; A += r.now.admitted || 0; L += r.now.limited || 0;
    B += r.now.breaker || 0; U += r.now.upstream || 0;
  }
  $("total").textContent = fmt(T);
  $("admitted").textContent = fmt(A);
  $("limited").textContent = fmt(L);
  $("breakerfallback").textContent = fmt(B);
  $("errors5xx").textContent = fmt(U);
}

const lastOf = s => { for (let i = (s || []).length - 1; i >= 0; i--) if (s[i] !== null) return s[i]; return null; };

function drawGateway(d) {
  const g = hist.global;
  const r = d.reload;
  const info = $("reloadinfo");
  if (r) {
    info.textContent = (r.ok ? "ok" : "failed") + " at " + new Date(r.time * 1000).toLocaleTimeString() + (r.detail ? " — " + r.detail : "");
    info.className = r.ok ? "ok" : "degraded";
  }
  $("storeerr").textContent = fmt(lastOf(g.store_errors));
  $("localshare").textContent = pct(lastOf(g.local_share));
  $("leases").textContent = d.global_limits.concat(...d.routes.map(r => r.limits)).filter(l => l.lease).length;
  $("evrec").textContent = fmt(lastOf(g.events_recorded));
  $("evdrop").textContent = fmt(lastOf(g.events_dropped));
  $("spooled").textContent = fmt(lastOf(g.spooled));
  $("instances").textContent = d.fleet ? d.fleet.instances : "–";
  $("disagreeing").textContent = d.fleet && d.fleet.disagreeing && d.fleet.disagreeing.length ?
    "disagreeing: " + d.fleet.disagreeing.join(", ") : "";
  $("overridecount").textContent = (d.overrides || []).length;
  const t = secs();
  chart("c-store", $("c-store"), ["p99"], [t, scaled(g.store_p99, 1000)], { min: 1 });
  chart("c-storeerr", $("c-storeerr"), ["errors/s", "local share %"], [t, g.store_errors || [], scaled(g.local_share, 100)]);
  chart("c-events", $("c-events"), ["recorded/s", "dropped/s", "spooled"], [t, g.events_recorded || [], g.events_dropped || [], g.spooled || []]);
  const gl = $("globallimits");
  if (!d.global_limits.length) { gl.replaceChildren(); dropCharts(id => !id.startsWith("c-global")); return; }
  if (!$("c-global")) {
    gl.replaceChildren(el("h3", { textContent: "global limits: use of the threshold (%), for those counted as one" }), el("div", { id: "c-global" }));
  }
  const labels = [], data = [t];
  for (const l of d.global_limits) {
    if (!l.keyed && l.per_second) { labels.push(l.name + " use %"); data.push(scaled(g.passed, 100 / l.per_second)); }
    labels.push(l.name + " 429/s"); data.push((g.limits || {})[l.name] || t.map(() => null));
  }
  if (labels.length) chart("c-global", $("c-global"), labels, data);
}

// The requests no route took are counted under the route "".
const routeName = id => id || "(no route)";

// The table's order: by id, or the busiest first by what the select
// names, so that the hot route of 1,000 is on the first page.
let order = "route";
const sortKeys = {
  rate: r => (r.now && r.now.rate) || 0,
  limited: r => (r.now && r.now.limited) || 0,
  errors: r => ((r.now && r.now.breaker) || 0) + ((r.now && r.now.upstream) || 0),
  breaker: r => (r.breaker && r.breaker.state !== "CLOSED" ? 1 : 0),
};

function visibleRoutes() {
  const f = filter.toLowerCase();
  const vis = routes.filter(r => !f || r.route.toLowerCase().includes(f));
  const key = sortKeys[order];
  if (key) vis.sort((a, b) => key(b) - key(a) || (a.route < b.route ? -1 : 1));
  return vis;
}

function breakerBadge(b) {
  const state = b.state.toLowerCase();
  return el("span", { className: "badge " + state, textContent: state.replace("_", "-") + (b.forced ? " (forced)" : "") });
}

function drawTable() {
  const vis = visibleRoutes();
  const pages = Math.max(1, Math.ceil(vis.length / pageSize));
  page = Math.min(page, pages - 1);
  $("pageinfo").textContent = `page ${page + 1} of ${pages}`;
  $("prev").disabled = page === 0;
  $("next").disabled = page >= pages - 1;
  $("routecount").textContent = `(${routes.length}${vis.length !== routes.length ? ", " + vis.length + " shown" : ""})`;
  const body = $("routes");
  body.replaceChildren();
  if (!routes.length) {
    body.append(el("tr", {}, el("td", { colSpan: 9, className: "muted", textContent: "No routes: this gateway serves no HTTP routes." })));
  }
  for (const r of vis.slice(page * pageSize, (page + 1) * pageSize)) {
    const n = r.now || {};
    const limits = el("td", { className: "limits" });
    if (r.protect) {
      const p = r.protect;
      limits.append(el("span", { textContent: "protect " + (p.limit >= unbounded ? "(nothing learned yet)" : perSec(p.limit)) }));
    }
    for (const l of r.limits) {
      // An override in force changes the rate: the use charts are the
      // file's rate's, and say so here.
      const ov = (last.overrides || []).find(o => o.applied && o.route === r.route && o.limit === l.name);
      limits.append(el("span", {
        className: ov ? "limited" : "",
        textContent: `${l.name} ${l.rate}${l.lease ? " (leased)" : ""}${l.shadow ? " (shadow)" : ""}${ov ? " (now " + ov.override + ")" : ""}`,
      }));
    }
    const tr = el("tr", { className: "route" + (open.has(r.route) ? " open" : "") },
      el("td", {}, el("button", { type: "button", className: "link", textContent: (open.has(r.route) ? "▾ " : "▸ ") + routeName(r.route), onclick: () => toggle(r.route) })),
      el("td", { className: "num", textContent: fmt(n.rate) }),
      el("td", { className: "num ok", textContent: fmt(n.admitted) }),
      el("td", { className: "num limited", textContent: fmt(n.limited) }),
      el("td", { className: "num degraded", textContent: fmt(n.breaker) }),
      el("td", { className: "num degraded", textContent: fmt(n.upstream) }),
      el("td", { className: "num", textContent: ms(n.p99) }),
      limits, el("td", {}, r.breaker ? breakerBadge(r.breaker) : ""));
    tr.dataset.route = r.route;
    body.append(tr);
  }
}

function toggle(route) {
  if (open.has(route)) open.delete(route);
  else {
    if (open.size >= maxOpen) open.delete(open.values().next().value);
    open.add(route);
  }
  drawTable();
  tick();
}

// Each route's detail box has an id of its own, whatever its route id.
const ids = new Map();
function detailId(route) {
  if (!ids.has(route)) ids.set(route, "d-" + ids.size);
  return ids.get(route);
}

function drawDetails() {
  const host = $("details");
  const want = routes.filter(r => open.has(r.route));
  const ids = new Set(want.map(r => detailId(r.route)));
  for (const c of [...host.children]) if (!ids.has(c.id)) c.remove();
  dropCharts(id => !id.startsWith("d-") || [...ids].some(d => id.startsWith(d + "/")));
  for (const r of want) drawRoute(host, r);
}

function drawRoute(host, r) {
  const id = detailId(r.route);
  let box = $(id);
  if (!box) {
    box = el("div", { id, className: "detail" });
    box.dataset.route = r.route;
    box.append(
      el("h3", {}, el("span", { className: "rid", textContent: routeName(r.route) }), " ",
        el("button", { type: "button", className: "link", textContent: "close", onclick: () => toggle(r.route) })),
      el("div", { className: "breakerline" }),
      el("div", { className: "protectline" }),
      el("div", { className: "charts" },
        el("div", {}, el("h4", { textContent: "requests/s by outcome" }), el("div", { className: "c-req" })),
        el("div", {}, el("h4", { textContent: "latency (ms)" }), el("div", { className: "c-lat" })),
        el("div", {}, el("h4", { textContent: "limits: 429/s answered, use of the threshold (%)" }), el("div", { className: "c-lim" }))),
      el("div", { className: "tops" }));
    host.append(box);
  }
  const s = hist.series[r.route];
  const t = secs();
  if (s) {
    const outcomes = ["admitted", "limited", "breaker", "upstream", "client_4xx", "other"];
    const labels = ["admitted", "limited", "breaker", "5xx", "client_4xx", "other"];
    chart(id + "/req", box.querySelector(".c-req"), labels, [t, ...outcomes.map(k => s[k] || [])]);
    chart(id + "/lat", box.querySelector(".c-lat"), ["p50", "p99"], [t, scaled(s.p50, 1000), scaled(s.p99, 1000)]);
    const ll = [], data = [t];
    for (const l of r.limits) {
      ll.push(l.name + " 429/s"); data.push((s.rejected || {})[l.name] || t.map(() => null));
      if (!l.keyed && l.per_second) { ll.push(l.name + " use %"); data.push(scaled(s.passed, 100 / l.per_second)); }
    }
    for (const name of Object.keys(s.rejected || {})) {
      if (!r.limits.some(l => l.name === name)) { ll.push(name + " 429/s"); data.push(s.rejected[name]); }
    }
    if (ll.length) chart(id + "/lim", box.querySelector(".c-lim"), ll, data);
  }
  drawBreaker(box.querySelector(".breakerline"), r);
  drawProtect(box, id, r, s, t);
  drawTops(box.querySelector(".tops"), r);
}

// A route without max admits everything until protection first sees
// overload: its limit reads 1e9 (protect.Unbounded) until then.
const unbounded = 1e9;
const learned = s => (s || []).map(v => (v === null || v >= unbounded ? null : v));

// protectText says what protection p learned, as GET /admin/protect does.
// With the Redis store the limit is the fleet's, and this instance admits
// its share of it.
function protectText(p) {
  const limit = p.limit >= unbounded ? "none learned yet: all admitted until the first overload" : perSec(p.limit);
  let admits = "";
  if (p.limit < unbounded && p.instances > 1) admits = ` for ${p.instances} instances, ${perSec(p.admitting)} of it admitted by this one`;
  else if (p.admitting < p.limit && p.limit < unbounded) admits = `, admitting ${perSec(p.admitting)} while it warms up`;
  return `protection: limit ${limit}${admits}; healthy latency ${p.baseline ? ms(p.baseline) + " ms" : "not learned yet"};` +
    ` min ${perSec(p.min)}${p.max ? ", max " + perSec(p.max) : ""}`;
}

// drawProtect draws the route's protection, when it has one: what it
// learned; a chart of the limit and what it admits now against what
// reached the upstream; and one of what it turned away, which may be many
// times the rest and would flatten it.
function drawProtect(box, id, r, s, t) {
  const line = box.querySelector(".protectline");
  const ps = s && s.protect;
  if (!r.protect && !ps) {
    for (const e of box.querySelectorAll(".charts .prot")) e.remove();
    dropCharts(c => c !== id + "/prot" && c !== id + "/away");
    line.textContent = "";
    return;
  }
  if (!box.querySelector(".c-prot")) {
    box.querySelector(".charts").append(
      el("div", { className: "prot" }, el("h4", { textContent: "protection: limit and admitted here now, against forwarded (req/s)" }), el("div", { className: "c-prot" })),
      el("div", { className: "prot" }, el("h4", { textContent: "turned away by protection (req/s)" }), el("div", { className: "c-away" })));
  }
  line.textContent = r.protect ? protectText(r.protect) : "";
  if (!ps) return;
  chart(id + "/prot", box.querySelector(".c-prot"), ["limit/s", "admitting/s", "forwarded/s"],
    [t, learned(ps.limit), learned(ps.admitting), ps.forwarded || []], { dash: { "limit/s": [6, 4] } });
  chart(id + "/away", box.querySelector(".c-away"), ["turned away/s"], [t, ps.refused || []]);
}

// redrawn reports whether box already shows what sig describes, and
// notes sig otherwise: the buttons stay put between polls that change
// nothing, so that a click does not land on a node just replaced.
function redrawn(box, sig) {
  if (box.dataset.sig === sig) return true;
  box.dataset.sig = sig;
  return false;
}

function drawBreaker(line, r) {
  const b0 = r.breaker ? { ...r.breaker, retry_after: Math.ceil(r.breaker.retry_after || 0) } : null;
  if (redrawn(line, JSON.stringify(b0))) return;
  line.replaceChildren();
  if (!r.breaker) { line.append(el("span", { className: "muted", textContent: "no breaker" })); return; }
  const b = r.breaker;
  line.append(...["breaker ", breakerBadge(b),
    el("span", { textContent: ` failures ${pct(b.failure_rate)}, slow ${pct(b.slow_rate)} of ${b.calls} calls` }),
    b.retry_after ? el("span", { textContent: `, next trial in ${Math.ceil(b.retry_after)} s` }) : null,
    b.scope ? el("span", { className: "muted", textContent: ` (${b.scope})` }) : null, " "].filter(x => x !== null));
  for (const st of ["open", "closed", "auto"]) {
    line.append(el("button", {
      type: "button", textContent: st === "auto" ? "Give back" : "Force " + st, className: "force-" + st,
      onclick: () => act(`breaker of ${r.route} ${st}`, async () => {
        const res = await api("POST", `admin/breakers/${encodeURIComponent(r.route)}?state=${st}`);
        tick();
        return res && res.state ? res.state.toLowerCase() : "";
      }),
    }), " ");
  }
}

// Top rejected keys need the admin token: they name users. Read each
// open limit's at most every 10 s, and the busiest keys' state with them.
function drawTops(box, r) {
  const keyed = r.limits.filter(l => l.keyed);
  if (last.token_needed && !token) {
    if (redrawn(box, "token")) return;
    box.replaceChildren(...keyed.map(l => el("h4", { textContent: `top rejected keys of ${l.name}` })),
      keyed.length ? el("p", { className: "muted", textContent: "Enter the admin token above to see the keys: they name users." }) : "");
    return;
  }
  for (const l of keyed) {
    const t = tops.get(r.route + "/" + l.name);
    if (!t || Date.now() - t.at > 10000) refreshTop(r.route, l);
  }
  if (redrawn(box, JSON.stringify(keyed.map(l => tops.get(r.route + "/" + l.name) || null)))) return;
  box.replaceChildren();
  for (const l of keyed) {
    const k = r.route + "/" + l.name;
    const t = tops.get(k);
    const head = el("h4", { textContent: `top rejected keys of ${l.name} (${l.key.join(", ")}; ${l.rate} per key)` });
    box.append(head);
    if (!t) continue;
    if (t.error) { box.append(el("p", { className: "bad", textContent: t.error })); continue; }
    if (!t.keys.length) { box.append(el("p", { className: "muted", textContent: "none rejected lately" })); continue; }
    const total = t.keys.reduce((n, x) => n + x.count, 0);
    const tb = el("tbody");
    for (const x of t.keys) {
      const st = x.state;
      tb.append(el("tr", {},
        el("td", { className: "key", textContent: x.key.join(" · ") + (x.truncated ? " …" : "") }),
        el("td", { className: "num", textContent: String(x.count) + (x.error ? ` (±${x.error})` : "") }),
        el("td", { className: "num", textContent: pct(x.count / total) }),
        el("td", { className: "num", textContent: st ? `${st.limit - st.remaining} of ${st.limit}` : "–" }),
        el("td", {}, el("button", {
          type: "button", textContent: "Reset", disabled: !!x.truncated,
          onclick: () => act(`reset of ${x.key.join(" · ")}`, async () => {
            await api("DELETE", limitPath(r.route, l.name, x.key));
            tops.delete(k);
            return "done";
          }),
        }))));
    }
    box.append(el("table", { className: "topkeys" },
      el("thead", {}, el("tr", {}, el("th", { textContent: "key" }), el("th", { className: "num", textContent: "rejections" }),
        el("th", { className: "num", textContent: "share of these" }), el("th", { className: "num", textContent: "used now" }), el("th"))),
      tb));
  }
}

const pending = new Set();
async function refreshTop(route, l) {
  const k = route + "/" + l.name;
  if (pending.has(k)) return;
  pending.add(k);
  try {
    const top = await api("GET", `admin/top?route=${encodeURIComponent(route)}&limit=${encodeURIComponent(l.name)}&n=10`);
    const keys = top.keys || [];
    await Promise.all(keys.slice(0, 5).filter(x => !x.truncated).map(async x => {
      try { x.state = await api("GET", limitPath(route, l.name, x.key)); } catch (e) { x.state = null; }
    }));
    tops.set(k, { at: Date.now(), keys });
  } catch (e) {
    tops.set(k, { at: Date.now(), keys: [], error: e.status === 401 ? e.message : "top keys: " + e.message });
  } finally {
    pending.delete(k);
  }
}

function limitPath(route, name, values) {
  const p = new URLSearchParams({ route, limit: name });
  for (const v of values) p.append("key", v);
  return "admin/limits?" + p.toString();
}

function drawOverrides(d) {
  const ov = $("overrides");
  ov.replaceChildren();
  for (const o of d.overrides || []) {
    ov.append(el("tr", {},
      el("td", {}, el("b", { textContent: o.route })),
      el("td", { textContent: o.limit }),
      el("td", { className: o.applied ? "" : "degraded", textContent: o.override + (o.applied ? "" : " (not applied here)") }),
      el("td", { textContent: o.file }),
      el("td", { className: "num", textContent: o.ttl_left ? Math.ceil(o.ttl_left) + " s" : "–" }),
      el("td", {}, el("button", {
        type: "button", textContent: "Remove",
        onclick: () => act(`override of ${o.route}/${o.limit} removed`, async () => {
          await api("DELETE", `admin/overrides/${encodeURIComponent(o.route)}/${encodeURIComponent(o.limit)}`);
          tick();
        }),
      }))));
  }
  if (!ov.children.length) ov.append(el("tr", {}, el("td", { colSpan: 6, className: "muted", textContent: "none" })));
}

let prevRLS = null;
function drawRLS(d) {
  const rls = $("rls");
  rls.replaceChildren();
  if (prevRLS && prevRLS.counted_at === d.counted_at) return; // the same reading
  const dt = prevRLS ? Math.max(0.001, (d.counted_at - prevRLS.counted_at) / 1000) : 0;
  const sum = (o, p) => Object.entries(o || {}).reduce((n, [k, v]) => n + (p(k) ? v : 0), 0);
  for (const [domain, codes] of Object.entries(d.rls || {})) {
    const p = prevRLS ? prevRLS.rls[domain] || {} : codes;
    const r = pred => (dt ? Math.max(0, sum(codes, pred) - sum(p, pred)) / dt : null);
    rls.append(el("tr", {},
      el("td", {}, el("b", { textContent: domain })),
      el("td", { className: "num", textContent: fmt(r(() => true)) }),
      el("td", { className: "num ok", textContent: fmt(r(c => c === "OK")) }),
      el("td", { className: "num limited", textContent: fmt(r(c => c === "OVER_LIMIT")) }),
      el("td", { className: "num degraded", textContent: fmt(r(c => c !== "OK" && c !== "OVER_LIMIT")) })));
  }
  $("rlspanel").hidden = rls.children.length === 0;
  prevRLS = d;
}

// --- the key lookup form ---

function limitsOf(route) {
  if (!last) return [];
  if (route === "global") return last.global_limits;
  const r = routes.find(x => x.route === route);
  return r ? r.limits : [];
}

function fillLookup() {
  const sel = $("lk-route");
  const want = (last.global_limits.length ? ["global"] : []).concat(routes.filter(r => r.limits.length).map(r => r.route));
  const have = [...sel.options].map(o => o.value);
  if (want.join("\n") !== have.join("\n")) {
    const cur = sel.value;
    sel.replaceChildren(...want.map(v => el("option", { value: v, textContent: v })));
    if (want.includes(cur)) sel.value = cur;
    fillLimits();
  }
}

function fillLimits() {
  const ls = limitsOf($("lk-route").value);
  const sel = $("lk-limit");
  const cur = sel.value;
  sel.replaceChildren(...ls.map(l => el("option", { value: l.name, textContent: l.name })));
  if (ls.some(l => l.name === cur)) sel.value = cur;
  fillParts();
}

function fillParts() {
  const l = limitsOf($("lk-route").value).find(x => x.name === $("lk-limit").value);
  const parts = $("lk-parts");
  parts.replaceChildren();
  for (const [i, k] of (l ? l.key : []).entries()) {
    parts.append(el("label", { textContent: k + " " }, el("input", { className: "part", size: 14, name: "part" + i })), " ");
  }
}

function lookupPath() {
  const values = [...$("lk-parts").querySelectorAll("input")].map(i => i.value);
  return limitPath($("lk-route").value, $("lk-limit").value, values);
}

// --- polling ---

async function tick() {
  const want = routes.filter(r => open.has(r.route)).map(r => r.route);
  const asked = want.join("\n");
  const replace = asked !== hist.asked || !hist.times.length;
  const q = new URLSearchParams();
  for (const r of want) q.append("route", r);
  if (!replace) q.set("since", String(hist.times[hist.times.length - 1]));
  try {
    const resp = await fetch("dashboard.json?" + q.toString(), { cache: "no-store" });
    if (!resp.ok) throw new Error(`HTTP ${resp.status}`);
    const d = await resp.json();
    mergeHistory(d.history, replace);
    hist.asked = asked;
    last = d;
    routes = d.routes;
    for (const r of [...open]) if (!routes.some(x => x.route === r)) open.delete(r);
    if (!openedOnce && routes.length) {
      openedOnce = true;
      // A small gateway opens its first routes; a big one waits to be asked.
      if (routes.length <= 10) { for (const r of routes.filter(x => x.route).slice(0, 2)) open.add(r.route); tick(); return; }
    }
    drawHeader(d);
    drawGateway(d);
    drawTable();
    drawDetails();
    drawOverrides(d);
    drawRLS(d);
    fillLookup();
    $("status").textContent = "";
    document.body.dataset.polls = String(Number(document.body.dataset.polls || 0) + 1);
  } catch (e) {
    $("status").textContent = `cannot read dashboard.json: ${e.message}`;
  }
}

$("tokenform").addEventListener("submit", ev => {
  ev.preventDefault();
  token = $("token").value.trim();
  $("token").value = "";
  $("tokenstate").textContent = token ? "set (in this page's memory only)" : "none: actions are sent without one";
  $("forget").hidden = !token;
  tops.clear();
  say(token ? "token set" : "token cleared", false);
});
$("forget").addEventListener("click", () => {
  token = "";
  $("tokenstate").textContent = "none: actions are sent without one";
  $("forget").hidden = true;
  tops.clear();
});
$("reload").addEventListener("click", () => act("reload", async () => {
  const r = await api("POST", "admin/reload");
  tick();
  return r.status;
}));
$("filter").addEventListener("input", ev => { filter = ev.target.value; page = 0; drawTable(); });
$("order").addEventListener("change", ev => { order = ev.target.value; page = 0; drawTable(); });
$("prev").addEventListener("click", () => { page = Math.max(0, page - 1); drawTable(); });
$("next").addEventListener("click", () => { page++; drawTable(); });
$("lk-route").addEventListener("change", fillLimits);
$("lk-limit").addEventListener("change", fillParts);
$("lookup").addEventListener("submit", async ev => {
  ev.preventDefault();
  const out = $("lk-result");
  try {
    const s = await api("GET", lookupPath());
    out.className = "";
    out.textContent = `${s.algorithm}: ${s.remaining} of ${s.limit} left` +
      (s.in_flight !== undefined ? `, ${s.in_flight} in flight` : `, window ${s.window} s, resets in ${s.reset_after} s`);
    say("looked up", false);
  } catch (e) {
    out.className = "bad";
    out.textContent = e.message;
    say("look-up failed: " + e.message, true);
  }
});
$("lk-reset").addEventListener("click", () => act("reset", async () => {
  await api("DELETE", lookupPath());
  $("lk-result").textContent = "reset";
  return "done";
}));
$("ovform").addEventListener("submit", ev => {
  ev.preventDefault();
  const body = {};
  if ($("ov-rate").value.trim()) body.rate = $("ov-rate").value.trim();
  if ($("ov-ttl").value.trim()) body.ttl = $("ov-ttl").value.trim();
  const route = $("ov-route").value.trim(), lim = $("ov-limit").value.trim();
  if (!/^[a-z0-9_-]+$/.test(route) || !/^[a-z0-9_-]+$/.test(lim)) {
    say("override: give a route id (or global) and a limit name, as the config writes them", true);
    return;
  }
  act(`override of ${route}/${lim}`, async () => {
    const r = await api("PUT", `admin/overrides/${encodeURIComponent(route)}/${encodeURIComponent(lim)}`, body);
    tick();
    return r && r.applied === false ? "set, but not applied here" : "set";
  });
});
window.addEventListener("resize", () => { for (const c of charts.values()) c.plot.setSize({ width: Math.max(240, c.host.clientWidth), height: 150 }); });

tick();
setInterval(tick, 2000);
