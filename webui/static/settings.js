// A chat's system prompt and sampling settings, edited in a dialog. The inputs' ranges are the server's
// (GET /api/limits); a value it refuses all the same is shown in the dialog, which stays open. A thinking model's
// settings (whether it thinks first, and for how many tokens at most) are shown only while one runs, and kept as they
// are while another does. What happens when the chat outgrows the model's context is its context_overflow policy.
import { h, setRange } from "./dom.js";

// [name, label, step]; the names are SamplingSettings' fields
const NUMBER_FIELDS = [
  ["temperature", "Temperature", "any"],
  ["top_p", "Top p", "any"],
  ["top_k", "Top k (0: off)", 1],
  ["min_p", "Min p", "any"],
  ["repetition_penalty", "Repetition penalty", "any"],
  ["presence_penalty", "Presence penalty", "any"],
  ["frequency_penalty", "Frequency penalty", "any"],
  ["max_tokens", "Max tokens", 1],
  ["seed", "Seed (empty: random)", 1],
];

// [value, label, what it does]: SamplingSettings.context_overflow ("": null, the server's default)
const CONTEXT_POLICIES = [
  ["", "The server's default", "The server's setting (serve.toml's context_overflow): truncate the middle unless it is changed there."],
  ["stop", "Stop", "A message that does not fit is refused: start a new chat from a summary."],
  ["truncate_middle", "Truncate the middle",
    "The system prompt and the first exchange stay; the oldest messages after them are left out."],
  ["rolling_window", "Rolling window", "The oldest messages are left out."],
];

export class SettingsDialog {
  constructor(dialog) {
    this.dialog = dialog;
    this.save = null;
    this.systemPrompt = h("textarea", { name: "system_prompt", rows: 4 });
    this.stop = h("textarea", { name: "stop", rows: 2, placeholder: "one per line" });
    this.numbers = Object.fromEntries(NUMBER_FIELDS.map(([name, , step]) =>
      [name, h("input", { type: "number", name, step: String(step) })]));
    this.jsonMode = h("input", { type: "checkbox", name: "json_mode" });
    this.enableThinking = h("input", { type: "checkbox", name: "enable_thinking",
      onchange: () => { this.thinkingBudget.disabled = !this.enableThinking.checked; } });
    this.thinkingBudget = h("input", { type: "number", name: "thinking_token_budget", step: "1",
      placeholder: "the server's default" });
    this.thinkingFields = h("fieldset", { class: "wide thinking-settings", hidden: true },
      h("legend", { text: "Thinking" }),
      h("label", { class: "check" }, this.enableThinking, "Think before answering"),
      h("label", {}, "Thinking budget (tokens; empty: the server's default)", this.thinkingBudget));
    this.tools = h("textarea", { name: "tools", rows: 3, placeholder: '[{"type": "function", "function": {...}}]' });
    this.contextPolicyNote = h("small", { class: "field-note" });
    this.contextOverflow = h("select", { name: "context_overflow", onchange: () => this.showContextPolicy() },
      ...CONTEXT_POLICIES.map(([value, text]) => h("option", { value, text })));
    this.toolChoice = h("select", { name: "tool_choice" },
      ...["auto", "required", "none"].map((value) => h("option", { value, text: value })));
    this.error = h("p", { class: "dialog-error", role: "alert", hidden: true });
    const form = h("form", { method: "dialog" },
      h("h2", { text: "Chat settings" }),
      h("label", { class: "wide" }, "System prompt", this.systemPrompt),
      h("div", { class: "grid" }, ...NUMBER_FIELDS.map(([name, label]) => h("label", {}, label, this.numbers[name]))),
      this.thinkingFields,
      h("label", { class: "wide" }, "When the chat outgrows the context", this.contextOverflow, this.contextPolicyNote),
      h("label", { class: "wide" }, "Stop strings", this.stop),
      h("label", { class: "wide check" }, this.jsonMode, "Replies are JSON objects"),
      h("label", { class: "wide" }, "Tools the model may call (JSON, OpenAI's format)", this.tools),
      h("label", { class: "wide" }, "Tool choice", this.toolChoice),
      this.error,
      h("div", { class: "dialog-buttons" },
        h("button", { value: "cancel", formnovalidate: true, text: "Cancel" }),
        h("button", { value: "save", class: "primary", text: "Save" })));
    form.addEventListener("submit", (event) => {
      if (event.submitter?.value !== "save") return;  // Cancel closes the dialog
      event.preventDefault();
      this.submit();
    });
    dialog.append(form);
  }

  /** The ranges the server accepts: {name: {min, max}} for each sampling setting. */
  setLimits(limits) {
    for (const [name, input] of Object.entries(this.numbers)) setRange(input, limits[name]);
    setRange(this.thinkingBudget, limits.thinking_token_budget);
  }

  /** Whether the model thinks before it answers: its settings are shown then. */
  showThinking(thinks) {
    this.thinkingFields.hidden = !thinks;
  }

  /** Shows the chat's settings ({system_prompt, settings}: a conversation, or the defaults of one not yet written);
   * Save calls `save({system_prompt, settings})`, and closes the dialog once it is done. */
  edit(conversation, save) {
    this.save = save;
    this.systemPrompt.value = conversation.system_prompt;
    this.stop.value = conversation.settings.stop.join("\n");
    this.jsonMode.checked = conversation.settings.json_mode;
    const tools = conversation.settings.tools;
    this.tools.value = tools.length ? JSON.stringify(tools, null, 2) : "";
    this.toolChoice.value = conversation.settings.tool_choice;
    this.enableThinking.checked = conversation.settings.enable_thinking;
    this.thinkingBudget.value = conversation.settings.thinking_token_budget ?? "";
    this.thinkingBudget.disabled = !this.enableThinking.checked;
    this.contextOverflow.value = conversation.settings.context_overflow ?? "";
    this.showContextPolicy();
    for (const [name, input] of Object.entries(this.numbers)) input.value = conversation.settings[name] ?? "";
    this.showError(null);
    this.dialog.showModal();
  }

  async submit() {
    try {
      await this.save(this.values());  // the server checks the tools and says what is wrong
      this.dialog.close();
    } catch (error) {
      this.showError(error.message);
    }
  }

  showContextPolicy() {
    this.contextPolicyNote.textContent = CONTEXT_POLICIES.find(([value]) => value === this.contextOverflow.value)[2];
  }

  showError(message) {
    this.error.hidden = !message;
    this.error.textContent = message ?? "";
  }

  values() {
    let tools = [];
    try {
      if (this.tools.value.trim()) tools = JSON.parse(this.tools.value);
    } catch (error) {
      throw new Error(`Tools: not JSON (${error.message})`);
    }
    const settings = { stop: this.stop.value.split("\n").filter((s) => s !== ""), json_mode: this.jsonMode.checked,
      tools, tool_choice: this.toolChoice.value, enable_thinking: this.enableThinking.checked,
      thinking_token_budget: this.thinkingBudget.value === "" ? null : Number(this.thinkingBudget.value),
      context_overflow: this.contextOverflow.value || null };
    for (const [name, input] of Object.entries(this.numbers)) {
      if (input.value !== "") settings[name] = Number(input.value);  // empty: the default (no seed)
    }
    return { system_prompt: this.systemPrompt.value, settings };
  }
}
