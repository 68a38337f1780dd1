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

// Three significant digits, as analysis/fmt.py's sig3: "26.8", "4.20", "0.0123", "312"; from 999.5 on whole
// numbers with thousands separators ("4,210").
const groupFormat = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });
GP.sig3 = function (x) {
  const a = Math.abs(x);
  if (a === 0) return "0.00";
  if (a >= 999.5) return groupFormat.format(x);
  const decade = Math.floor(Math.log10(a));
  let decimals = 2 - decade;
  if (Number(a.toFixed(Math.max(decimals, 0))) >= Math.pow(10, decade + 1)) decimals -= 1;  // 9.996 is "10.0"
  return x.toFixed(Math.max(decimals, 0));
};

// Durations with three significant digits in the unit the value reads best in ("26.8 s", "1.23 ms",
// "546 ns"), like the server's fmt_ns filter.
GP.fmtNs = function (ns) {
  if (ns === null || ns === undefined || ns === "" || isNaN(ns)) return "–";
  const a = Math.abs(ns);
  for (const [div, unit] of [[1e9, "s"], [1e6, "ms"], [1e3, "µs"]]) {
    if (a >= div * 0.9995) return GP.sig3(ns / div) + " " + unit;
  }
  return Math.round(ns) + " ns";
};

// Counts with thousands separators ("1,230"), like the server's fmt_number filter.
GP.fmtCount = function (n) {
  return n === null || n === undefined || n === "" || isNaN(n) ? "–" : groupFormat.format(Number(n));
};

// Percentages as fmt.pct: one decimal, from 1,000 % on whole numbers with separators ("10,972 %").
GP.fmtPct = function (x) {
  if (x === null || x === undefined || x === "" || isNaN(x)) return "–";
  const v = Number(x);
  return (Math.abs(v) >= 999.95 ? groupFormat.format(v) : v.toFixed(1)) + " %";
};

// Shares as fmt.share: whole from 10 % on, two significant digits below, "< 0.01 %" above zero.
GP.fmtShare = function (x) {
  if (x === null || x === undefined || x === "" || isNaN(x)) return "–";
  const v = Number(x), a = Math.abs(v);
  if (a === 0) return "0 %";
  if (a < 0.00995) return (v < 0 ? "> -" : "< ") + "0.01 %";
  let decimals = a >= 9.95 ? 0 : a >= 0.995 ? 1 : a >= 0.0995 ? 2 : 3;
  while (decimals < 2 && Math.abs(Number(v.toFixed(decimals))) === 100 && a !== 100) decimals += 1;
  if (Math.abs(Number(v.toFixed(decimals))) === 100 && a !== 100) return (v > 0 ? "> " : "< -") + (a < 100 ? "99.99" : "100") + " %";
  return (decimals === 0 ? groupFormat.format(Math.round(v)) : v.toFixed(decimals)) + " %";
};

// Sizes as fmt.size: decimal units, three significant digits ("512 B", "1.23 MB").
GP.fmtBytes = function (n) {
  if (n === null || n === undefined || n === "" || isNaN(n)) return "–";
  let v = Number(n);
  for (const unit of ["B", "kB", "MB", "GB", "TB", "PB"]) {
    if (Math.abs(v) < 999.5 || unit === "PB") return unit === "B" ? Math.round(v) + " B" : GP.sig3(v) + " " + unit;
    v /= 1000;
  }
  return "–";
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

// Every duration marked data-ns in a table is written in the unit its own value reads best in, with three
// significant digits ("26.8 s" above "1.23 ms", never "0.00123 s"); data-signed adds "+" to positive deltas.
// Cells keep their raw ns for sorting and tests, and their unit in data-unit.
GP.NS_UNITS = [[1e9, "s"], [1e6, "ms"], [1e3, "µs"], [1, "ns"]];
GP.unifyUnits = function (root) {
  root = root || document;
  const tables = root.tagName === "TABLE" ? [root] : Array.from(root.querySelectorAll("table"));
  tables.forEach(function (table) {
    table.querySelectorAll("td [data-ns], td[data-ns]").forEach(function (el) {
      const td = el.closest("td");
      if (td.closest("table") !== table || el.getAttribute("data-ns") === "" || el.children.length) return;
      const v = Number(el.getAttribute("data-ns"));
      if (!isFinite(v)) return;
      const [, unit] = GP.NS_UNITS.find(([d]) => Math.abs(v) >= d * 0.9995) || [1, "ns"];
      el.textContent = (el.hasAttribute("data-signed") && v > 0 ? "+" : "") + GP.fmtNs(v);
      el.setAttribute("data-unit", unit);
    });
  });
};
GP.onReady(function () { GP.unifyUnits(document); });
