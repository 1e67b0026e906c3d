// Keyboard shortcuts, and the help dialog that lists them (from the same table).
import { h } from "./dom.js";

/** [keys shown, what it does, matches(event), action name]; an action name is a method of the app. */
const SHORTCUTS = [
  ["Enter", "Send the message", null, null],
  ["Shift+Enter", "New line", null, null],
  ["Esc", "Close the menu or a panel, or stop the reply being written", (e) => e.key === "Escape", "escape"],
  ["Alt+A", "Answer now: end the thinking of the reply being written", (e) => e.altKey && e.code === "KeyA",
    "answerNow"],
  ["Alt+N", "New chat", (e) => e.altKey && e.code === "KeyN", "newChat"],
  ["Alt+R", "Regenerate the last reply", (e) => e.altKey && e.code === "KeyR", "regenerateLast"],
  ["Alt+C", "Continue the last reply, where it was cut at max tokens or stopped", (e) => e.altKey && e.code === "KeyC",
    "continueLast"],
  ["Alt+B", "Show or hide the branch tree", (e) => e.altKey && e.code === "KeyB", "toggleBranches"],
  ["Ctrl+K", "Search messages", (e) => (e.ctrlKey || e.metaKey) && e.code === "KeyK", "focusSearch"],
  ["Ctrl+/", "This help", (e) => (e.ctrlKey || e.metaKey) && e.code === "Slash", "showHelp"],
];

export function installShortcuts(app) {
  document.addEventListener("keydown", (event) => {
    if (event.defaultPrevented || document.querySelector("dialog[open]")) return;
    const shortcut = SHORTCUTS.find(([, , matches]) => matches?.(event));
    if (shortcut) {
      event.preventDefault();
      app[shortcut[3]]();
    }
  });
}

export function fillHelp(dialog) {
  dialog.append(h("form", { method: "dialog" },
    h("h2", { text: "Keyboard shortcuts" }),
    h("table", {}, h("tbody", {}, ...SHORTCUTS.map(([keys, what]) =>
      h("tr", {}, h("td", {}, h("kbd", { text: keys })), h("td", { text: what }))))),
    h("div", { class: "dialog-buttons" }, h("button", { class: "primary", text: "Close" }))));
}
