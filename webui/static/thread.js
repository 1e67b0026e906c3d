// The shown branch of a chat, root to leaf, and n forked replies side by side while one is to be picked, with how they
// were sampled; where a cut to fit the model's context left earlier messages out, a marker before the first one it kept
// (those left out dimmed).
// Each message keeps its view: showing another branch moves views; a streaming reply re-renders only itself.
import { cutIn, cutMarker } from "./context.js";
import { h } from "./dom.js";
import { MessageView } from "./message.js";

const cutKey = (cut) => (cut ? `${cut.firstKeptId}/${cut.count}` : null);

/** "3 replies, sampled at temperature 0.7" (`temperature` null: not known) */
export function forkSampling(count, temperature) {
  return `${count} replies${temperature == null ? "" : `, sampled at temperature ${temperature}`}`;
}

/** Why a fork may sample hotter than its chat: `sampling`, the model's defaults (GET /api/conversation-defaults'
 * sampling; null: not known). */
function forkTemperatureNote(sampling) {
  if (!sampling) return null;
  return `A fork's replies sample at temperature ${sampling.fork_temperature} at least (or the chat's, where higher), ` +
    "so that they differ; a reply that came out the same as another is sampled again, wider each time (hotter, " +
    "top-p and min-p toward every token) until it differs.";
}

export class ThreadView {
  /** `documents`: the known documents (id -> Document), which name those the messages carry. */
  constructor(container, actions, documents) {
    this.container = container;
    this.actions = actions;
    this.documents = documents;
    this.views = new Map();  // message id -> MessageView in the branch
    this.cards = new Map();  // message id -> MessageView as a fork card
    this.cutShown = null;  // where the marker is ("first kept id/count"), null: none
    this.sampling = null;  // the model's sampling defaults (GET /api/conversation-defaults' sampling), null: not known
    this.startTemperature = null;  // what the replies being written sample at (their start event's temperature)
  }

  clear() {
    this.views.clear();
    this.cards.clear();
    this.container.replaceChildren();
  }

  /** A chat session's branch on screen (root..leaf, or root..fork.parentId followed by the fork's replies as cards),
   * with the marker of the latest cut. */
  render(session) {
    const { tree, fork } = session;
    const path = session.path();
    const cut = cutIn(path);
    this.cutShown = cutKey(cut);
    const nodes = path.flatMap((message) => {
      const view = this.viewOf(this.views, message);
      const siblings = tree.siblings(message.id);
      view.showPosition(siblings.indexOf(message.id), siblings.length);
      view.element.classList.toggle("left-out", Boolean(cut?.leftOut.has(message.id)));
      return message.id === cut?.firstKeptId ? [cutMarker(cut), view.element] : [view.element];
    });
    if (fork) {
      const cards = fork.ids.map((id) => this.viewOf(this.cards, tree.get(id), { card: true }).element);
      // what the fork sampled at: a reply sampled again (wider, hotter) says its own
      const temperature = fork.ids.map((id) => tree.get(id).stats).find((s) => s?.temperature != null && !s.resampled)
        ?.temperature ?? this.startTemperature;
      const asked = fork.ids.map((id) => tree.get(id).variation).filter(Boolean);
      const kept = asked.some((v) => v.keep && v.instruction);
      const sampling = asked.length
        ? h("span", { class: "fork-sampling", text: `${fork.ids.length} replies, each asked its own way`,
          title: `The one you pick goes on ${kept ? "with" : "without"} its instruction` })
        : h("span", { class: "fork-sampling", text: forkSampling(fork.ids.length, temperature),
          title: forkTemperatureNote(this.sampling) });
      nodes.push(h("section", { class: "fork", "aria-label": `${fork.ids.length} replies: pick one to continue` },
        h("p", { class: "fork-hint" }, sampling, " — pick one to continue"),
        h("div", { class: "cards" }, ...cards)));
    }
    const atBottom = this.atBottom();
    this.container.replaceChildren(...nodes);
    if (atBottom) this.scrollToBottom();
  }

  /** A message changed as a whole (a reply finished: its stats line shows). */
  update(message) {
    const atBottom = this.atBottom();
    for (const views of [this.views, this.cards]) views.get(message.id)?.show(message);
    if (atBottom) this.scrollToBottom();
  }

  viewOf(views, message, options) {
    let view = views.get(message.id);
    if (!view) {
      view = new MessageView(message, this.actions, { documents: this.documents, ...options });
      views.set(message.id, view);
    } else if (view.message !== message) {
      view.show(message);
    }
    return view;
  }

  /** A reply finished: its stats may say that its prompt was cut elsewhere than the last one's (the marker moves). */
  showCut(session) {
    if (cutKey(cutIn(session.path())) !== this.cutShown) this.render(session);
  }

  /** A streaming reply's text grew. */
  textChanged(id) {
    const atBottom = this.atBottom();
    for (const views of [this.views, this.cards]) views.get(id)?.textChanged();
    if (atBottom) requestAnimationFrame(() => this.scrollToBottom());
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
