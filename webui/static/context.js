// The model's context as a budget people can see: how much of it the shown branch uses (a gauge in the chat's header
// that warns near the edge and then offers a new chat from a summary), and where a cut to fit it left earlier
// messages out (the thread shows a marker there). The numbers are the server's: each reply's stats say what its
// prompt and itself held (context_tokens of context_limit) and what a cut left out (dropped_messages, first_kept_id).
import { h } from "./dom.js";

export const WARNING_SHARE = 0.8;  // the gauge warns from 80% of the context on

/** "412", "3.4k", "33k", "8k" for 8192: k is 1024, as contexts are counted, and the numbers are rounded as the
 * terminal UI rounds them (tui/context_budget.py's tokens_text), so that both show one number for one chat. */
export function formatTokens(count) {
  if (count < 1024) return String(count);
  const tenths = Math.floor((count / 1024) * 10 + 0.5);
  return tenths < 100 ? `${(tenths / 10).toFixed(1).replace(/\.0$/, "")}k` : `${Math.floor(count / 1024 + 0.5)}k`;
}

/** The last reply in the branch with stats (a reply being written has none yet). */
function lastStats(path) {
  return path.findLast((m) => m.role === "assistant" && m.stats)?.stats ?? null;
}

/** The context the branch (root first) uses, as the server counts it (ConversationTree.context): its last reply's
 * prompt and reply, and the messages after it. Its limit is that reply's, else `knownLimit` (null: not known, a remote
 * engine's). null for an empty branch. */
export function contextUse(path, knownLimit) {
  if (!path.length) return null;
  let tokens = 0;
  for (const message of path.toReversed()) {
    const stats = message.role === "assistant" ? message.stats : null;
    if (stats) {
      tokens += stats.context_tokens || stats.prompt_tokens + stats.completion_tokens;
      return { tokens, limit: stats.context_limit ?? knownLimit };
    }
    tokens += message.num_tokens ?? 0;
  }
  return { tokens, limit: knownLimit };
}

/** What the latest cut left out of the branch: the `count` messages before `firstKeptId` (their ids in `leftOut`);
 * null where the last reply's prompt held the whole branch. */
export function cutIn(path) {
  const stats = lastStats(path);
  const firstKept = stats?.dropped_messages ? path.findIndex((m) => m.id === stats.first_kept_id) : -1;
  if (firstKept < 0) return null;
  const count = stats.dropped_messages;
  return { firstKeptId: stats.first_kept_id, count,
    leftOut: new Set(path.slice(Math.max(0, firstKept - count), firstKept).map((m) => m.id)) };
}

/** The divider before the first message the model still saw. */
export function cutMarker(cut) {
  const earlier = cut.count === 1 ? "1 earlier message" : `${cut.count} earlier messages`;
  return h("p", { class: "cut-marker", text: `${earlier} left out — the model sees from here` });
}

/** What happens past the edge, by the chat's context_overflow policy (null: the server's default, which cuts). */
function edgeNote(policy) {
  return policy === "stop" ? "a message that does not fit will be refused"
    : "the next replies leave earlier messages out";
}

/**
 * The gauge ("3.4k / 8k") and, from WARNING_SHARE of the context on, the warning where the composer is, with its
 * "New chat from a summary" button. `onSummarize()`: that button was pressed (a promise: it says "Summarizing…" until
 * it settles).
 */
export class ContextGauge {
  constructor({ gauge, warning, summarize }, onSummarize) {
    this.gauge = gauge;
    this.fill = gauge.querySelector(".gauge-fill");
    this.text = gauge.querySelector(".gauge-text");
    this.warning = warning;
    this.warningText = warning.querySelector(".warning-text");
    this.progress = warning.querySelector("progress");
    this.summarize = summarize;
    summarize.addEventListener("click", () => this.summarizing(onSummarize()));
  }

  /** The context a branch uses ({tokens, limit}; null: nothing to show) under the chat's policy. */
  show(use, policy) {
    const share = use?.limit ? use.tokens / use.limit : null;
    const near = share !== null && share >= WARNING_SHARE;
    this.gauge.hidden = !use;
    this.warning.hidden = !near;
    if (!use) return;
    const tokens = use.tokens.toLocaleString("en");
    const percent = share === null ? null : Math.round(share * 100);
    this.gauge.classList.toggle("warning", near);
    this.fill.style.width = `${Math.min(100, percent ?? 0)}%`;
    this.text.textContent = use.limit ? `${formatTokens(use.tokens)} / ${formatTokens(use.limit)}`
      : `${formatTokens(use.tokens)} tokens`;
    this.gauge.title = use.limit
      ? `This branch uses ${tokens} of the model's context of ${use.limit.toLocaleString("en")} tokens (${percent}%)`
      : `This branch uses ${tokens} tokens`;
    this.warningText.textContent = near ? `This chat uses ${percent}% of the model's context: ${edgeNote(policy)}.` : "";
  }

  async summarizing(done) {
    this.summarize.disabled = true;
    this.summarize.textContent = "Summarizing…";
    this.progress.hidden = false;
    try {
      await done;
    } finally {
      this.summarize.disabled = false;
      this.summarize.textContent = "New chat from a summary";
      this.progress.hidden = true;
    }
  }
}
