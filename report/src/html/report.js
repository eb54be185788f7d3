// `tracer report --html`: sort a table by the column whose header is clicked (again: the
// other way). Cells sort by their data-v attribute where they have one (numbers: bytes,
// counts, seconds), else by their text. No library: the page must open with no network.
(function () {
  "use strict";
  var root = document.documentElement;
  window.addEventListener("error", function (event) {
    root.setAttribute("data-js", "error: " + event.message);
  });
  var each = function (list, f) {
    Array.prototype.forEach.call(list, f);
  };

  function key(row, col, numeric) {
    var cell = row.cells[col];
    var value = cell ? cell.getAttribute("data-v") : "";
    if (value === null) {
      value = cell.textContent;
    }
    if (numeric) {
      var n = parseFloat(value);
      return isNaN(n) ? -Infinity : n;
    }
    return value.toLowerCase();
  }

  function compare(a, b) {
    return a < b ? -1 : a > b ? 1 : 0;
  }

  function sortTable(table, col) {
    var heads = table.tHead.rows[0].cells;
    var th = heads[col];
    var numeric = th.getAttribute("data-type") === "num";
    var ascending = th.getAttribute("aria-sort") !== "ascending";
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var order = compare(key(a, col, numeric), key(b, col, numeric));
      return ascending ? order : -order;
    });
    each(rows, function (row) {
      body.appendChild(row);
    });
    each(heads, function (head) {
      head.removeAttribute("aria-sort");
    });
    th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
  }

  var tables = document.querySelectorAll("table.sortable");
  each(tables, function (table) {
    each(table.tHead.rows[0].cells, function (th, col) {
      th.tabIndex = 0;
      th.addEventListener("click", function () {
        sortTable(table, col);
      });
      th.addEventListener("keydown", function (event) {
        if (event.key === "Enter" || event.key === " ") {
          event.preventDefault();
          sortTable(table, col);
        }
      });
    });
  });

  // report.html#selftest (the tests' headless browser): click every header twice and check
  // the rows come out in the order its aria-sort says.
  function inOrder(table, col) {
    var th = table.tHead.rows[0].cells[col];
    var numeric = th.getAttribute("data-type") === "num";
    var want = th.getAttribute("aria-sort") === "ascending" ? 1 : -1;
    var rows = table.tBodies[0].rows;
    for (var i = 1; i < rows.length; i++) {
      if (compare(key(rows[i - 1], col, numeric), key(rows[i], col, numeric)) * want > 0) {
        return false;
      }
    }
    return true;
  }
  if (window.location.hash === "#selftest") {
    var failed = [];
    each(tables, function (table, t) {
      each(table.tHead.rows[0].cells, function (th, col) {
        for (var click = 0; click < 2; click++) {
          th.click();
          if (!inOrder(table, col)) {
            failed.push("table " + t + " column " + col);
          }
        }
      });
    });
    root.setAttribute(
      "data-selftest",
      failed.length ? "fail: " + failed.join(", ") : "pass: " + tables.length + " tables"
    );
  }
  root.setAttribute("data-js", "ready");
})();
