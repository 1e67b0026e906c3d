// The composer's Fork box: how many replies a message gets, side by side (1: one reply, no fork), as the terminal's
// Fork N. The number stays after sending; each chat keeps its own while the page is open, and one not yet forked
// starts at 1.

export class ForkSize {
  constructor(input) {
    this.input = input;
    this.chatId = null;  // the open chat (null: a new one, not yet written)
    this.sizes = new Map();  // chat id -> the number last set or sent in it
    input.addEventListener("input", () => this.sizes.set(this.chatId, this.value));
  }

  /** The number in the box, within its range. */
  get value() {
    const { input } = this;
    return Math.min(Number(input.max) || Infinity, Math.max(Number(input.min), Number(input.value) || 1));
  }

  /** The open chat changed: its number shows. */
  showChat(chatId) {
    if (chatId === this.chatId) return;
    this.chatId = chatId;
    this.input.value = String(this.sizes.get(chatId) ?? this.input.min);
    this.input.dispatchEvent(new Event("input"));  // what follows the number (the fork panel) follows it here too
  }

  /** The number a message of the chat `chatId` was sent with (a new chat's first one: under the id it was written
   * with), kept for its next. */
  keep(chatId, size) {
    this.sizes.set(chatId, size);
    if (chatId === this.chatId && this.input.value !== String(size)) {
      this.input.value = String(size);
      this.input.dispatchEvent(new Event("input"));
    }
  }
}
