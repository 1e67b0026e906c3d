// A reply's statistics in words: one quiet short line under it ("48 tokens · 180 tok/s", and how it ended), and the
// figures a developer reads (time to first token, speed, drafts kept, prompt tokens cached, how it was sampled) in its
// tooltip and under it once the line is tapped or clicked.
import { h } from "./dom.js";
import { isWriting } from "./tree.js";

/** How the reply ended where that is worth saying ("writing…", "stopped", ...); null: it ended by itself. */
function ending(message) {
  if (isWriting(message)) return "writing…";
  if (message.finish_reason === "interrupted") return "interrupted";  // the engine stopped meanwhile
  if (message.stopped) return "stopped";
  if (message.finish_reason === "length") return "cut at max tokens";
  if (message.finish_reason === "edited") return "edited";
  return null;
}

/** "sampled again 2 times, wider (temperature 1.0, top-p 1, min-p 0): same as another reply" where the reply was
 * sampled again for being the same as a sibling of its fork (`resampled` times, wider each time); null where it was
 * not. */
export function resampledNote(stats) {
  const times = stats?.resampled ?? 0;
  if (!times) return null;
  const wider = stats.top_p != null ? `, wider (temperature ${stats.temperature}, top-p ${stats.top_p}, ` +
    `min-p ${stats.min_p})` : "";
  return `sampled again${times > 1 ? ` ${times} times` : ""}${wider}: same as another reply`;
}

/** "48 tokens · 180 tok/s · stopped": the short line under a reply. */
export function statsLine(message) {
  const stats = message.stats;
  const parts = stats ? [`${stats.completion_tokens} tokens`,
    stats.tokens_per_s != null && `${Math.round(stats.tokens_per_s)} tok/s`, resampledNote(stats)] : [];
  return [...parts, ending(message)].filter(Boolean).join(" · ");
}

/** "0.21 s to first token · 35.2 tokens/s · 64% of drafts kept · 80 tokens · 41/57 prompt tokens cached · temperature
 * 0.7": the whole figures ("" for a reply without stats). */
export function statsDetails(message) {
  const stats = message.stats;
  if (!stats) return "";
  const parts = [];
  if (stats.time_to_first_token_s != null) parts.push(`${stats.time_to_first_token_s.toFixed(2)} s to first token`);
  if (stats.tokens_per_s != null) parts.push(`${stats.tokens_per_s.toFixed(1)} tokens/s`);
  if (stats.draft_tokens) {
    parts.push(`${Math.round((100 * stats.accepted_draft_tokens) / stats.draft_tokens)}% of drafts kept`);
  }
  parts.push(`${stats.completion_tokens} tokens`);
  parts.push(`${stats.cached_tokens}/${stats.prompt_tokens} prompt tokens cached`);
  if (stats.temperature != null) parts.push(`temperature ${stats.temperature}`);
  return parts.join(" · ");
}

/** The short line of a message, which opens to its figures (a <details>: a tap on a phone, a click or Enter
 * elsewhere); its tooltip has them too. Hidden where there is nothing to say (a user's message). */
export class StatsView {
  constructor() {
    this.line = h("summary", { class: "stats-line" });
    this.details = h("span", { class: "stats-details" });
    this.element = h("details", { class: "stats" }, this.line, this.details);
  }

  show(message) {
    const line = statsLine(message);
    const details = statsDetails(message);
    this.element.hidden = !line;
    this.element.classList.toggle("without-details", !details);
    if (!details) this.element.open = false;
    this.line.tabIndex = details ? 0 : -1;
    this.line.textContent = line;
    this.line.title = details;
    this.details.textContent = details;
  }
}
