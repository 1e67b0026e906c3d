// The open chat's model and settings at a glance: chips above the composer — the model the engine runs, the
// temperature, the most tokens a reply has, and whether a system prompt, JSON mode or tools are set. The model's chip
// (its tooltip: what the model samples with, what its KV cache holds) opens the Model list, the others the Settings
// dialog.
import { h } from "./dom.js";

/** `actions`: onModel(), onSettings(). */
export class ChatSummary {
  constructor(container, actions) {
    this.container = container;
    this.actions = actions;
    // on a phone the row scrolls sideways: a fade at an edge says that more chips are past it
    container.addEventListener("scroll", () => this.showMore(), { passive: true });
    new ResizeObserver(() => this.showMore()).observe(container);
  }

  showMore() {
    const { scrollLeft, scrollWidth, clientWidth } = this.container;
    this.container.classList.toggle("more-right", scrollLeft + clientWidth < scrollWidth - 1);
    this.container.classList.toggle("more-left", scrollLeft > 1);
  }

  /** `chat`: {system_prompt, settings} of the open chat, or the defaults of one not yet written (null: not known
   * yet); `model`: the served name of the model the engine runs; `modelInfo`: its info's [label, text] lines
   * (model_info.js), for the model chip's tooltip. */
  show(chat, model, modelInfo) {
    const settings = chat?.settings;
    const chip = (name, value, title) => h("button", { type: "button", class: "chip", title,
      onclick: () => this.actions.onSettings() }, h("span", { class: "chip-name", text: name }), value);
    const chips = !settings ? [] : [
      chip("Temperature", String(settings.temperature), "Sampling temperature (0: always the likeliest token)"),
      chip("Max", `${settings.max_tokens} tokens`, "The most tokens a reply has"),
      chat.system_prompt && chip("System prompt", "set", chat.system_prompt),
      settings.json_mode && chip("JSON", "on", "Replies are JSON objects"),
      settings.tools.length && chip("Tools", String(settings.tools.length),
        settings.tools.map((tool) => tool.function.name).join(", ")),
    ];
    this.container.replaceChildren(
      model && h("button", { type: "button", class: "chip model-chip", text: model,
        title: [`${model} answers: choose another model in the Model list`,
          ...modelInfo.map(([label, text]) => `${label}: ${text}`)].join("\n"), onclick: () => this.actions.onModel() }),
      ...chips.filter(Boolean));
    this.showMore();
  }
}
