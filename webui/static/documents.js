// Documents (POST /api/documents): files whose text a chat starts from or a message carries. The composer's
// attachments (its Attach button, or files dropped on the chat) are uploaded at once and shown as chips, with their
// name and size in tokens, until the message is sent; a chat's and a message's documents show as chips too.
import * as api from "./api.js";
import { formatTokens } from "./context.js";
import { h } from "./dom.js";

/** "12 KB", "3.4 MB", "16 MB" */
function formatBytes(bytes) {
  return bytes < 1024 ** 2 ? `${Math.ceil(bytes / 1024)} KB`
    : `${(bytes / 1024 ** 2).toFixed(1).replace(/\.0$/, "")} MB`;
}

function pagesWithoutText(pages) {
  return pages.length === 1 ? `page ${pages[0]} has no text` : `pages ${pages.join(", ")} have no text`;
}

/** A document as a chip: its name, then its size in tokens (or what is being done with it); `onRemove`: a × button. */
export function documentChip(name, detail, { onRemove = null, title = name } = {}) {
  return h("li", { class: "document-chip", title },
    h("span", { class: "document-name", text: name }),
    h("span", { class: "document-detail", text: detail }),
    onRemove && h("button", { type: "button", class: "remove-document", text: "×", title: `Remove ${name}`,
      "aria-label": `Remove ${name}`, onclick: onRemove }));
}

/** The chip of a stored document (GET /api/conversations/{id}'s `documents`, or an upload's answer). */
function storedChip(document, options) {
  const empty = document.empty_pages ?? [];
  const detail = `${formatTokens(document.tokens)} tokens${empty.length ? " · some pages without text" : ""}`;
  const title = empty.length ? `${document.name}: ${pagesWithoutText(empty)} (scanned images?)` : document.name;
  return documentChip(document.name, detail, { ...options, title });
}

/** The chips of the documents `ids` (known ones by `documents`, id -> Document); null for none. */
export function documentChips(ids, documents) {
  if (!ids?.length) return null;
  return h("ul", { class: "document-chips" }, ...ids.map((id) => {
    const document = documents.get(id);
    return document ? storedChip(document) : documentChip("a document", "");
  }));
}

/**
 * The documents to send with the next message: `input` (a file input) and `button` pick them, files dropped on
 * `dropTarget` add them, `list` shows them. Each is uploaded when it is added; `documents` (id -> Document) learns
 * it. `onError(message)`: an upload was refused (too large, not text, larger than the context).
 */
export class Attachments {
  constructor({ input, button, dropTarget, dropZone, list }, documents, onError) {
    this.list = list;
    this.documents = documents;
    this.onError = onError;
    this.maxBytes = Infinity;
    this.maxCount = Infinity;
    this.pending = [];  // {name, upload: a promise of the Document (null where it failed), document, removed}
    button.addEventListener("click", () => input.click());
    input.addEventListener("change", () => {
      this.add([...input.files]);
      input.value = "";  // the same file can be picked again
    });
    const carriesFiles = (event) => event.dataTransfer?.types.includes("Files");
    dropTarget.addEventListener("dragover", (event) => {
      if (!carriesFiles(event)) return;
      event.preventDefault();  // a drop here attaches (instead of the browser opening the file)
      dropZone.classList.add("dropping");
    });
    dropTarget.addEventListener("dragleave", (event) => {
      if (!dropTarget.contains(event.relatedTarget)) dropZone.classList.remove("dropping");
    });
    dropTarget.addEventListener("drop", (event) => {
      dropZone.classList.remove("dropping");
      if (!carriesFiles(event)) return;
      event.preventDefault();
      this.add([...event.dataTransfer.files]);
    });
  }

  /** The server's limits (GET /api/limits): the bytes of one file, how many one message carries. */
  setLimits(maxBytes, maxCount) {
    this.maxBytes = maxBytes ?? Infinity;
    this.maxCount = maxCount ?? Infinity;
  }

  add(files) {
    for (const file of files) {
      if (this.pending.length >= this.maxCount) {
        this.onError(`A message carries ${this.maxCount} documents at most: “${file.name}” was not attached.`);
      } else if (file.size > this.maxBytes) {
        this.onError(`“${file.name}” has ${formatBytes(file.size)}: documents may have ` +
          `${formatBytes(this.maxBytes)} at most.`);
      } else {
        this.upload(file);
      }
    }
    this.render();
  }

  upload(file) {
    const attachment = { name: file.name, document: null, removed: false };
    attachment.upload = api.uploadDocument(file).then((document) => {
      this.documents.set(document.id, document);
      attachment.document = document;
      if (attachment.removed) this.forget(attachment);
      return document;
    }, (error) => {
      this.onError(error.status === 413 ? `“${file.name}” is larger than the server takes ` +
        `(${formatBytes(this.maxBytes)} at most).` : error.message);
      this.pending = this.pending.filter((a) => a !== attachment);
      return null;
    }).finally(() => this.render());
    this.pending.push(attachment);
  }

  /** Taken off the list by its ×: the document uploaded for it is deleted (once it is uploaded). */
  remove(attachment) {
    attachment.removed = true;
    this.pending = this.pending.filter((a) => a !== attachment);
    if (attachment.document) this.forget(attachment);
    this.render();
  }

  forget(attachment) {
    api.deleteDocument(attachment.document.id).catch((error) => this.onError(error.message));
  }

  render() {
    this.list.hidden = !this.pending.length;
    this.list.replaceChildren(...this.pending.map((attachment) => {
      const onRemove = () => this.remove(attachment);
      return attachment.document ? storedChip(attachment.document, { onRemove })
        : documentChip(attachment.name, "uploading…", { onRemove });
    }));
  }

  /** Attached again (a message that was refused): documents already uploaded. */
  restore(ids) {
    for (const document of ids.map((id) => this.documents.get(id))) {
      this.pending.push({ name: document.name, document, upload: Promise.resolve(document), removed: false });
    }
    this.render();
  }

  get empty() {
    return !this.pending.length;
  }

  /** The ids of the attached documents once every upload is done (those refused left out); the list is emptied. */
  async take() {
    const taken = this.pending;
    this.pending = [];
    this.render();
    const documents = await Promise.all(taken.map((a) => a.upload));
    return documents.filter(Boolean).map((d) => d.id);
  }
}
