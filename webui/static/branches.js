// The whole conversation tree in a side panel: a chain of messages stays one column, every branch point
// indents its branches; the shown branch is highlighted and clicking a message shows its branch.
import { h } from "./dom.js";

const SNIPPET_LENGTH = 48;

export class BranchTreeView {
  constructor(container, onSelect) {
    this.container = container;
    this.onSelect = onSelect;
  }

  render(tree, leaf) {
    const active = new Set(leaf ? tree.path(leaf).map((m) => m.id) : []);
    const roots = tree.childrenOf(null);
    this.container.replaceChildren(roots.length === 1 ? this.chain(tree, roots[0], active)
      : this.forks(tree, roots, active));
  }

  /** The messages from `id` down while each has one reply, then the branches of the next branch point. */
  chain(tree, id, active) {
    const list = h("ul", { class: "branch" });
    for (;;) {
      list.append(this.node(tree.get(id), active));
      const children = tree.childrenOf(id);
      if (children.length !== 1) {
        if (children.length) list.append(h("li", { class: "fork-point" }, this.forks(tree, children, active)));
        return list;
      }
      id = children[0];
    }
  }

  forks(tree, ids, active) {
    return h("div", { class: "forks" }, ...ids.map((id) => this.chain(tree, id, active)));
  }

  node(message, active) {
    const text = message.content.replace(/\s+/g, " ").trim();
    const label = text.length > SNIPPET_LENGTH ? `${text.slice(0, SNIPPET_LENGTH)}…` : text || "…";
    const item = h("li", { class: `node ${message.role}${active.has(message.id) ? " active" : ""}` },
      h("button", { type: "button", title: text, onclick: () => this.onSelect(message.id) },
        h("span", { class: "who", text: { user: "You", assistant: "AI", tool: "Tool" }[message.role] }), label));
    item.dataset.id = message.id;
    return item;
  }
}
