// One message on screen: who wrote it and its ‹ n/m › branch switcher, the documents it carries, its thinking (a
// thinking model's), its text, and under it its actions and its statistics' short line (reply_stats.js).
import { documentChips } from "./documents.js";
import { copyText, h } from "./dom.js";
import { variationWords } from "./fork_panel.js";
import { renderMarkdown } from "./markdown.js";
import { StatsView } from "./reply_stats.js";
import { ThinkingBlock } from "./thinking.js";
import { isContinuable, isWriting } from "./tree.js";

const AUTHORS = { user: "You", assistant: "Assistant", tool: "Tool result" };

/** The message as Markdown: an assistant's tool calls and a tool's result as code blocks (Message.markdown). */
export function messageMarkdown(message) {
  if (message.role === "tool") return "```\n" + message.content + "\n```";
  const calls = (message.tool_calls ?? []).map((call) =>
    `Calls \`${call.function.name}\`:\n\n\`\`\`json\n${call.function.arguments}\n\`\`\``);
  return [message.content, ...calls].filter(Boolean).join("\n\n");
}

/** What a fork's reply was asked for, beside who wrote it ("asked: Shorter."; kept: its instruction is a turn of the
 * chat from there on); null for any other message. */
function asked(message) {
  const { variation } = message;
  if (!variation) return null;
  const kept = variation.keep && variation.instruction ? " (kept in the chat)" : "";
  const words = `asked: ${variationWords(variation)}${kept}`;
  return h("span", { class: "variation", text: words, title: words });
}

/**
 * The view of one message. `actions`: onSwitch(id, step), onEdit(id, text), onRegenerate(id), onContinue(id),
 * onPick(id).
 * `card`: shown as one of n forked replies side by side, with a button to continue from it. `documents`: the known
 * documents (id -> Document), which name the message's.
 */
export class MessageView {
  constructor(message, actions, { card = false, documents = new Map() } = {}) {
    this.message = message;
    this.actions = actions;
    this.card = card;
    this.pending = false;
    const assistant = message.role === "assistant";
    this.position = h("span", { class: "position" });
    this.switcher = h("nav", { class: "switcher", "aria-label": "Branches" },
      h("button", { type: "button", class: "previous", title: "Previous branch", "aria-label": "Previous branch",
        text: "‹", onclick: () => actions.onSwitch(this.message.id, -1) }),
      this.position,
      h("button", { type: "button", class: "next", title: "Next branch", "aria-label": "Next branch", text: "›",
        onclick: () => actions.onSwitch(this.message.id, 1) }));
    this.thinking = new ThinkingBlock();
    this.content = h("div", { class: "content" });
    this.stats = new StatsView();
    const copy = h("button", { type: "button", class: "copy-message", text: "Copy",
      onclick: (event) => copyText(event.currentTarget, this.message.content) });
    const regenerate = card || !assistant ? null : h("button", { type: "button", class: "regenerate",
      text: "Regenerate", onclick: () => actions.onRegenerate(this.message.id) });
    const edit = card || message.role === "tool" ? null : h("button", { type: "button", class: "edit", text: "Edit",
      title: assistant ? "Edit the reply: saved beside it, as a branch to go on from" : "Edit and send again",
      onclick: () => this.startEditing() });
    this.continueButton = card || !assistant ? null : h("button", { type: "button", class: "continue",
      text: "Continue", title: "Go on where the reply ended", onclick: () => actions.onContinue(this.message.id) });
    const pick = card ? h("button", { type: "button", class: "pick", text: "Continue with this reply",
      onclick: () => actions.onPick(this.message.id) }) : null;
    this.element = h("article", { class: `message ${message.role}${card ? " card" : ""}` },
      h("header", {}, h("span", { class: "role", text: AUTHORS[message.role] }), asked(message),
        card ? null : this.switcher),
      documentChips(message.documents, documents), this.thinking.element, this.content,
      h("div", { class: "message-foot" },
        h("span", { class: "actions" }, copy, regenerate, edit, this.continueButton), this.stats.element), pick);
    this.element.dataset.id = message.id;
    this.show(message);
  }

  /** A new state of the message (the stored one replaces the streaming placeholder). */
  show(message) {
    this.message = message;
    const writing = isWriting(message);
    this.element.classList.toggle("streaming", writing);
    this.element.classList.toggle("stopped", Boolean(message.stopped));
    this.element.querySelectorAll(".regenerate, .edit, .continue, .pick").forEach((b) => { b.disabled = writing; });
    if (this.continueButton) this.continueButton.hidden = !isContinuable(message);
    this.thinking.show(this.message);
    this.renderText();
    this.stats.show(message);
  }

  /** Re-render the thinking and the text at the next frame at most once: a streaming reply gets many deltas per
   * frame. */
  textChanged() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => {
      this.pending = false;
      this.thinking.show(this.message);
      this.renderText();
    });
  }

  renderText() {
    if (this.editor) return;
    const { role, content } = this.message;
    this.content.replaceChildren(role === "user" ? h("p", { class: "plain", text: content })
      : renderMarkdown(messageMarkdown(this.message)));
  }

  /** The ‹ n/m › switcher, shown when the message has siblings. */
  showPosition(index, count) {
    this.switcher.hidden = count < 2;
    this.position.textContent = `${index + 1}/${count}`;
    this.switcher.querySelector(".previous").disabled = index === 0;
    this.switcher.querySelector(".next").disabled = index === count - 1;
  }

  startEditing() {
    const input = h("textarea", { class: "edit-input", "aria-label": "Edited message", rows: 3 });
    input.value = this.message.content;
    const finish = () => {
      this.editor = null;
      this.renderText();
    };
    const resend = () => {
      const text = input.value;
      finish();
      if (text.trim()) this.actions.onEdit(this.message.id, text);
    };
    input.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey) {
        event.preventDefault();
        resend();
      } else if (event.key === "Escape") {
        event.stopPropagation();
        finish();
      }
    });
    this.editor = h("div", { class: "editor" }, input,
      h("div", { class: "editor-buttons" },
        h("button", { type: "button", class: "send-edit", onclick: resend,
          text: this.message.role === "assistant" ? "Save as a new branch" : "Send as a new branch" }),
        h("button", { type: "button", class: "cancel-edit", text: "Cancel", onclick: finish })));
    this.content.replaceChildren(this.editor);
    input.focus();
  }
}
