// A thinking model's thinking, apart from its answer: a collapsed block above the answer ("Thinking… 214 tokens"
// while it thinks, "Thought for 12 s" after) that opens to read it. One per message view; it keeps its open or closed
// state while the reply streams.
import { h } from "./dom.js";
import { isThinking } from "./tree.js";

/** "0.8 s", "12 s", "2 min 5 s" */
export function formatSeconds(seconds) {
  if (seconds < 10) return `${seconds.toFixed(1)} s`;
  const whole = Math.round(seconds);
  return whole < 60 ? `${whole} s` : `${Math.floor(whole / 60)} min ${whole % 60} s`;
}

/** "Thinking… 214 tokens" while the reply thinks, then "Thought for 12 s · 214 tokens". The stored reply's stats say
 * how long it thought; a streaming one's were measured as it came (chat_session.js). */
export function thinkingLabel(message) {
  const tokens = message.stats?.reasoning_tokens || message.reasoning_tokens;
  const count = tokens ? `${tokens} tokens` : null;
  if (isThinking(message)) return count ? `Thinking… ${count}` : "Thinking…";
  const seconds = message.stats?.thinking_s ?? message.thinking_s;
  const thought = seconds == null ? "Thought" : `Thought for ${formatSeconds(seconds)}`;
  return count ? `${thought} · ${count}` : thought;
}

export class ThinkingBlock {
  constructor() {
    this.label = h("span", { class: "thinking-label" });
    this.text = h("div", { class: "reasoning" });
    this.shownText = "";
    this.element = h("details", { class: "thinking", hidden: true }, h("summary", {}, this.label), this.text);
  }

  /** The message's thinking as it is now (none: the block is hidden). */
  show(message) {
    const reasoning = message.reasoning_content ?? "";
    this.element.hidden = !reasoning;
    this.element.classList.toggle("active", isThinking(message));
    this.label.textContent = thinkingLabel(message);
    if (reasoning === this.shownText) return;
    if (reasoning.startsWith(this.shownText)) {  // streaming: only the new text is added (a selection stays)
      this.text.append(reasoning.slice(this.shownText.length));
    } else {
      this.text.textContent = reasoning;
    }
    this.shownText = reasoning;
  }
}
