// Pulling a GGUF model from the Hugging Face Hub in the sidebar (POST /api/models/pull, as `localchat pull`): a field
// for REPO [FILE], then the download's progress (GET /api/models/pull) until the model is here and the Model list has
// it. A pull under way when the page opens (begun elsewhere, or before a reload) is followed the same way.
import * as api from "./api.js";

const POLL_MS = 250;

/** "Downloading tiny.Q4_K_M.gguf: 1.0 of 3.0 MB", and where it stands after (the terminal's pull_words). */
export function pullWords(pull) {
  const name = pull.file ?? pull.repo;
  const mb = (bytes) => (bytes / 1e6).toFixed(1);
  if (pull.state === "failed") return `Could not pull ${pull.repo}: ${pull.error}`;
  if (pull.state === "done") return `${name} is here: choose it in the Model list`;
  if (pull.state === "checking") return `Checking ${name} against its checksum…`;
  if (pull.state === "starting") return `Asking the Hub for ${pull.repo}…`;
  const of = pull.bytes_total ? ` of ${mb(pull.bytes_total)}` : "";
  const again = pull.resumed_from ? ` (on from ${mb(pull.resumed_from)} MB an earlier pull left)` : "";
  return `Downloading ${name}: ${mb(pull.bytes_done)}${of} MB${again}`;
}

export class PullForm {
  /** `elements`: details, form, input, progress, status; `onPulled(model)`: the model is here (its name). */
  constructor(elements, onPulled) {
    this.elements = elements;
    this.onPulled = onPulled;
    elements.form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.start();
    });
  }

  /** A pull under way when the page opens, followed. */
  async resume() {
    let pull;
    try {
      pull = await api.modelPull();
    } catch {
      return;  // none since the engine started
    }
    if (pull.state !== "done" && pull.state !== "failed") {
      this.elements.details.open = true;
      await this.follow(pull);
    }
  }

  /** REPO [FILE] as typed (the text stays until the model is here). */
  async start() {
    const words = this.elements.input.value.trim().split(/\s+/).filter(Boolean);
    if (words.length < 1 || words.length > 2) {
      this.say("Type a repo of GGUF files, and one of its files if it has several: OWNER/NAME [FILE.gguf]", true);
      return;
    }
    let pull;
    try {
      pull = await api.pullModel(words[0], words[1]);
    } catch (error) {
      this.say(`Could not pull ${words[0]}: ${error.message ?? error}`, true);
      return;
    }
    await this.follow(pull);
  }

  async follow(pull) {
    const { progress, input } = this.elements;
    this.elements.form.querySelector("button").disabled = true;
    progress.hidden = false;
    while (pull.state !== "done" && pull.state !== "failed") {
      this.say(pullWords(pull), false);
      if (pull.bytes_total) progress.value = pull.bytes_done / pull.bytes_total;
      else progress.removeAttribute("value");
      await new Promise((resolve) => setTimeout(resolve, POLL_MS));
      pull = await api.modelPull();
    }
    progress.hidden = true;
    this.elements.form.querySelector("button").disabled = false;
    this.say(pullWords(pull), pull.state === "failed");
    if (pull.state === "done") {
      input.value = "";
      await this.onPulled(pull.model);
    }
  }

  say(text, error) {
    this.elements.status.textContent = text;
    this.elements.status.classList.toggle("error", error);
  }
}
