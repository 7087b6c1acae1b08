// echomq dashboard: ask before destructive actions, and reload the page every 5 s when asked
// to (the choice is kept in this browser). Pages work without this file.
document.addEventListener("submit", function (event) {
  var question = event.target.getAttribute("data-confirm");
  if (question && !window.confirm(question)) {
    event.preventDefault();
  }
});

document.addEventListener("DOMContentLoaded", function () {
  var box = document.getElementById("auto-refresh");
  if (!box) return;
  box.parentElement.hidden = false;
  box.checked = window.localStorage.getItem("echomq-refresh") === "1";
  box.addEventListener("change", function () {
    window.localStorage.setItem("echomq-refresh", box.checked ? "1" : "0");
  });
  window.setInterval(function () {
    var typing = document.activeElement && /INPUT|TEXTAREA|SELECT/.test(document.activeElement.tagName)
      && document.activeElement !== box;
    if (box.checked && !typing) window.location.reload();
  }, 5000);
});
