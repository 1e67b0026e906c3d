// A chat as a UI holds it, without the DOM: the open conversation, its message tree, the branch shown, and a
// reducer of the reply stream (`apply`) that changes them one event at a time and answers what changed, which app.js
// renders and nothing more. The twin of tui/chat_session.py, with the same names; one file of scenarios
// (tests/tui/chat_session_scenarios.json) drives the tests of both.
import { Tree } from "./tree.js";

/** N replies to one message, shown side by side until one is picked to continue from. */
export class Fork {
  constructor(parentId, ids) {
    this.parentId = parentId;
    this.ids = ids;
  }
}

// --- what an event changed ---

/** A message was stored (the user's, sent or edited; or an edited reply) and the shown branch now ends at it. */
export class BranchShown {
  constructor(leaf) {
    this.leaf = leaf;
  }
}

/** Replies began under a message: empty ones are in the tree (or a stored one goes on, its text kept), the first ends
 * the shown branch. */
export class RepliesStarted {
  constructor(replies, fork, model, retokenizedFrom, temperature) {
    this.replies = replies;  // in reply order
    this.fork = fork;  // several: shown side by side until one is picked
    this.model = model;  // the model writing them
    this.retokenizedFrom = retokenizedFrom;  // the other models whose messages were tokenized again for it
    this.temperature = temperature;  // what they sample at (a fork's: the model's fork temperature at least), or null
  }
}

/** A reply grew by `text` of its answer, or by thinking (the tree holds all of both so far). */
export class TextAdded {
  constructor(messageId, text) {
    this.messageId = messageId;
    this.text = text;
  }
}

/** A reply was stored: its text as saved, how it ended, its stats. */
export class ReplyFinished {
  constructor(message, shown) {
    this.message = message;
    this.shown = shown;  // it ends the shown branch
  }
}

/** The engine failed; the replies it was writing stay as far as they got. */
export class Failed {
  constructor(message) {
    this.message = message;
  }
}

/**
 * The open chat (null: a new one, created with its first message), its messages, and the branch on screen: the one
 * that ends at `leaf`, or while `fork` is set, the one that ends at the fork's parent, with its replies apart.
 */
export class ChatSession {
  constructor() {
    this.conversation = null;
    this.tree = new Tree();
    this.leaf = null;
    this.fork = null;
  }

  // --- which branch is shown ---

  /** A stored chat ({conversation, messages}), on the branch through `messageId` (to its newest end), else on the
   * one it last showed. */
  open({ conversation, messages }, messageId = null) {
    this.conversation = conversation;
    this.tree = new Tree(messages);
    this.show(messageId ? this.tree.newestLeaf(messageId) : this.tree.shownLeaf(conversation.active_leaf));
  }

  /** An empty chat: just created, or null until its first message creates it. */
  newChat(conversation = null) {
    this.conversation = conversation;
    this.tree = new Tree();
    this.show(null);
  }

  /** Show the branch that ends at `leaf` (a fork's replies no longer side by side). */
  show(leaf) {
    this.leaf = leaf;
    this.fork = null;
  }

  /** Show the branch through `id`, down its newest replies. */
  pick(id) {
    this.show(this.tree.newestLeaf(id));
  }

  /** Show the branch of the sibling `step` places from `id` (-1: the one before); that sibling, or null where there
   * is none (nothing changes). */
  stepSibling(id, step) {
    const siblings = this.tree.siblings(id);
    const at = siblings.indexOf(id) + step;
    if (!(at >= 0 && at < siblings.length)) return null;
    this.pick(siblings[at]);
    return siblings[at];
  }

  /** The messages on screen, root first: to the leaf, or to the fork's parent (its replies are shown apart). */
  path() {
    return this.tree.path(this.fork ? this.fork.parentId : this.leaf);
  }

  /** The shown branch's leaf if the server has it (a streaming reply is saved when it finishes), to send under. */
  savedLeaf() {
    const message = this.leaf && this.tree.get(this.leaf);
    return message && !message.streaming ? message.id : null;
  }

  // --- the reply stream ---

  /** Apply one event of a send, edit, regenerate or continue; what changed, or null (a reply this chat does not
   * have). */
  apply(event) {
    switch (event.type) {
      case "user":
      case "edited":
        return this.storedMessage(event.message);
      case "start":
        return this.started(event);
      case "delta":
        return this.textAdded(event);
      case "done":
        this.tree.add(event.message);
        return new ReplyFinished(event.message, event.message.id === this.leaf);
      case "error":
        return new Failed(event.message);
    }
    return null;
  }

  storedMessage(message) {
    this.tree.add(message);
    this.show(message.id);
    return new BranchShown(message.id);
  }

  /** 1. an empty reply per id, in the tree (a continued one: the stored reply, being written again); 2. the first ends
   * the shown branch; 3. several are a fork. */
  started(event) {
    const stored = event.continued ? this.tree.get(event.message_ids[0]) : null;
    const replies = stored
      ? [{ ...stored, finish_reason: null, stopped: false, stats: null, streaming: true }]
      : event.message_ids.map((id, at) =>  // a fork that varies: each reply with what it was asked for
        ({ id, parent_id: event.parent_id, role: "assistant", content: "", streaming: true,
          variation: event.variations?.[at] ?? null }));
    for (const reply of replies) this.tree.add(reply);
    this.show(replies[0].id);
    if (replies.length > 1) this.fork = new Fork(event.parent_id, event.message_ids);
    return new RepliesStarted(replies, this.fork, event.model ?? null, event.retokenized_from ?? [],
      event.temperature ?? null);
  }

  /** A delta: new answer text, or new thinking (a thinking model's, which comes first) with its count of tokens so
   * far. How long the reply thought is measured here until the stored reply says (stats.thinking_s). */
  textAdded({ message_id: messageId, text, reasoning = "", reasoning_tokens: reasoningTokens = 0 }) {
    const reply = this.tree.get(messageId);
    if (!reply) return null;  // the chat was opened again meanwhile: the reply shows once it is stored
    // the views hold this message: they show the thinking and the text as they grow
    if (reasoning) {
      reply.reasoning_content = (reply.reasoning_content ?? "") + reasoning;
      reply.thinking_since ??= Date.now();
    }
    if (reasoningTokens) reply.reasoning_tokens = reasoningTokens;
    if (text && reply.thinking_since && reply.thinking_s == null) {
      reply.thinking_s = (Date.now() - reply.thinking_since) / 1000;
    }
    reply.content += text;
    return new TextAdded(messageId, text);
  }
}
