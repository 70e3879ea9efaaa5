"use strict";
const keep = 120; // seconds of history per route
let prev = null;
const history = new Map(); // route -> [{ok, limited, degraded}]

function sum(obj, pred) {
  let n = 0;
  for (const [k, v] of Object.entries(obj || {})) if (pred(k)) n += v;
  return n;
}
const is2xx = c => c >= "200" && c < "300";
const is5xx = c => c >= "500" && c < "600";
const all = () => true;

function rate(now, before, secs) { return Math.max(0, now - before) / secs; }
function fmt(x) { return x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2); }

function el(tag, props, ...kids) {
  const e = document.createElement(tag);
  Object.assign(e, props || {});
  for (const k of kids) e.append(k);
  return e;
}

function spark(points) {
  const w = 240, h = 36, ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("width", w); svg.setAttribute("height", h);
  const top = Math.max(1, ...points.map(p => Math.max(p.ok, p.limited, p.degraded)));
  for (const [key, color] of [["ok", "--ok"], ["limited", "--limited"], ["degraded", "--degraded"]]) {
    const line = document.createElementNS(ns, "polyline");
    const xs = points.map((p, i) => `${(w * (keep - points.length + i) / (keep - 1)).toFixed(1)},${(h - 2 - (h - 4) * p[key] / top).toFixed(1)}`);
    line.setAttribute("points", xs.join(" "));
    line.setAttribute("fill", "none");
    line.setAttribute("stroke", getComputedStyle(document.documentElement).getPropertyValue(color));
    line.setAttribute("stroke-width", "1.5");
    svg.append(line);
  }
  return svg;
}

function draw(d) {
  if (!prev) { prev = d; return; }
  const secs = Math.max(0.001, (d.time - prev.time) / 1000);
  const before = new Map((prev.routes || []).map(r => [r.route, r]));
  const body = document.getElementById("routes");
  body.replaceChildren();
  let T = 0, OK = 0, L = 0, D = 0;
  for (const r of d.routes || []) {
    const p = before.get(r.route) || { requests: {}, rejected: {} };
    const total = rate(sum(r.requests, all), sum(p.requests, all), secs);
    const ok = rate(sum(r.requests, is2xx), sum(p.requests, is2xx), secs);
    const limited = rate(r.requests["429"] || 0, p.requests["429"] || 0, secs);
    const degraded = rate(sum(r.requests, is5xx), sum(p.requests, is5xx), secs);
    T += total; OK += ok; L += limited; D += degraded;
    const h = history.get(r.route) || [];
    h.push({ ok, limited, degraded });
    if (h.length > keep) h.shift();
    history.set(r.route, h);
    const limits = el("td", { className: "limits" });
    for (const [name, n] of Object.entries(r.rejected)) {
      const x = rate(n, (p.rejected || {})[name] || 0, secs);
      limits.append(el("span", { className: x > 0 ? "limited" : "", textContent: `${name} ${fmt(x)}` }));
    }
    const breaker = el("td");
    if (r.breaker) {
      const state = r.breaker.state.toLowerCase(); // CLOSED, OPEN, HALF_OPEN
      const label = state.replace("_", "-") + (r.breaker.forced ? " (forced)" : "");
      breaker.append(el("span", { className: "badge " + state, textContent: label }));
      if (r.breaker.retry_after) breaker.append(` trial in ${Math.ceil(r.breaker.retry_after)} s`);
    }
    body.append(el("tr", {},
      el("td", {}, el("b", { textContent: r.route })),
      el("td", {}, spark(h)),
      el("td", { className: "num", textContent: fmt(total) }),
      el("td", { className: "num ok", textContent: fmt(ok) }),
      el("td", { className: "num limited", textContent: fmt(limited) }),
      el("td", { className: "num degraded", textContent: fmt(degraded) }),
      limits, breaker));
  }
  document.getElementById("total").textContent = fmt(T);
  document.getElementById("admitted").textContent = fmt(OK);
  document.getElementById("limited").textContent = fmt(L);
  document.getElementById("degraded").textContent = fmt(D);
  document.getElementById("storeerr").textContent = fmt(rate(d.store_errors, prev.store_errors, secs));
  document.getElementById("spooled").textContent = d.spooled;
  document.getElementById("instances").textContent = d.fleet ? d.fleet.instances : "–";
  document.getElementById("disagreeing").textContent = d.fleet && d.fleet.disagreeing.length ?
    "disagreeing: " + d.fleet.disagreeing.join(", ") : "";
  const ov = document.getElementById("overrides");
  ov.replaceChildren();
  for (const o of d.overrides || []) {
    ov.append(el("tr", {},
      el("td", {}, el("b", { textContent: o.route })),
      el("td", { textContent: o.limit }),
      el("td", { className: o.applied ? "" : "degraded", textContent: o.override + (o.applied ? "" : " (not applied here)") }),
      el("td", { textContent: o.file }),
      el("td", { className: "num", textContent: o.ttl_left ? Math.ceil(o.ttl_left) + " s" : "–" })));
  }
  document.getElementById("ovtable").hidden = ov.children.length === 0;
  const rls = document.getElementById("rls");
  rls.replaceChildren();
  for (const [domain, codes] of Object.entries(d.rls || {})) {
    const p = (prev.rls || {})[domain] || {};
    const r = pred => rate(sum(codes, pred), sum(p, pred), secs);
    const isErr = c => c !== "OK" && c !== "OVER_LIMIT";
    rls.append(el("tr", {},
      el("td", {}, el("b", { textContent: domain })),
      el("td", { className: "num", textContent: fmt(r(all)) }),
      el("td", { className: "num ok", textContent: fmt(r(c => c === "OK")) }),
      el("td", { className: "num limited", textContent: fmt(r(c => c === "OVER_LIMIT")) }),
      el("td", { className: "num degraded", textContent: fmt(r(isErr)) })));
  }
  document.getElementById("rlstable").hidden = rls.children.length === 0;
  prev = d;
}

async function tick() {
  try {
    const resp = await fetch("dashboard.json", { cache: "no-store" });
    if (!resp.ok) throw new Error(`HTTP ${resp.status}`);
    draw(await resp.json());
    document.getElementById("status").textContent = "";
  } catch (e) {
    document.getElementById("status").textContent = `cannot read dashboard.json: ${e.message}`;
  }
}
tick();
setInterval(tick, 1000);
