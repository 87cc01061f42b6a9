// Live updates: one EventSource per page, fed by the gateway's WatchJobs stream.
// Every update carries the whole view of a job; this only copies it onto the page.
// The jobs page's stream also sends the rows of new jobs (`listed`), placed in the server's order.
(function () {
  "use strict";
  var script = document.currentScript;
  var url = script && script.dataset.stream;
  if (!url || !window.EventSource) { return; }
  var note = document.querySelector(".live-only");
  if (note) { note.hidden = false; }

  function setText(root, field, text) {
    var el = root.querySelector('[data-field="' + field + '"]');
    if (el) { el.textContent = text; }
    var row = root.querySelector('[data-optional="' + field + '"]');  // a row shown only when it says something
    if (row) { row.hidden = !text; }
  }

  function apply(view) {
    var root = document.querySelector('[data-job="' + CSS.escape(view.job_no) + '"]');
    if (!root) { return; }
    root.dataset.status = view.status;
    ["status_label", "stage_label", "detail", "stage_text", "units_text", "attempt",
     "finished", "started", "duration", "result_summary", "error_message"].forEach(function (f) { setText(root, f, view[f]); });
    setText(root, "percent", view.percent === null ? "" : view.percent + "%");
    setText(root, "stage", view.stage_count ? view.stage_index + "/" + view.stage_count : "");
    var stageBar = root.querySelector('[data-field="stage_bar"]');
    if (stageBar) { stageBar.max = view.stage_count || 1; stageBar.value = view.stage_index; }
    var unitBar = root.querySelector('[data-field="unit_bar"]');
    if (unitBar) { unitBar.hidden = view.percent === null; unitBar.value = view.percent || 0; }
    root.querySelectorAll("[data-action]").forEach(function (el) {
      el.hidden = view.actions.indexOf(el.dataset.action) < 0;
    });
  }

  function rowOf(jobNo) {
    return document.querySelector('#jobs tbody [data-job="' + CSS.escape(jobNo) + '"]');
  }

  // The first row of `order` from `i` on, stepping by `step`, that the page shows.
  function shown(order, i, step) {
    for (; i >= 0 && i < order.length; i += step) {
      var row = rowOf(order[i]);
      if (row) { return row; }
    }
    return null;
  }

  // New rows (rendered and escaped by the gateway) go before the next listed row the page
  // shows, else after the previous one, else first: newest first, as a reload would list them.
  function insert(listed) {
    var body = document.querySelector("#jobs tbody");
    if (!body) { return; }
    var html = {};
    listed.rows.forEach(function (row) { html[row.job_no] = row.html; });
    for (var i = listed.order.length - 1; i >= 0; i--) {
      var jobNo = listed.order[i];
      if (!html[jobNo] || rowOf(jobNo)) { continue; }  // a reconnect lists again what is shown
      var made = document.createElement("template");
      made.innerHTML = html[jobNo].trim();
      var row = made.content.firstElementChild;
      var next = shown(listed.order, i + 1, 1);
      var previous = next ? null : shown(listed.order, i - 1, -1);
      if (next) { body.insertBefore(row, next); } else if (previous) { previous.after(row); } else { body.prepend(row); }
    }
    document.getElementById("jobs").hidden = false;
    var empty = document.getElementById("empty");
    if (empty) { empty.hidden = true; }
  }

  var source = new EventSource(url);
  source.addEventListener("listed", function (e) { insert(JSON.parse(e.data)); });
  var one = url.indexOf("one=1") >= 0;
  source.addEventListener("job", function (e) {
    var view = JSON.parse(e.data);
    apply(view);
    if (one && view.terminal) { source.close(); }
  });
  // The job went away or the token no longer may see it: stop asking; a reload says why.
  source.addEventListener("gone", function () { source.close(); });
})();
