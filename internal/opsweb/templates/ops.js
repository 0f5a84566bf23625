(function () {
  "use strict";
  // Confirmations: a form with data-confirm asks first and then says it was
  // confirmed (without JavaScript the server asks on a page of its own).
  document.addEventListener("submit", function (e) {
    var f = e.target, msg = f.getAttribute("data-confirm");
    if (!msg) return;
    if (!window.confirm(msg)) { e.preventDefault(); return; }
    var i = document.createElement("input");
    i.type = "hidden"; i.name = "confirmed"; i.value = "1";
    f.appendChild(i);
  }, true);
  // Refresh the live parts in place, unless someone is typing. The script
  // runs in <head>, before <body> (which says how often) exists.
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", refresh);
  else refresh();
  function refresh() {
    var every = +document.body.getAttribute("data-refresh");
    if (!every) return;
    var typed = false;
    document.addEventListener("input", function () { typed = true; });
    setInterval(function () {
      var a = document.activeElement;
      if (typed || (a && /^(INPUT|SELECT|TEXTAREA)$/.test(a.tagName))) return;
      fetch(location.href, { credentials: "same-origin" }).then(function (r) {
        if (!r.ok) throw new Error("status " + r.status);
        return r.text();
      }).then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        document.querySelectorAll("[data-live]").forEach(function (el) {
          var n = doc.getElementById(el.id);
          if (n) el.replaceWith(document.importNode(n, true));
        });
        var s = document.getElementById("refreshed");
        if (s) s.textContent = "updated " + new Date().toISOString().slice(11, 19) + " UTC";
      }).catch(function () {});
    }, every * 1000);
  }
})();
