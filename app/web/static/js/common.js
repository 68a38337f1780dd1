// Shared helpers for Goodput's pages. Trace strings only ever reach the DOM through textContent.
"use strict";

const GP = (window.GP = window.GP || {});

GP.el = function (tag, attrs, text) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null) node.setAttribute(k, v);
  }
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
};

GP.svg = function (tag, attrs, text) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
};

// Durations with three significant digits ("26.8 s", "1.23 ms"), like the server's fmt_ns filter.
GP.fmtNs = function (ns) {
  if (ns === null || ns === undefined || isNaN(ns)) return "–";
  const a = Math.abs(ns);
  const sig3 = (x) => { const b = Math.abs(x); return x.toFixed(b < 10 ? 2 : b < 100 ? 1 : 0); };
  for (const [div, unit] of [[1e9, "s"], [1e6, "ms"], [1e3, "µs"]]) {
    if (a >= div * 0.9995) return sig3(ns / div) + " " + unit;
  }
  return Math.round(ns) + " ns";
};

GP.fmtPct = function (x) {
  return x === null || x === undefined || isNaN(x) ? "–" : Number(x).toFixed(1) + " %";
};

GP.csrf = function () {
  const meta = document.querySelector('meta[name="csrf-token"]');
  return meta ? meta.getAttribute("content") : "";
};

GP.json = function (node, name) {
  const raw = node.getAttribute("data-" + name);
  return raw ? JSON.parse(raw) : null;
};

GP.fetchJSON = async function (url, options) {
  const opts = Object.assign({ credentials: "same-origin", headers: {} }, options || {});
  opts.headers = Object.assign({ Accept: "application/json" }, opts.headers);
  if (opts.method && opts.method !== "GET") opts.headers["X-CSRF-Token"] = GP.csrf();
  const resp = await fetch(url, opts);
  let body = null;
  try {
    body = await resp.json();
  } catch (e) {
    body = null;
  }
  if (!resp.ok) {
    const err = (body && body.error) || { code: "HTTP_" + resp.status, message: resp.statusText };
    const e = new Error(err.message || err.code);
    e.code = err.code;
    throw e;
  }
  return body;
};

// Forms that must confirm before submitting (e.g. revoke a token); no inline handlers under our CSP.
document.addEventListener("submit", function (ev) {
  const msg = ev.target.getAttribute("data-confirm");
  if (msg && !window.confirm(msg)) ev.preventDefault();
});

// Selects that submit their form when changed (the compare page's baseline); no inline handlers under our CSP.
document.addEventListener("change", function (ev) {
  if (ev.target.matches && ev.target.matches("select[data-autosubmit]")) ev.target.form.submit();
});

GP.onReady = function (fn) {
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", fn);
  else fn();
};

// /rules#rule-COMM002 (and any #id naming a <details>): open that entry and bring it into view.
GP.onReady(function () {
  const open = function () {
    const id = decodeURIComponent(window.location.hash.slice(1));
    const node = id && document.getElementById(id);
    if (node && node.tagName === "DETAILS") { node.open = true; node.scrollIntoView({ block: "start" }); }
  };
  open();
  window.addEventListener("hashchange", open);
});

// One unit per table column: every duration marked data-ns in a column is written in the unit of
// the column's largest value, with three significant digits ("26.8 s" above "0.00123 s", never "1.23 ms"
// under "26.8 s"); data-signed adds "+" to positive deltas. Cells keep their raw ns for sorting and tests.
GP.NS_UNITS = [[1e9, "s"], [1e6, "ms"], [1e3, "µs"], [1, "ns"]];
const sig3Format = new Intl.NumberFormat("en-US", { maximumSignificantDigits: 3 });
GP.unifyUnits = function (root) {
  root = root || document;
  const tables = root.tagName === "TABLE" ? [root] : Array.from(root.querySelectorAll("table"));
  tables.forEach(function (table) {
    const columns = new Map();
    table.querySelectorAll("td [data-ns], td[data-ns]").forEach(function (el) {
      const td = el.closest("td");
      if (td.closest("table") !== table || el.getAttribute("data-ns") === "" || el.children.length) return;
      const v = Number(el.getAttribute("data-ns"));
      if (!isFinite(v)) return;
      if (!columns.has(td.cellIndex)) columns.set(td.cellIndex, []);
      columns.get(td.cellIndex).push([el, v]);
    });
    columns.forEach(function (cells, col) {
      const top = Math.max(...cells.map(([, v]) => Math.abs(v)));
      const [div, unit] = GP.NS_UNITS.find(([d]) => top >= d * 0.9995) || [1, "ns"];
      for (const [el, v] of cells) {
        const text = sig3Format.format(v / div) + " " + unit;
        el.textContent = (el.hasAttribute("data-signed") && v > 0 ? "+" : "") + text;
        el.setAttribute("data-unit", unit);
      }
      const th = table.tHead && table.tHead.rows[0] && table.tHead.rows[0].cells[col];
      if (th) th.setAttribute("data-unit", unit);
    });
  });
};
GP.onReady(function () { GP.unifyUnits(document); });
