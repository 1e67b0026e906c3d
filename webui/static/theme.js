// The colour theme: "system" (the browser's prefers-color-scheme), "light" or "dark", chosen in the sidebar's Theme
// list and kept across reloads. A classic script in <head>, not a module: the remembered choice is on the page before
// it first paints, so a dark page does not flash white. style.css reads it as :root[data-theme].
(() => {
  const KEY = "localchat.theme";
  const root = document.documentElement;

  function apply(theme) {
    if (theme === "light" || theme === "dark") root.dataset.theme = theme;
    else delete root.dataset.theme;  // the system's
  }

  const stored = localStorage.getItem(KEY) ?? "system";
  apply(stored);
  document.addEventListener("DOMContentLoaded", () => {
    const select = document.getElementById("theme");
    select.value = stored;
    select.addEventListener("change", () => {
      localStorage.setItem(KEY, select.value);
      apply(select.value);
    });
  });
})();
