// The shown branch of a chat, root to leaf, and n forked replies side by side while one is to be picked.
// Each message keeps its view: showing another branch moves views; a streaming reply re-renders only itself.
import { h } from "./dom.js";
import { MessageView } from "./message.js";

export class ThreadView {
  constructor(container, actions) {
    this.container = container;
    this.actions = actions;
    this.views = new Map();  // message id -> MessageView in the branch
    this.cards = new Map();  // message id -> MessageView as a fork card
  }

  clear() {
    this.views.clear();
    this.cards.clear();
    this.container.replaceChildren();
  }

  /** A chat session's branch on screen (root..leaf, or root..fork.parentId followed by the fork's replies as cards). */
  render(session) {
    const { tree, fork } = session;
    const nodes = session.path().map((message) => {
      const view = this.viewOf(this.views, message);
      const siblings = tree.siblings(message.id);
      view.showPosition(siblings.indexOf(message.id), siblings.length);
      return view.element;
    });
    if (fork) {
      const cards = fork.ids.map((id) => this.viewOf(this.cards, tree.get(id), { card: true }).element);
      nodes.push(h("section", { class: "fork", "aria-label": `${fork.ids.length} replies: pick one to continue` },
        h("p", { class: "fork-hint", text: `${fork.ids.length} replies: pick one to continue` }),
        h("div", { class: "cards" }, ...cards)));
    }
    const atBottom = this.atBottom();
    this.container.replaceChildren(...nodes);
    if (atBottom) this.scrollToBottom();
  }

  viewOf(views, message, options) {
    let view = views.get(message.id);
    if (!view) {
      view = new MessageView(message, this.actions, options);
      views.set(message.id, view);
    } else if (view.message !== message) {
      view.show(message);
    }
    return view;
  }

  /** A streaming reply's text grew. */
  textChanged(id) {
    const atBottom = this.atBottom();
    for (const views of [this.views, this.cards]) views.get(id)?.textChanged();
    if (atBottom) requestAnimationFrame(() => this.scrollToBottom());
  }

  /** A message changed as a whole (a reply finished: its stats line shows). */
  update(message) {
    const atBottom = this.atBottom();
    for (const views of [this.views, this.cards]) views.get(message.id)?.show(message);
    if (atBottom) this.scrollToBottom();
  }

  atBottom() {
    const scroller = this.container.parentElement;
    return scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 40;
  }

  scrollToBottom() {
    const scroller = this.container.parentElement;
    scroller.scrollTop = scroller.scrollHeight;
  }
}
