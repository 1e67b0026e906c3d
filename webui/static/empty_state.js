// What a new chat shows before its first message: what to do (type, attach documents, the keys), and which model
// answers; a small model (such as the one built into localchat) gets a kind word on what to expect of it and where a
// larger one is chosen.
import { h } from "./dom.js";

/** Fills `element` for the model `model` (its served name; null: not known yet); `small`: it has under a billion
 * weights (GET /api/conversation-defaults' small_model); `embedded`: it is the one built into localchat. */
export function showEmptyState(element, model, small, embedded) {
  element.replaceChildren(
    h("h2", { text: model ? `Chat with ${model}` : "A new chat" }),
    h("ul", {},
      h("li", {}, "Type a message below: ", h("kbd", { text: "Enter" }), " sends it, ",
        h("kbd", { text: "Shift+Enter" }), " starts a new line."),
      h("li", { text: "Attach documents (text, Markdown, code, HTML or PDF) with Attach, or drop files on the chat: " +
        "the model reads them with your message." }),
      h("li", { text: "Settings sets a system prompt and how the model samples, before the first message too." }),
      h("li", {}, h("kbd", { text: "Ctrl+K" }), " searches every chat, ", h("kbd", { text: "Ctrl+/" }),
        " lists the keyboard shortcuts.")),
    small && model ? h("p", { class: "model-advice", text: `${model} is ${embedded ? "the small model built into " +
      "localchat" : "a small model"}: quick and private, but it often gets things wrong, so take its answers lightly. ` +
      "A larger GGUF model, chosen in the Model list, answers much better." }) : null);
}
