// The inspector's only script: keep a thread's timeline current while the page is open, so a
// turn in flight appears and moves. The page reads the same without it (server-rendered HTML).
// It swaps in HTML the server rendered and escaped; it never builds markup from data itself.
(function () {
  "use strict";
  var box = document.getElementById("timeline");
  if (!box || !box.dataset.live) { return; }
  var url = box.dataset.live;
  var last = null;
  var period = 1000;
  box.classList.add("live-on");

  function keepOpen() {
    // the <details> a reader opened stay open across a refresh
    var open = {};
    box.querySelectorAll("li.turn").forEach(function (li) {
      var d = li.querySelector("details");
      if (d && d.open) { open[li.dataset.run] = true; }
    });
    return open;
  }

  function tick() {
    if (document.hidden) { setTimeout(tick, period); return; }
    fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) {
        if (r.status === 401 || r.status === 404) { throw new Error("stopped: " + r.status); }
        return r.ok ? r.text() : null;
      })
      .then(function (html) {
        if (html !== null && html !== last) {
          var open = keepOpen();
          last = html;
          box.innerHTML = html;
          box.querySelectorAll("li.turn").forEach(function (li) {
            var d = li.querySelector("details");
            if (d && open[li.dataset.run]) { d.open = true; }
          });
        }
        setTimeout(tick, period);
      })
      .catch(function () { box.classList.remove("live-on"); });
  }
  setTimeout(tick, period);
})();
