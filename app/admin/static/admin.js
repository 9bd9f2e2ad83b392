/* spoolmq admin pages: charts (uPlot) fed by JSON endpoints, and small helpers around htmx.
   No inline scripts: everything is wired from data-* attributes. */
(function () {
  "use strict";

  var UTC = function (ts) { return uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"); };
  var COLORS = ["#2456c7", "#1c7c45", "#b45309", "#7c3aed"];

  function hhmmss(ts) { return new Date(ts * 1000).toISOString().slice(11, 19); }

  function chartOptions(el, data) {
    var bars = el.dataset.chartKind === "bars";
    var series = [{}].concat(data.series.map(function (s, i) {
      var options = { label: s.label, stroke: COLORS[i % COLORS.length], width: 2 };
      if (bars) {
        options.fill = COLORS[i % COLORS.length] + "99";
        options.paths = uPlot.paths.bars({ size: [0.6, 80] });
        options.points = { show: false };
      }
      return options;
    }));
    var options = {
      width: Math.max(200, el.clientWidth),
      height: 220,
      series: series,
      scales: { y: { range: function (u, min, max) { return [0, Math.max(1, max * 1.1)]; } } },
      axes: [{}, { size: 60 }],
      legend: { live: !bars }
    };
    if (bars) {
      options.scales.x = { time: false, range: function (u, min, max) { return [min - 0.5, max + 0.5]; } };
      options.axes[0] = {
        splits: function (u) {
          // One label per bar while they fit, else every n-th.
          var every = Math.max(1, Math.ceil(el._labels.length * 70 / Math.max(1, u.bbox.width / devicePixelRatio)));
          return el._labels.map(function (_, i) { return i; }).filter(function (i) { return i % every === 0; });
        },
        values: function (u, splits) { return splits.map(function (i) { return el._labels[i] || ""; }); },
        rotate: 0
      };
    } else {
      options.tzDate = UTC;
      options.series[0] = { label: "UTC", value: function (u, ts) { return ts == null ? "--" : hhmmss(ts); } };
      options.axes[0] = { space: 70, values: function (u, splits) {
        var seconds = splits.length > 1 && splits[1] - splits[0] < 60;
        return splits.map(function (ts) { return seconds ? hhmmss(ts) : hhmmss(ts).slice(0, 5); });
      } };
      // Always the whole window (ten minutes up to now), so a fresh server shows a time axis.
      options.scales.x = { time: true, range: function (u, min, max) {
        var now = Date.now() / 1000;
        return [Math.min(now - 600, min || now), Math.max(now, max || now)];
      } };
    }
    return options;
  }

  function toColumns(data) {
    return [data.x].concat(data.series.map(function (s) { return s.values; }));
  }

  function loadChart(el) {
    return fetch(el.dataset.chartSrc, { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (r) { if (!r.ok) { throw new Error(r.status); } return r.json(); })
      .then(function (data) {
        el._labels = data.labels || [];
        if (!el._plot) {
          el._plot = new uPlot(chartOptions(el, data), toColumns(data), el);
          new ResizeObserver(function () {
            el._plot.setSize({ width: Math.max(200, el.clientWidth), height: 220 });
          }).observe(el);
        } else {
          el._plot.setData(toColumns(data));
        }
        el.dataset.chartReady = "true";
      })
      .catch(function () { el.dataset.chartReady = "error"; });
  }

  function startCharts(root) {
    root.querySelectorAll("[data-chart-src]").forEach(function (el) {
      if (el._chartStarted) { return; }
      el._chartStarted = true;
      loadChart(el);
      var every = parseInt(el.dataset.chartRefresh || "0", 10);
      if (every > 0) {
        el._timer = setInterval(function () {
          if (!document.body.contains(el)) { clearInterval(el._timer); return; }
          if (!document.hidden) { loadChart(el); }
        }, every);
      }
      (el.dataset.chartEvents || "").split(/\s+/).filter(Boolean).forEach(function (name) {
        document.body.addEventListener(name, function () { loadChart(el); });
      });
    });
  }

  /* A problem+json answer (an error outside the pages' own handling, e.g. a login
     required) is shown as an error box instead of raw JSON. */
  document.addEventListener("htmx:beforeSwap", function (evt) {
    var type = evt.detail.xhr.getResponseHeader("Content-Type") || "";
    if (type.indexOf("json") < 0) { return; }
    var detail = "The server answered " + evt.detail.xhr.status + ".";
    var code = "";
    try {
      var problem = JSON.parse(evt.detail.xhr.responseText);
      detail = problem.detail || problem.title || detail;
      code = problem.code || "";
    } catch (e) { /* not JSON after all */ }
    var box = document.createElement("div");
    box.className = "alert error";
    box.setAttribute("role", "alert");
    var strong = document.createElement("strong");
    strong.textContent = "Request failed";
    var span = document.createElement("span");
    span.className = "detail";
    span.textContent = detail;
    box.append(strong, " ", span);
    if (code) { var c = document.createElement("code"); c.className = "code"; c.textContent = code; box.append(c); }
    evt.detail.serverResponse = box.outerHTML;
    evt.detail.shouldSwap = true;
  });

  /* "Select all" checkboxes: data-select-all="<name of the checkboxes>". */
  document.addEventListener("change", function (evt) {
    var name = evt.target.dataset && evt.target.dataset.selectAll;
    if (!name) { return; }
    document.querySelectorAll('input[type="checkbox"][name="' + name + '"]').forEach(function (box) {
      box.checked = evt.target.checked;
    });
  });

  document.addEventListener("DOMContentLoaded", function () { startCharts(document); });
  document.addEventListener("htmx:load", function (evt) { startCharts(evt.detail.elt); });
})();
