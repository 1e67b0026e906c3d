// The chat list (newest first), each chat with when it was last active and how many messages it has (chats named
// alike tell apart by them), where its history is (its warmth: warm, on disk or cold, and about how long its next
// reply waits for it) and whether it is pinned, with pin, rename and delete; and search results over every chat's
// messages.
import { h } from "./dom.js";

const DAY_MS = 24 * 60 * 60 * 1000;

/** When a chat was last active, as the list says it: "today 14:02", "yesterday 09:15", else its date ("3 Dec", with
 * the year where it is not this one), in the browser's language. `seconds`: Unix time; `now`: a Date. */
export function chatTime(seconds, now = new Date()) {
  const date = new Date(seconds * 1000);
  const midnight = (d) => new Date(d.getFullYear(), d.getMonth(), d.getDate()).getTime();
  const days = Math.round((midnight(now) - midnight(date)) / DAY_MS);
  const time = date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  if (days === 0) return `today ${time}`;
  if (days === 1) return `yesterday ${time}`;
  const year = date.getFullYear() !== now.getFullYear() ? { year: "numeric" } : {};
  return date.toLocaleDateString([], { day: "numeric", month: "short", ...year });
}

/** "today 14:02 · 4 messages" */
export function chatAbout(conversation, now = new Date()) {
  const count = conversation.message_count;
  const messages = count === 0 ? "no messages" : count === 1 ? "1 message" : `${count} messages`;
  return `${chatTime(conversation.updated_at, now)} · ${messages}`;
}

// a chat's warmth at a glance, before the engine's words for it (the terminal's glyphs)
const WARMTH_GLYPHS = { resident: "●", on_disk: "◐", cold: "○" };

/** "● warm · instant" (null: the engine says nothing of it: a new chat, a remote engine). */
export function warmthLine(conversation) {
  const { warmth } = conversation;
  return warmth ? `${WARMTH_GLYPHS[warmth.state]} ${warmth.summary}` : null;
}

/** The tokens behind the line, for its tooltip. */
function warmthDetails(warmth) {
  return `${warmth.tokens.toLocaleString()} tokens of history: ${warmth.resident_tokens.toLocaleString()} in ` +
    `memory, ${warmth.on_disk_tokens.toLocaleString()} on disk, ${warmth.cold_tokens.toLocaleString()} to compute`;
}

/** `actions`: onOpen(conversationId, messageId?), onRename(id, title), onDelete(id), onPin(id, pinned),
 * onSearch(query). */
export class Sidebar {
  constructor(list, searchInput, actions) {
    this.list = list;
    this.searchInput = searchInput;
    this.actions = actions;
    let timer = null;
    searchInput.addEventListener("input", () => {
      clearTimeout(timer);
      timer = setTimeout(() => actions.onSearch(searchInput.value.trim()), 150);
    });
    searchInput.addEventListener("keydown", (event) => {
      if (event.key === "Escape" && searchInput.value) {
        event.stopPropagation();
        searchInput.value = "";
        actions.onSearch("");
      }
    });
  }

  get searching() {
    return this.searchInput.value.trim() !== "";
  }

  showChats(conversations, currentId) {
    this.list.setAttribute("aria-label", "Chats");
    this.list.replaceChildren(...conversations.map((c) => this.chatItem(c, c.id === currentId)));
    if (!conversations.length) this.list.append(h("li", { class: "empty", text: "No chats yet" }));
  }

  showResults(hits) {
    this.list.setAttribute("aria-label", "Search results");
    this.list.replaceChildren(...hits.map((hit) => h("li", { class: "hit" },
      h("button", { type: "button", onclick: () => this.actions.onOpen(hit.conversation_id, hit.message_id) },
        h("span", { class: "title", text: hit.conversation_title, title: hit.conversation_title }),
        h("span", { class: "snippet" }, `${hit.role === "user" ? "You" : "Assistant"}: `,
          ...hit.snippet.map((run) => (run.match ? h("mark", { text: run.text }) : run.text)))))));
    if (!hits.length) this.list.append(h("li", { class: "empty", text: "No messages match" }));
  }

  chatItem(conversation, current) {
    const warmth = warmthLine(conversation);
    const open = h("button", { type: "button", class: "open-chat", onclick: () => this.actions.onOpen(conversation.id) },
      h("span", { class: "title", text: conversation.title, title: conversation.title }),
      h("span", { class: "chat-about", text: chatAbout(conversation),
        title: `Last active ${new Date(conversation.updated_at * 1000).toLocaleString()}` }),
      warmth ? h("span", { class: `chat-warmth ${conversation.warmth.state}`, text: warmth,
        title: warmthDetails(conversation.warmth) }) : null);
    const pinned = conversation.pinned;
    const item = h("li", { class: `chat${current ? " current" : ""}${pinned ? " pinned" : ""}` }, open,
      h("button", { type: "button", class: "pin", "aria-pressed": String(pinned),
        title: pinned ? "Unpin: the chat ages as the others" : "Pin: keep this chat warm (its next reply never waits " +
          "for its history)", "aria-label": pinned ? "Unpin" : "Pin", text: pinned ? "◆" : "◇",
        onclick: () => this.actions.onPin(conversation.id, !pinned) }),
      h("button", { type: "button", class: "rename", title: "Rename", "aria-label": "Rename", text: "✎",
        onclick: () => this.rename(item, conversation) }),
      h("button", { type: "button", class: "delete", title: "Delete", "aria-label": "Delete", text: "×",
        onclick: () => this.actions.onDelete(conversation.id) }));
    item.dataset.id = conversation.id;
    if (current) item.setAttribute("aria-current", "true");
    return item;
  }

  rename(item, conversation) {
    const input = h("input", { class: "rename-input", "aria-label": "Chat title", value: conversation.title });
    let done = false;
    const finish = (save) => {
      if (done) return;
      done = true;
      const title = input.value.trim();
      if (save && title && title !== conversation.title) this.actions.onRename(conversation.id, title);
      else item.replaceWith(this.chatItem(conversation, item.classList.contains("current")));
    };
    input.addEventListener("keydown", (event) => {
      if (event.key === "Enter") finish(true);
      if (event.key === "Escape") {
        event.stopPropagation();
        finish(false);
      }
    });
    input.addEventListener("blur", () => finish(true));
    item.replaceChildren(input);
    input.select();
  }
}
