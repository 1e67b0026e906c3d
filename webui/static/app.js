// The web UI: which chat is open, which branch is shown, and the reply being streamed.
import * as api from "./api.js";
import { BranchTreeView } from "./branches.js";
import { copyText } from "./dom.js";
import { fillHelp, installShortcuts } from "./keys.js";
import { SettingsDialog } from "./settings.js";
import { Sidebar } from "./sidebar.js";
import { ThreadView } from "./thread.js";
import { Tree } from "./tree.js";

const $ = (id) => document.getElementById(id);

class App {
  constructor() {
    this.conversations = [];
    this.conversation = null;
    this.tree = new Tree();
    this.leaf = null;  // the last message of the shown branch
    this.fork = null;  // {parentId, ids}: n replies shown side by side until one is picked
    this.streaming = null;  // the id of the chat whose replies are being written
    this.openings = 0;  // a chat opened later wins over one still loading
    this.thread = new ThreadView($("thread"), {
      onSwitch: (id, step) => this.switchSibling(id, step),
      onEdit: (id, text) => this.edit(id, text),
      onRegenerate: (id) => this.regenerate(id),
      onPick: (id) => this.showBranch(id),
    });
    this.branches = new BranchTreeView($("branches"), (id) => this.showBranch(this.tree.descend(id)));
    this.sidebar = new Sidebar($("chats"), $("search"), {
      onOpen: (id, messageId) => this.open(id, messageId),
      onRename: (id, title) => this.rename(id, title),
      onDelete: (id) => this.remove(id),
      onSearch: (query) => this.search(query),
    });
    this.settings = new SettingsDialog($("settings-dialog"));
    fillHelp($("help-dialog"));
    this.wire();
  }

  wire() {
    $("new-chat").addEventListener("click", () => this.newChat());
    $("help").addEventListener("click", () => this.showHelp());
    $("settings").addEventListener("click", () => this.editSettings());
    $("toggle-branches").addEventListener("click", () => this.toggleBranches());
    $("stop").addEventListener("click", () => this.stop());
    $("composer").addEventListener("submit", (event) => {
      event.preventDefault();
      this.send();
    });
    $("message").addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        this.send();
      }
    });
    $("thread").addEventListener("click", (event) => {  // the copy buttons of code blocks
      const button = event.target.closest(".copy-code");
      if (button) copyText(button, button.closest(".code-block").querySelector("code").textContent);
    });
    window.addEventListener("hashchange", () => {  // a link to a chat: #<conversation id>
      const id = chatInLocation();
      if (id && id !== this.conversation?.id) this.open(id).catch((e) => this.showError(e));
    });
    installShortcuts(this);
  }

  async start() {
    try {
      this.conversations = await api.listConversations();
    } catch (error) {
      if (error.status === 401 || error.status === 403) {
        $("signed-out").hidden = false;
        return;
      }
      throw error;
    }
    $("app").hidden = false;
    const wanted = chatInLocation();
    const first = this.conversations.find((c) => c.id === wanted) ?? this.conversations[0];
    if (first) await this.open(first.id);
    else this.render();
    $("message").focus();
  }

  // --- opening and showing ---

  async open(id, messageId = null) {
    const opening = ++this.openings;
    const { conversation, messages } = await api.getConversation(id);
    if (!this.conversations.some((c) => c.id === id)) this.conversations = await api.listConversations();
    if (opening !== this.openings) return;
    if (this.conversation?.id !== id) this.thread.clear();
    this.conversation = conversation;
    this.tree = new Tree(messages);
    this.fork = null;
    this.leaf = messageId ? this.tree.descend(messageId) : this.tree.openingLeaf(conversation.active_leaf);
    history.replaceState(null, "", `#${encodeURIComponent(id)}`);
    this.render();
    if (messageId) {
      this.rememberLeaf();
      this.thread.views.get(messageId)?.element.scrollIntoView({ block: "center" });
    }
  }

  showTitle() {
    const c = this.conversation;
    $("chat-title").textContent = c ? c.title : "New chat";
    document.title = c ? `${c.title} · localchat` : "localchat";
  }

  render() {
    const c = this.conversation;
    this.showTitle();
    $("empty-chat").hidden = Boolean(this.leaf);
    for (const id of ["settings", "toggle-branches", "export-markdown", "export-json"]) $(id).hidden = !c;
    if (c) {
      $("export-markdown").href = api.exportUrl(c.id, "markdown", this.savedLeaf());
      $("export-json").href = api.exportUrl(c.id, "json");
    }
    if (this.leaf) this.thread.render(this.tree, this.leaf, this.fork);
    else this.thread.clear();
    this.renderBranches();
    this.renderChats();
  }

  renderBranches() {
    if (!$("branches").hidden) this.branches.render(this.tree, this.leaf);
  }

  renderChats() {
    if (!this.sidebar.searching) this.sidebar.showChats(this.conversations, this.conversation?.id);
  }

  async refreshChats() {
    this.conversations = await api.listConversations();
    this.conversation = this.conversations.find((c) => c.id === this.conversation?.id) ?? this.conversation;
    this.showTitle();
    this.renderChats();
  }

  /** The shown branch's leaf if the server has it (a streaming reply is saved when it finishes). */
  savedLeaf() {
    const message = this.leaf && this.tree.get(this.leaf);
    return message && !message.streaming ? message.id : null;
  }

  /** Show the branch that ends at `leaf`, and remember it as the chat's active branch. */
  showBranch(leaf) {
    this.leaf = leaf;
    this.fork = null;
    this.render();
    this.rememberLeaf();
  }

  rememberLeaf() {
    const leaf = this.savedLeaf();
    if (leaf) api.updateConversation(this.conversation.id, { active_leaf: leaf }).catch((e) => this.showError(e));
  }

  switchSibling(id, step) {
    const siblings = this.tree.siblings(id);
    const next = siblings[siblings.indexOf(id) + step];
    if (next) this.showBranch(this.tree.descend(next));
  }

  // --- writing ---

  get replies() {
    return Math.min(8, Math.max(1, Number($("replies").value) || 1));
  }

  async send() {
    const input = $("message");
    const content = input.value;
    if (!content.trim() || this.streaming) return;
    if (!this.conversation) await this.newChat();
    input.value = "";
    const parentId = this.fork ? this.fork.ids[0] : this.savedLeaf();
    await this.stream(api.sendMessage(this.conversation.id, content, parentId, this.replies));
  }

  async edit(id, content) {
    if (this.streaming) return;
    await this.stream(api.editMessage(this.conversation.id, id, content, this.replies));
  }

  async regenerate(id) {
    if (this.streaming) return;
    await this.stream(api.regenerate(this.conversation.id, id, this.replies));
  }

  regenerateLast() {
    const path = this.leaf ? this.tree.path(this.fork ? this.fork.ids[0] : this.leaf) : [];
    const last = path.findLast((m) => m.role === "assistant") ?? path.at(-1);
    if (last) this.regenerate(last.id);
  }

  stop() {
    if (this.streaming) api.stopReplies(this.streaming).catch((e) => this.showError(e));
  }

  /** Show the events of a send, edit or regenerate as they come. */
  async stream(events) {
    const conversationId = this.conversation.id;
    this.setStreaming(conversationId);
    this.showError(null);
    try {
      for await (const event of events) {
        if (this.conversation?.id !== conversationId) continue;  // another chat was opened meanwhile
        this.handle(event);
      }
    } catch (error) {
      this.showError(error);
    } finally {
      this.setStreaming(null);
      await this.refreshChats();
    }
  }

  handle(event) {
    switch (event.type) {
      case "user":
        this.tree.add(event.message);
        this.leaf = event.message.id;
        this.fork = null;
        this.render();
        this.refreshChats().catch((e) => this.showError(e));
        break;
      case "start":
        for (const id of event.message_ids) {
          this.tree.add({ id, parent_id: event.parent_id, role: "assistant", content: "", streaming: true });
        }
        this.leaf = event.message_ids[0];
        this.fork = event.message_ids.length > 1 ? { parentId: event.parent_id, ids: event.message_ids } : null;
        this.render();
        break;
      case "delta": {
        const reply = this.tree.get(event.message_id);
        if (!reply) break;  // the chat was opened again meanwhile: its reply shows once saved
        reply.content += event.text;
        this.thread.textChanged(event.message_id);
        break;
      }
      case "done":
        this.tree.add(event.message);
        this.thread.update(event.message);
        this.renderBranches();
        if (event.message.id === this.leaf) $("export-markdown").href = api.exportUrl(
          this.conversation.id, "markdown", this.leaf);
        break;
      case "error":
        this.showError(event.message);
        break;
    }
  }

  setStreaming(conversationId) {
    this.streaming = conversationId;
    $("send").hidden = Boolean(conversationId);
    $("stop").hidden = !conversationId;
  }

  showError(error) {
    $("error").hidden = !error;
    $("error").textContent = error ? String(error.message ?? error) : "";
  }

  // --- chats ---

  async newChat() {
    this.openings++;
    const conversation = await api.createConversation();
    this.conversations.unshift(conversation);
    this.thread.clear();
    this.conversation = conversation;
    this.tree = new Tree();
    this.leaf = null;
    this.fork = null;
    history.replaceState(null, "", `#${encodeURIComponent(conversation.id)}`);
    this.render();
    $("message").focus();
  }

  async rename(id, title) {
    await api.updateConversation(id, { title });
    await this.refreshChats();
  }

  async remove(id) {
    const title = this.conversations.find((c) => c.id === id)?.title ?? "this chat";
    if (!(await confirmDelete(`Delete “${title}” and all its branches?`))) return;
    await api.deleteConversation(id);
    this.conversations = this.conversations.filter((c) => c.id !== id);
    if (this.conversation?.id === id) {
      this.conversation = null;
      this.tree = new Tree();
      this.leaf = null;
      this.fork = null;
      if (this.conversations.length) await this.open(this.conversations[0].id);
      else this.render();
    } else {
      this.renderChats();
    }
  }

  async search(query) {
    if (!query) {
      this.renderChats();
      return;
    }
    const hits = await api.search(query);
    if ($("search").value.trim() === query) this.sidebar.showResults(hits);
  }

  focusSearch() {
    $("search").focus();
    $("search").select();
  }

  async editSettings() {
    if (!this.conversation) return;
    const fields = await this.settings.edit(this.conversation);
    if (fields) this.conversation = await api.updateConversation(this.conversation.id, fields);
  }

  toggleBranches() {
    if (!this.conversation) return;
    const panel = $("branches");
    panel.hidden = !panel.hidden;
    $("toggle-branches").setAttribute("aria-pressed", String(!panel.hidden));
    this.renderBranches();
  }

  showHelp() {
    $("help-dialog").showModal();
  }
}

function chatInLocation() {
  return decodeURIComponent(location.hash.slice(1));
}

function confirmDelete(text) {
  const dialog = $("confirm-dialog");
  $("confirm-text").textContent = text;
  dialog.returnValue = "";
  dialog.showModal();
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
  });
}

const app = new App();
app.start().catch((error) => app.showError(error));
