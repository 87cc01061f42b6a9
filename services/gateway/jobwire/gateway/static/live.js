// Live updates: one EventSource per page, fed by the gateway's WatchJobs stream.
// Every update carries the whole view of a job; this only copies it onto the page.
(function () {
  "use strict";
  var script = document.currentScript;
  var url = script && script.dataset.stream;
  if (!url || !window.EventSource || url.indexOf("job=") < 0) { return; }
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
     "finished", "result_summary", "error_message"].forEach(function (f) { setText(root, f, view[f]); });
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

  var source = new EventSource(url);
  var one = url.indexOf("one=1") >= 0;
  source.addEventListener("job", function (e) {
    var view = JSON.parse(e.data);
    apply(view);
    if (one && view.terminal) { source.close(); }
  });
  // The job went away or the token no longer may see it: stop asking; a reload says why.
  source.addEventListener("gone", function () { source.close(); });
})();
