// Client-side sort and filter for tables marked data-sortable; cells sort by data-sort when present.
"use strict";

(function () {
  const GP = window.GP;

  function cellKey(row, i) {
    const cell = row.cells[i];
    if (!cell) return "";
    const raw = cell.getAttribute("data-sort");
    if (raw !== null && raw !== "" && !isNaN(Number(raw))) return Number(raw);
    return raw !== null ? raw : cell.textContent.trim().toLowerCase();
  }

  function makeSortable(table) {
    const heads = table.tHead ? table.tHead.rows[0].cells : [];
    Array.from(heads).forEach(function (th, i) {
      if (th.hasAttribute("data-nosort")) return;
      th.classList.add("sortable");
      th.setAttribute("tabindex", "0");
      const sort = function () {
        const asc = th.getAttribute("aria-sort") !== "ascending";
        Array.from(heads).forEach((h) => h.removeAttribute("aria-sort"));
        th.setAttribute("aria-sort", asc ? "ascending" : "descending");
        const body = table.tBodies[0];
        const rows = Array.from(body.rows);
        rows.sort(function (a, b) {
          const x = cellKey(a, i), y = cellKey(b, i);
          const c = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
          return asc ? c : -c;
        });
        rows.forEach((r) => body.appendChild(r));
      };
      th.addEventListener("click", sort);
      th.addEventListener("keydown", (e) => { if (e.key === "Enter") sort(); });
    });
  }

  function makeFilter(input) {
    const table = document.getElementById(input.getAttribute("data-filter-table"));
    if (!table) return;
    input.addEventListener("input", function () {
      const q = input.value.trim().toLowerCase();
      let shown = 0;
      Array.from(table.tBodies[0].rows).forEach(function (r) {
        const hit = !q || r.textContent.toLowerCase().includes(q);
        r.hidden = !hit;
        if (hit) shown += 1;
      });
      const out = document.getElementById(input.getAttribute("data-filter-count"));
      if (out) out.textContent = shown + " shown";
    });
  }

  GP.onReady(function () {
    document.querySelectorAll("table[data-sortable]").forEach(makeSortable);
    document.querySelectorAll("input[data-filter-table]").forEach(makeFilter);
  });
})();
