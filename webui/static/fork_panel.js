// The Fork box's panel: while a message gets two replies or more, a line that opens (folded at first: small on a phone)
// one field per reply for how it should differ
// ("Shorter.", "As a table."; left empty: as asked), presets that fill them ("shorter / longer / as a list" comes with
// the page; "Save these" keeps the fields shown as another, in this browser), and whether the picked reply goes on with
// its instruction as a turn of the chat. Each instruction goes after the whole chat: the replies share its history.
import { h } from "./dom.js";

const PRESETS_KEY = "localchat.forkPresets";
export const DEFAULT_PRESETS = { "shorter / longer / as a list": ["Shorter.", "Longer.", "As a list."] };

/** A preset's name: its lines, short ("shorter / longer / as a list"). */
export function presetName(lines) {
  return lines.filter(Boolean).map((line) => line.replace(/\.$/, "").toLowerCase()).join(" / ");
}

/** What a fork's reply was asked for, in a few words, as the terminal says it (app/markdown.py variation_words):
 * "Shorter. · temperature 1.2"; "as the others" where it names nothing. */
export function variationWords(variation) {
  const values = ["temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty",
    "frequency_penalty", "seed"].filter((name) => variation[name] != null)
    .map((name) => `${name.replaceAll("_", " ")} ${variation[name]}`);
  return [variation.instruction, ...values].filter(Boolean).join(" · ") || "as the others";
}

export class ForkPanel {
  /** `panel`: the section above the composer; `forkSize`: the Fork box (ForkSize), whose number it follows. */
  constructor(panel, forkSize, maxLength = 1000) {
    this.panel = panel;
    this.forkSize = forkSize;
    this.maxLength = maxLength;
    this.fields = h("div", { class: "variation-fields" });
    this.keep = h("input", { type: "checkbox", id: "fork-keep" });
    this.presets = h("div", { class: "fork-presets" });
    this.summary = h("summary", {});
    this.details = h("details", {}, this.summary,
      h("p", { class: "fork-panel-title", text: "A line per reply, after the whole chat; empty: as asked" }),
      this.fields,
      h("div", { class: "fork-panel-foot" }, this.presets,
        h("label", { class: "fork-keep", title: "The reply you pick goes on with its instruction as a turn of the " +
          "chat (else without it)" }, this.keep, " Keep the instruction in the chat")));
    panel.replaceChildren(this.details);
    forkSize.input.addEventListener("input", () => this.show());
    this.fields.addEventListener("input", () => this.summarize());
    this.show();
  }

  /** The folded line: what it opens, and how many replies are asked their own way. */
  summarize() {
    const asked = this.lines().filter((line) => line.trim()).length;
    this.summary.textContent = `Ask each reply its own way${asked ? ` · ${asked} of ${this.forkSize.value} asked` : ""}`;
  }

  /** The saved presets (name -> lines), this browser's; the page's own until one is saved. */
  get savedPresets() {
    try {
      return JSON.parse(localStorage.getItem(PRESETS_KEY)) ?? DEFAULT_PRESETS;
    } catch {
      return DEFAULT_PRESETS;
    }
  }

  /** As many fields as the Fork box says (none and hidden below two), each keeping what was typed in it. */
  show(lines = null) {
    const count = this.forkSize.value;
    this.panel.hidden = count < 2;
    const typed = lines ?? this.lines();
    this.fields.replaceChildren(...Array.from({ length: count }, (_, at) => {
      const input = h("input", { type: "text", class: "variation", maxlength: this.maxLength,
        "aria-label": `Reply ${at + 1}: how it should differ`,
        placeholder: `Reply ${at + 1}: as asked, or shorter, formal, in French…` });
      input.value = typed[at] ?? "";
      return input;
    }));
    this.showPresets();
    this.summarize();
  }

  showPresets() {
    const presets = this.savedPresets;
    this.presets.replaceChildren(...Object.entries(presets).map(([name, lines]) =>
      h("button", { type: "button", class: "preset", text: name, title: lines.join(" | "),
        onclick: () => this.use(lines) })),
    h("button", { type: "button", class: "save-preset", text: "Save these", onclick: () => this.save() }));
  }

  lines() {
    return [...this.fields.querySelectorAll("input")].map((input) => input.value);
  }

  /** A preset: as many replies as it has lines, each field its line. */
  use(lines) {
    this.forkSize.keep(this.forkSize.chatId, Math.max(2, lines.length));  // (its fields: shown again below)
    this.show(lines);
  }

  save() {
    const lines = this.lines().map((line) => line.trim()).filter(Boolean);
    if (!lines.length) return;
    localStorage.setItem(PRESETS_KEY, JSON.stringify({ ...this.savedPresets, [presetName(lines)]: lines }));
    this.showPresets();
  }

  /** The variations of a message being sent (variations()); the panel folds to its line, so that the replies have
   * the room, and its fields stay for the next message. */
  take(count) {
    this.details.open = false;
    return this.variations(count);
  }

  /** One variation per reply (`count` of them), or null where no field says anything (a plain fork). */
  variations(count) {
    if (count < 2) return null;
    const lines = this.lines().slice(0, count).map((line) => line.trim());
    if (!lines.some(Boolean)) return null;
    const keep = this.keep.checked;
    return lines.map((line) => (line ? { instruction: line, ...(keep && { keep: true }) } : {}));
  }
}
