// A chat's system prompt and sampling settings, edited in a dialog.
import { h } from "./dom.js";

// [name, label, input attributes]; the names are SamplingSettings' fields
const NUMBER_FIELDS = [
  ["temperature", "Temperature", { min: 0, max: 5, step: "any" }],
  ["top_p", "Top p", { min: 0, max: 1, step: "any" }],
  ["top_k", "Top k (0: off)", { min: 0, step: 1 }],
  ["min_p", "Min p", { min: 0, max: 1, step: "any" }],
  ["repetition_penalty", "Repetition penalty", { min: 0.01, step: "any" }],
  ["presence_penalty", "Presence penalty", { min: -2, max: 2, step: "any" }],
  ["frequency_penalty", "Frequency penalty", { min: -2, max: 2, step: "any" }],
  ["max_tokens", "Max tokens", { min: 1, step: 1 }],
  ["seed", "Seed (empty: random)", { min: 0, step: 1 }],
];

export class SettingsDialog {
  constructor(dialog) {
    this.dialog = dialog;
    this.systemPrompt = h("textarea", { name: "system_prompt", rows: 4 });
    this.stop = h("textarea", { name: "stop", rows: 2, placeholder: "one per line" });
    this.numbers = Object.fromEntries(NUMBER_FIELDS.map(([name, , limits]) =>
      [name, h("input", { type: "number", name, ...limits })]));
    const form = h("form", { method: "dialog" },
      h("h2", { text: "Chat settings" }),
      h("label", { class: "wide" }, "System prompt", this.systemPrompt),
      h("div", { class: "grid" }, ...NUMBER_FIELDS.map(([name, label]) => h("label", {}, label, this.numbers[name]))),
      h("label", { class: "wide" }, "Stop strings", this.stop),
      h("div", { class: "dialog-buttons" },
        h("button", { value: "cancel", formnovalidate: true, text: "Cancel" }),
        h("button", { value: "save", class: "primary", text: "Save" })));
    dialog.append(form);
  }

  /** Resolves to the PATCH body ({system_prompt, settings}) when saved, else null. */
  edit(conversation) {
    this.systemPrompt.value = conversation.system_prompt;
    this.stop.value = conversation.settings.stop.join("\n");
    for (const [name, input] of Object.entries(this.numbers)) input.value = conversation.settings[name] ?? "";
    this.dialog.returnValue = "";
    this.dialog.showModal();
    return new Promise((resolve) => {
      this.dialog.addEventListener("close", () => resolve(this.dialog.returnValue === "save" ? this.values() : null),
        { once: true });
    });
  }

  values() {
    const settings = { stop: this.stop.value.split("\n").filter((s) => s !== "") };
    for (const [name, input] of Object.entries(this.numbers)) {
      if (input.value !== "") settings[name] = Number(input.value);  // empty: the default (no seed)
    }
    return { system_prompt: this.systemPrompt.value, settings };
  }
}
