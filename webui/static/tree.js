// A conversation's messages as a tree: parents, ordered children, branches root..leaf.

/** A reply still being written (by this page or another client): it has no finish reason yet. */
export const isWriting = (message) => message.role === "assistant" && message.finish_reason == null;

/** A reply that did not end its turn (cut at max tokens, stopped, interrupted, edited) and called no tools: a continue
 * takes it (CONTINUABLE and continuable() in app/protocol/conversations.py). */
export const isContinuable = (message) => message.role === "assistant" && !message.tool_calls?.length &&
  ["length", "abort", "interrupted", "edited"].includes(message.finish_reason);

/** A reply still in its thinking (a thinking model's): being written, with thinking so far and no answer yet. */
export const isThinking = (message) => isWriting(message) && Boolean(message.reasoning_content) && !message.content;

export class Tree {
  constructor(messages = []) {
    this.byId = new Map();
    this.children = new Map();  // parent id (null for the roots) -> child ids, in the order written
    for (const message of messages) this.add(message);
  }

  /** Adds a message, or replaces it (a streamed reply once saved: siblings are then in the order saved). */
  add(message) {
    const key = message.parent_id ?? null;
    if (!this.children.has(key)) this.children.set(key, []);
    const siblings = this.children.get(key);
    if (!this.byId.has(message.id)) siblings.push(message.id);
    this.byId.set(message.id, message);
    const written = (id) => this.byId.get(id).created_at ?? Infinity;  // one being written comes last
    siblings.sort((a, b) => (written(a) > written(b)) - (written(a) < written(b)));
  }

  /** Adds the messages that are new or changed (replies written meanwhile); true if there were any. */
  merge(messages) {
    const changed = messages.filter((m) => {
      const known = this.get(m.id);
      return !known || known.content !== m.content || known.reasoning_content !== m.reasoning_content ||
        known.finish_reason !== m.finish_reason;
    });
    changed.forEach((m) => this.add(m));
    return changed.length > 0;
  }

  /** Whether some reply is still being written. */
  writing() {
    return [...this.byId.values()].some(isWriting);
  }

  /** Whether some reply is still in its thinking. */
  thinking() {
    return [...this.byId.values()].some(isThinking);
  }

  get(id) {
    return this.byId.get(id);
  }

  has(id) {
    return this.byId.has(id);
  }

  childrenOf(id) {
    return this.children.get(id ?? null) ?? [];
  }

  /** The message and its siblings (the other replies to its parent), in the order written. */
  siblings(id) {
    return this.childrenOf(this.get(id).parent_id);
  }

  /** The messages from the root down to `leaf`. */
  path(leaf) {
    const path = [];
    for (let m = this.get(leaf); m; m = this.get(m.parent_id)) path.push(m);
    return path.reverse();
  }

  /** The end of the branch through `id`, following the newest child down. */
  newestLeaf(id) {
    let children = this.childrenOf(id);
    while (children.length) {
      id = children[children.length - 1];
      children = this.childrenOf(id);
    }
    return id;
  }

  /** The branch to open a chat on: the active one (down to its newest end), else the newest message's. */
  shownLeaf(activeLeaf) {
    if (activeLeaf && this.has(activeLeaf)) return this.newestLeaf(activeLeaf);
    let newest = null;
    for (const m of this.byId.values()) if (!newest || m.created_at >= newest.created_at) newest = m;
    return newest ? this.newestLeaf(newest.id) : null;
  }
}
