// The links between a chat and the chats started from a summary of it (POST .../summarize): above its messages,
// "Started from a summary of ‹title›"; below them, "Continued in ‹title›" for each chat continued from it. A link is
// to #<conversation id>, which opens that chat.
import { h } from "./dom.js";

function chatLink(id, conversations) {
  const title = conversations.find((c) => c.id === id)?.title ?? "another chat";
  return h("a", { href: `#${encodeURIComponent(id)}`, class: "chat-link", text: title, "data-id": id });
}

export class SummaryLinks {
  /** `before` and `after`: the elements above and below the thread. */
  constructor(before, after) {
    this.before = before;
    this.after = after;
  }

  /** The open chat's links (`summaries`: the ids of the chats continued from it); `conversations` name them. */
  show(conversation, summaries, conversations) {
    const source = conversation?.summary_of;
    this.before.hidden = !source;
    this.before.replaceChildren(...(source ? ["Started from a summary of ", chatLink(source, conversations)] : []));
    const continued = (conversation ? summaries : []).flatMap((id, i) => [...(i ? [", "] : []), chatLink(id, conversations)]);
    this.after.hidden = !continued.length;
    this.after.replaceChildren(...(continued.length ? ["Continued in ", ...continued] : []));
  }
}
