// The web UI: renders a chat session (chat_session.js: which chat is open, which branch is shown, the replies being
// streamed) and turns clicks and keys into its actions.
import * as api from "./api.js";
import { BranchTreeView } from "./branches.js";
import { BranchShown, ChatSession, Failed, ReplyFinished, RepliesStarted, TextAdded } from "./chat_session.js";
import { ContextGauge, contextUse } from "./context.js";
import { ChatSummary } from "./chat_summary.js";
import { Attachments, documentChips } from "./documents.js";
import { copyText, fitPlaceholder, setRange } from "./dom.js";
import { showEmptyState } from "./empty_state.js";
import { ForkPanel } from "./fork_panel.js";
import { ForkSize } from "./fork_size.js";
import { fillHelp, installShortcuts } from "./keys.js";
import { ModelInfo, modelInfoLines } from "./model_info.js";
import { ModelPicker } from "./models.js";
import { PullForm } from "./pull.js";
import { Panels } from "./panels.js";
import { SettingsDialog } from "./settings.js";
import { Sidebar } from "./sidebar.js";
import { SummaryLinks } from "./summary_links.js";
import { ThreadView } from "./thread.js";
import { isContinuable } from "./tree.js";

const $ = (id) => document.getElementById(id);
const FOLLOW_INTERVAL_MS = 1000;  // a reply written by another client is saved every second
const LAST_CHAT_KEY = "localchat.chat";  // the chat this browser showed last: the page opens it again

class App {
  constructor() {
    this.conversations = [];
    this.session = new ChatSession();
    this.streaming = null;  // the id of the chat whose replies are being written
    this.openings = 0;  // a chat opened later wins over one still loading
    this.chatChanges = 0;  // local changes to the chat list: a list asked for before one is stale
    this.following = null;  // the timer that reloads a chat while another client writes its replies
    this.contextLimit = null;  // the model's context in tokens, as the server last said (null: not known)
    // what a chat not yet written gets (GET /api/conversation-defaults): {system_prompt, settings, small_model}
    this.defaults = null;
    this.summaries = [];  // the ids of the chats started from a summary of the open one
    this.documents = new Map();  // id -> Document: those of the chats opened and the files attached
    this.thread = new ThreadView($("thread"), {
      onSwitch: (id, step) => this.switchSibling(id, step),
      onEdit: (id, text) => this.edit(id, text),
      onRegenerate: (id) => this.regenerate(id),
      onContinue: (id) => this.continueReply(id),
      onPick: (id) => this.pickBranch(id),
    }, this.documents);
    this.branches = new BranchTreeView($("branch-tree"), (id) => {
      this.panels.closeDrawers();
      this.pickBranch(id);
    });
    this.panels = new Panels({
      app: $("app"), scrim: $("scrim"), sidebarButton: $("open-sidebar"), menuButton: $("open-menu"),
      menu: $("chat-tools"), branches: $("branches"), branchesButton: $("toggle-branches"),
      closeBranchesButton: $("close-branches"),
    }, () => this.renderBranches());
    this.sidebar = new Sidebar($("chats"), $("search"), {
      onOpen: (id, messageId) => {
        this.panels.openSidebar(false);
        return this.open(id, messageId);
      },
      onRename: (id, title) => this.rename(id, title),
      onDelete: (id) => this.remove(id),
      onPin: (id, pinned) => this.pin(id, pinned),
      onSearch: (query) => this.search(query),
    });
    this.settings = new SettingsDialog($("settings-dialog"));
    this.forkSize = new ForkSize($("replies"));
    this.forkPanel = new ForkPanel($("fork-panel"), this.forkSize);
    this.gauge = new ContextGauge({ gauge: $("context-gauge"), warning: $("context-warning"), summarize: $("summarize") },
      () => this.summarize());
    this.summaryLinks = new SummaryLinks($("summary-of"), $("continued-in"));
    this.attachments = new Attachments({ input: $("attach-input"), button: $("attach"), dropTarget: $("chat"),
      dropZone: $("composer"), list: $("attachments") }, this.documents, (message) => this.showError(message));
    this.models = new ModelPicker($("model"), $("model-status"), $("model-note"), (e) => this.showError(e),
      () => this.modelRunning());
    this.modelInfo = new ModelInfo($("model-info"));
    this.pulls = new PullForm({ details: $("model-pull"), form: $("pull-form"), input: $("pull-repo"),
      progress: $("pull-progress"), status: $("pull-status") }, () => this.models.load());
    this.summary = new ChatSummary($("chat-summary"), {
      onModel: () => {
        this.panels.revealSidebar();
        this.models.reveal();
      },
      onSettings: () => this.editSettings(),
    });
    fillHelp($("help-dialog"));
    this.wire();
  }

  wire() {
    $("new-chat").addEventListener("click", () => this.newChat());
    $("help").addEventListener("click", () => this.showHelp());
    $("settings").addEventListener("click", () => this.editSettings());
    $("toggle-branches").addEventListener("click", () => this.toggleBranches());
    $("stop").addEventListener("click", () => this.stop());
    $("answer-now").addEventListener("click", () => this.answerNow());
    $("composer").addEventListener("submit", (event) => {
      event.preventDefault();
      this.send();
    });
    fitPlaceholder($("message"), "Message (Enter sends)", "Message");
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
      if (id && id !== this.session.conversation?.id) this.open(id).catch((e) => this.showError(e));
    });
    installShortcuts(this);
  }

  async start() {
    try {
      await this.listChats();
    } catch (error) {
      if (error.status === 401 || error.status === 403) {
        $("signed-out").hidden = false;
        return;
      }
      throw error;
    }
    this.useLimits(await api.getLimits());
    await this.models.load();
    this.pulls.resume().catch((e) => this.showError(e));
    $("app").hidden = false;
    // a chat named in the URL, else the one this browser showed last, else a new one (written to the server with its
    // first message)
    const shown = [chatInLocation(), localStorage.getItem(LAST_CHAT_KEY)];
    const last = shown.map((id) => this.conversations.find((c) => c.id === id)).find(Boolean);
    if (last) await this.open(last.id);
    else this.render();
    $("message").focus();
  }

  // --- opening and showing ---

  async open(id, messageId = null) {
    const opening = ++this.openings;
    const tree = await api.getConversation(id);
    if (!this.conversations.some((c) => c.id === id)) await this.listChats();
    if (opening !== this.openings) return;
    if (this.session.conversation?.id !== id) this.thread.clear();
    this.session.open(tree, messageId);
    this.contextLimit = tree.context?.limit ?? this.contextLimit;
    this.summaries = tree.summaries;
    this.learnDocuments(tree);
    this.render();
    if (messageId) {
      this.rememberLeaf();
      this.thread.views.get(messageId)?.element.scrollIntoView({ block: "center" });
    }
  }

  /** While another client writes replies in the open chat, reload it every second until they are done. */
  followWriting() {
    clearTimeout(this.following);
    const id = this.session.conversation?.id;
    if (!id || this.streaming || !this.session.tree.writing()) return;
    this.following = setTimeout(async () => {
      try {
        const tree = await api.getConversation(id);
        this.learnDocuments(tree);
        if (this.session.conversation?.id !== id || this.streaming) return;
        if (this.session.tree.merge(tree.messages)) this.render();
        else this.followWriting();
      } catch (error) {
        this.showError(error);
      }
    }, FOLLOW_INTERVAL_MS);
  }

  showTitle() {
    const c = this.session.conversation;
    const title = c ? c.title : "New chat";
    $("chat-title").textContent = title;
    $("chat-title").title = title;
    document.title = c ? `${c.title} · localchat` : "localchat";
    this.models.showChat(c?.id ?? null, c?.model ?? null);
    this.forkSize.showChat(c?.id ?? null);
    this.summaryLinks.show(c, this.summaries, this.conversations);
    this.summary.show(c ?? this.defaults, this.models.running, modelInfoLines(this.models));
  }

  /** A new chat's empty state, or none once the chat has a message (or a base model runs: nothing can be sent). */
  showEmptyState() {
    const empty = !this.session.leaf;
    $("empty-chat").hidden = !empty;
    if (empty) showEmptyState($("empty-chat"), this.models.running, this.defaults?.small_model, this.models.embedded);
  }

  /** The documents a chat (GET /api/conversations/{id}) or its messages carry, to show them by name. */
  learnDocuments(tree) {
    for (const document of tree.documents ?? []) this.documents.set(document.id, document);
  }

  /** The documents the open chat starts from. */
  showChatDocuments() {
    const chips = documentChips(this.session.conversation?.documents, this.documents);
    $("chat-documents").hidden = !chips;
    $("chat-documents").replaceChildren(...(chips ? ["This chat starts from", chips] : []));
  }

  /** How much of the model's context the shown branch uses. */
  showContext() {
    const policy = this.session.conversation?.settings.context_overflow ?? null;
    this.gauge.show(contextUse(this.session.path(), this.contextLimit), policy);
  }

  render() {
    const c = this.session.conversation;
    const hash = c ? `#${encodeURIComponent(c.id)}` : "";  // a link to the chat (a new one has none yet)
    if (location.hash !== hash) history.replaceState(null, "", hash || location.pathname);
    if (c) localStorage.setItem(LAST_CHAT_KEY, c.id);
    this.showTitle();
    this.showEmptyState();
    // a chat without messages (not yet written, or empty) has settings (saved, they write a new one) but no branches
    // to show or export
    const hasMessages = Boolean(this.session.leaf);
    for (const id of ["toggle-branches", "export-markdown", "export-json"]) $(id).hidden = !hasMessages;
    this.panels.setChat(hasMessages);
    if (c) {
      $("export-markdown").href = api.exportUrl(c.id, "markdown", this.session.savedLeaf());
      $("export-json").href = api.exportUrl(c.id, "json");
    }
    if (this.session.leaf) this.thread.render(this.session);
    else this.thread.clear();
    this.showChatDocuments();
    this.showContext();
    this.renderBranches();
    this.renderChats();
    this.showAnswerNow();
    this.followWriting();
  }

  renderBranches() {
    if (this.panels.branchesOpen) this.branches.render(this.session.tree, this.session.leaf);
  }

  renderChats() {
    if (!this.sidebar.searching) this.sidebar.showChats(this.conversations, this.session.conversation?.id);
  }

  /** The chat list from the server; asked again where the list changed here meanwhile (a chat created or deleted
   * while the request was under way would otherwise be lost or come back). */
  async listChats() {
    let changes;
    do {
      changes = this.chatChanges;
      const conversations = await api.listConversations();
      if (changes === this.chatChanges) this.conversations = conversations;
    } while (changes !== this.chatChanges);
  }

  /** A change made here to the chat list: `change` maps the list to the new one. */
  changeChats(change) {
    this.chatChanges++;
    this.conversations = change(this.conversations);
  }

  async refreshChats() {
    await this.listChats();
    const open = this.session.conversation;
    this.session.conversation = this.conversations.find((c) => c.id === open?.id) ?? open;
    this.showTitle();
    this.renderChats();
  }

  /** Show the branch through `id` (down its newest replies), and remember it as the chat's active branch. */
  pickBranch(id) {
    this.session.pick(id);
    this.showPicked();
  }

  switchSibling(id, step) {
    if (this.session.stepSibling(id, step)) this.showPicked();
  }

  showPicked() {
    this.render();
    this.rememberLeaf();
  }

  rememberLeaf() {
    const leaf = this.session.savedLeaf();
    if (leaf) {
      api.updateConversation(this.session.conversation.id, { active_leaf: leaf }).catch((e) => this.showError(e));
    }
  }

  // --- writing ---

  /** The limits of the server's settings (GET /api/limits) on the inputs. */
  useLimits(limits) {
    setRange($("replies"), limits.sampling.n);
    this.forkPanel.maxLength = limits.max_instruction_chars;
    this.settings.setLimits(limits.sampling);
    this.attachments.setLimits(limits.max_document_bytes, limits.max_documents);
  }

  /** Sends the message with the attached documents: a chat's first message makes them the documents the chat starts
   * from, a later one carries them. */
  async send() {
    const input = $("message");
    const content = input.value;
    if ((!content.trim() && this.attachments.empty) || this.streaming) return;
    input.value = "";
    const replies = this.forkSize.value;
    let documents = await this.attachments.take();  // once they are uploaded
    if (!content.trim() && !documents.length) return;  // the only attachments were refused
    if (!this.session.leaf && content.trim() && documents.length) {
      await this.startChatWith({ documents });
      documents = [];
    } else if (!this.session.conversation) {
      await this.newChat();
    }
    const { conversation, fork } = this.session;
    this.forkSize.keep(conversation.id, replies);
    const parentId = fork ? fork.ids[0] : this.session.savedLeaf();
    const firstExchange = !parentId;  // the chat's first message: once answered, the model names the chat
    const events = api.sendMessage(conversation.id, content, parentId, replies, documents,
      this.forkPanel.take(replies));
    if (await this.stream(events)) {
      if (firstExchange) this.nameChat(conversation.id);
      return;
    }
    if (!input.value) input.value = content;  // refused (past the context's edge): the text stays
    this.attachments.restore(documents);
  }

  /** The open chat, empty (or none yet), written with `fields` (ConversationCreate's: documents, system_prompt,
   * settings). Documents go after the system prompt, where chats that start from the same documents share their
   * cached tokens. */
  async startChatWith(fields) {
    const empty = this.session.conversation;
    const conversation = empty ? await api.updateConversation(empty.id, fields)
      : await api.createConversation(fields);
    this.changeChats((chats) => [conversation, ...chats.filter((c) => c.id !== conversation.id)]);
    this.session.newChat(conversation);
    this.summaries = [];
    this.render();
  }

  async edit(id, content) {
    if (this.streaming) return;
    const replies = this.forkSize.value;
    await this.stream(api.editMessage(this.session.conversation.id, id, content, replies,
      this.forkPanel.take(replies)));
  }

  async regenerate(id) {
    if (this.streaming) return;
    const replies = this.forkSize.value;
    await this.stream(api.regenerate(this.session.conversation.id, id, replies, this.forkPanel.take(replies)));
  }

  /** Pin a chat (kept warm: its history is evicted last, within the pin budget) or unpin it; a refusal is shown. */
  async pin(id, pinned) {
    try {
      await (pinned ? api.pinChat(id) : api.unpinChat(id));
    } catch (error) {
      this.showError(error);
    }
    await this.refreshChats();
  }

  async continueReply(id) {
    if (this.streaming) return;
    await this.stream(api.continueReply(this.session.conversation.id, id));
  }

  /** The shown branch's last reply goes on, where it was cut short. */
  continueLast() {
    const last = this.session.tree.path(this.session.leaf).findLast((m) => m.role === "assistant");
    if (last && isContinuable(last)) this.continueReply(last.id);
  }

  regenerateLast() {
    const path = this.session.tree.path(this.session.leaf);  // a fork's first reply while it is shown
    const last = path.findLast((m) => m.role === "assistant") ?? path.at(-1);
    if (last) this.regenerate(last.id);
  }

  stop() {
    if (this.streaming) api.stopReplies(this.streaming).catch((e) => this.showError(e));
  }

  /** The replies being written that still think (a thinking model's) end their thinking and answer now. */
  answerNow() {
    if (this.thinkingHere()) api.endThinking(this.streaming).catch((e) => this.showError(e));
  }

  /** Whether the open chat is the one whose replies are being written, and one of them still thinks. */
  thinkingHere() {
    return this.streaming === this.session.conversation?.id && this.session.tree.thinking();
  }

  showAnswerNow() {
    $("answer-now").hidden = !this.thinkingHere();
  }

  /** Escape: closes the menu or a drawer; else stops the replies being written (closes the branch tree first where
   * the focus is in it); else closes the branch tree's side panel (a wide screen). */
  escape() {
    if (this.panels.closeTop()) return;
    const inTree = $("branches").contains(document.activeElement);
    if (this.streaming && !inTree) this.stop();
    else if (this.panels.closeBranches()) $("message").focus();
  }

  /** Show the events of a send, edit, regenerate or continue as they come; whether any came (false: the request was refused). */
  async stream(events) {
    const conversationId = this.session.conversation.id;
    let answered = false;
    this.setStreaming(conversationId);
    this.showError(null);
    try {
      for await (const event of events) {
        answered = true;
        if (this.session.conversation?.id !== conversationId) continue;  // another chat was opened meanwhile
        this.handle(event);
      }
    } catch (error) {
      this.showError(error);
    } finally {
      this.setStreaming(null);
      await this.refreshChats();
      this.followWriting();
    }
    return answered;
  }

  /** Render what one event of the reply stream changed (the session applies it). */
  handle(event) {
    const change = this.session.apply(event);
    if (change instanceof BranchShown) {
      this.render();
      this.refreshChats().catch((e) => this.showError(e));
    } else if (change instanceof RepliesStarted) {
      this.thread.startTemperature = change.temperature;
      this.models.showStart(change.model, change.retokenizedFrom);
      this.render();
    } else if (change instanceof TextAdded) {
      this.thread.textChanged(change.messageId);
      this.showAnswerNow();
    } else if (change instanceof ReplyFinished) {
      this.contextLimit = change.message.stats?.context_limit ?? this.contextLimit;
      this.thread.update(change.message);
      this.thread.showCut(this.session);
      this.showContext();
      this.showAnswerNow();
      this.renderBranches();
      const { conversation, leaf } = this.session;
      if (change.shown) $("export-markdown").href = api.exportUrl(conversation.id, "markdown", leaf);
    } else if (change instanceof Failed) {
      this.showError(change.message);
    }
  }

  /** A base model (no chat template) only continues text: the note where the composer is says so, and the
   * composer is off until a chat model runs. A thinking model's settings (whether it thinks, how long) show only for
   * one. */
  showModelAbility() {
    this.settings.showThinking(this.models.thinks);
    const note = $("base-model-note");
    const canChat = this.models.canChat;
    note.hidden = canChat;
    note.textContent = canChat ? "" : `${this.models.running} is a base model without a chat template: it only ` +
      "continues text; it answers /v1/completions. Choose a chat model in the Model list to chat.";
    for (const id of ["message", "replies", "send", "attach"]) $(id).disabled = !canChat;
  }

  /** The model the engine runs is known (at load and after a switch): what it can do, and what a new chat gets with
   * it. */
  async modelRunning() {
    this.showModelAbility();
    this.modelInfo.show(this.models);
    this.defaults = await api.getConversationDefaults();
    this.thread.sampling = this.defaults.sampling ?? null;
    this.showTitle();
    this.showEmptyState();
  }

  setStreaming(conversationId) {
    this.streaming = conversationId;
    $("send").hidden = Boolean(conversationId);
    $("stop").hidden = !conversationId;
    this.showAnswerNow();
  }

  showError(error) {
    $("error").hidden = !error;
    $("error").textContent = error ? String(error.message ?? error) : "";
  }

  // --- chats ---

  async newChat() {
    this.openings++;
    this.panels.openSidebar(false);
    const conversation = await api.createConversation();
    this.changeChats((chats) => [conversation, ...chats]);
    this.thread.clear();
    this.session.newChat(conversation);
    this.summaries = [];
    this.render();
    $("message").focus();
  }

  /** A new chat that starts from the model's summary of the shown branch, opened once the summary is written (the
   * gauge's button says "Summarizing…" meanwhile). */
  async summarize() {
    const source = this.session.conversation;
    if (!source || this.streaming) return;
    this.showError(null);
    try {
      const fresh = await api.summarize(source.id, this.session.savedLeaf());
      await this.listChats();
      if (this.session.conversation?.id === source.id) await this.open(fresh.id);
      else this.renderChats();
    } catch (error) {
      this.showError(error);
    }
  }

  /** The chat's title once the model has written it after the first reply (in the background: the engine writes it
   * after the replies); one it could not write is no news (the first message's words stay). */
  async nameChat(id) {
    let named;
    try {
      named = await api.nameChat(id);
    } catch {
      return;
    }
    // the list's warmth stays (one chat's answer carries none, and a new title leaves the history as it was)
    this.changeChats((chats) => chats.map((c) => (c.id === id ? { ...named, warmth: named.warmth ?? c.warmth } : c)));
    if (this.session.conversation?.id === id) {
      this.session.conversation = named;
      this.showTitle();
    }
    this.renderChats();
  }

  async rename(id, title) {
    await api.updateConversation(id, { title });
    await this.refreshChats();
  }

  async remove(id) {
    const title = this.conversations.find((c) => c.id === id)?.title ?? "this chat";
    if (!(await confirmDelete(`Delete “${title}” and all its branches?`))) return;
    await api.deleteConversation(id);
    this.changeChats((chats) => chats.filter((c) => c.id !== id));
    if (this.session.conversation?.id === id) {
      this.session.newChat(null);
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
    this.panels.revealSidebar();
    $("search").focus();
    $("search").select();
  }

  /** The Settings dialog of the open chat; on a new chat not yet written it shows the defaults, and saving writes
   * the chat (empty, with them), so that its first message is answered under its system prompt. */
  editSettings() {
    const open = this.session.conversation;
    this.settings.edit(open ?? this.defaults, async (fields) => {
      if (!open) {
        await this.startChatWith(fields);
        return;
      }
      const conversation = await api.updateConversation(open.id, fields);
      if (this.session.conversation?.id !== open.id) return;
      this.session.conversation = conversation;
      this.changeChats((chats) => chats.map((c) => (c.id === open.id ? conversation : c)));
      this.showTitle();
      this.showContext();
      this.refreshChats().catch((e) => this.showError(e));  // its warmth, for a system prompt changed
    });
  }

  toggleBranches() {
    if (this.session.leaf) this.panels.toggleBranches();
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
