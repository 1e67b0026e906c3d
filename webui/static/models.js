// The engine's model: a list of the models on this machine (GET /api/models), switching with the new model's
// loading progress (GET /health), whether the model can chat (a base model only continues text), whether it thinks,
// what it samples with and what its KV cache holds, and a note when the open chat was written with another model.
import * as api from "./api.js";
import { h } from "./dom.js";

const POLL_MS = 250;  // how often the loading progress is asked for

export class ModelPicker {
  /** `select`: the <select>; `status`: where the progress shows; `note`: the open chat's model note; `onRunning`:
   * called once the model the engine runs is known (at load and after each switch); load waits for its promise. */
  constructor(select, status, note, onError, onRunning) {
    this.select = select;
    this.status = status;
    this.note = note;
    this.onError = onError;
    this.onRunning = onRunning;
    this.catalog = null;
    this.running = null;  // the served name of the model the engine runs
    this.canChat = true;  // false: a base model (no chat template), which only continues text
    this.thinks = false;  // a thinking model: it thinks before it answers (<think>...</think>)
    this.sampling = null;  // what a reply samples with where its chat sets none (SamplingDefaults), null: not known
    this.kvCache = null;  // what the KV cache holds (KVCacheSize), null: not known (a remote engine's)
    this.chatId = null;  // the open chat
    this.chatModel = null;  // the model that wrote its latest reply
    this.started = null;  // what the last reply's start said about its model
    select.addEventListener("change", () => this.switchTo(select.value));
  }

  async load() {
    this.catalog = await api.listModels();
    const health = await api.health();
    this.running = health.model;
    this.canChat = health.chat !== false;
    this.thinks = health.thinking === true;
    this.sampling = health.sampling ?? null;
    this.kvCache = health.kv_cache ?? null;
    this.select.replaceChildren(...this.catalog.models.map((m) => h("option", {
      value: m.name, text: m.served_name, title: m.name, disabled: !m.supported, selected: m.current,
    })));
    this.select.disabled = !this.catalog.switchable;
    this.showNote();
    await this.onRunning();
    // a switch begun elsewhere (the terminal, another tab): its progress, while the page works on
    if (health.status === "loading") this.waitReady().catch((error) => this.onError(error));
  }

  async switchTo(name) {
    try {
      this.select.disabled = true;
      this.status.replaceChildren(h("span", { text: "Stopping the replies…" }));
      this.status.hidden = false;
      await api.switchModel(name);
      await this.waitReady();
    } catch (error) {
      this.status.replaceChildren(h("span", { text: `The model did not load: ${error.message ?? error}` }));
      this.status.hidden = false;
      this.onError(error);
    }
  }

  /** Show the loading progress until the engine is ready (then list the models again), or throw its error. */
  async waitReady() {
    this.select.disabled = true;
    const bar = h("progress", { max: 1 });
    const stage = h("span", { text: "Loading…" });
    this.status.replaceChildren(stage, bar);
    this.status.hidden = false;
    let health;
    while ((health = await api.health()).status === "loading") {
      stage.textContent = `Loading: ${health.progress?.stage ?? "starting"}`;
      if (health.progress?.fraction == null) bar.removeAttribute("value");
      else bar.value = health.progress.fraction;
      await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    }
    if (health.status !== "ready") throw new Error(health.error ?? `the engine is ${health.status}`);
    this.status.hidden = true;
    await this.load();
  }

  /** Whether the engine runs the model built into localchat (a small one). */
  get embedded() {
    return this.catalog?.models.find((m) => m.current)?.source === "embedded";
  }

  /** The Model list focused and, where the browser can, opened. */
  reveal() {
    this.select.focus();
    try {
      this.select.showPicker();
    } catch {  /* a disabled list (a switch under way), or a browser that cannot open it: focused is enough */ }
  }

  /** The open chat (null: a new one) and the model of its latest reply (null: none yet). */
  showChat(conversationId, model) {
    if (conversationId !== this.chatId) this.started = null;
    this.chatId = conversationId;
    this.chatModel = model;
    this.showNote();
  }

  /** A reply started: its model, and the models whose messages were tokenized again for it (said until another
   * chat is opened). */
  showStart(model, retokenizedFrom) {
    if (!retokenizedFrom.length) return;
    this.started = `Continuing with ${model}: the messages written with ${retokenizedFrom.join(", ")} were ` +
      "tokenized again for it.";
    this.showNote();
  }

  showNote() {
    if (this.started) {
      this.note.replaceChildren(this.started);
      this.note.hidden = false;
      return;
    }
    const other = this.chatModel && this.running && this.chatModel !== this.running;
    this.note.hidden = !other;
    if (!other) return;
    const original = this.catalog?.models.find((m) => m.served_name === this.chatModel && m.supported);
    this.note.replaceChildren(`Written with ${this.chatModel}; the engine runs ${this.running}. ` +
      `Continuing tokenizes its messages again for ${this.running}.`,
    original && this.catalog.switchable ? h("button", {
      type: "button", class: "link", text: `Switch to ${this.chatModel}`,
      onclick: () => { this.select.value = original.name; this.switchTo(original.name); },
    }) : null);
  }
}
