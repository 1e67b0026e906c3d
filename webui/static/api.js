// The engine process's /api, as the signed-in page calls it (the login cookie goes along by itself).
import { readEvents } from "./sse.js";

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function send(method, path, body) {
  const init = { method, headers: {} };
  if (body instanceof FormData) {
    init.body = body;  // multipart: the browser writes its Content-Type with the boundary
  } else if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  if (!response.ok) {
    let message = response.statusText;
    try {
      message = (await response.json()).error.message;
    } catch { /* not an error body */ }
    throw new ApiError(response.status, message);
  }
  return response;
}

async function json(method, path, body) {
  const response = await send(method, path, body);
  return response.status === 204 ? null : response.json();
}

const conversation = (id) => `/api/conversations/${encodeURIComponent(id)}`;
const message = (id, messageId) => `${conversation(id)}/messages/${encodeURIComponent(messageId)}`;

export const listConversations = () => json("GET", "/api/conversations");
export const createConversation = (fields = {}) => json("POST", "/api/conversations", fields);
export const getConversation = (id) => json("GET", conversation(id));
export const updateConversation = (id, fields) => json("PATCH", conversation(id), fields);
export const deleteConversation = (id) => json("DELETE", conversation(id));
export const stopReplies = (id) => json("POST", `${conversation(id)}/stop`, {});
export const endThinking = (id) => json("POST", `${conversation(id)}/end-thinking`, {});
export const nameChat = (id) => json("POST", `${conversation(id)}/title`);
export const summarize = (id, leaf) => json("POST", `${conversation(id)}/summarize`, leaf ? { leaf } : {});
export const search = (q) => json("GET", `/api/search?q=${encodeURIComponent(q)}`);
export const getLimits = () => json("GET", "/api/limits");
export const getConversationDefaults = () => json("GET", "/api/conversation-defaults");
export const listModels = () => json("GET", "/api/models");
export const switchModel = (model) => json("POST", "/api/models/current", { model });
export const pullModel = (repo, file) => json("POST", "/api/models/pull", { repo, ...(file && { file }) });
export const modelPull = () => json("GET", "/api/models/pull");
export const health = () => json("GET", "/health");
export const deleteDocument = (id) => json("DELETE", `/api/documents/${encodeURIComponent(id)}`);

/** A file uploaded as a document: its text is read once and kept (the answer is the Document). */
export function uploadDocument(file) {
  const form = new FormData();
  form.append("file", file);
  return json("POST", "/api/documents", form);
}

export function exportUrl(id, format, leaf) {
  const query = new URLSearchParams({ format });
  if (leaf) query.set("leaf", leaf);
  return `${conversation(id)}/export?${query}`;
}

/** The events (user, edited, start, delta, done, error) of a send, edit, regenerate or continue. */
async function* stream(path, body) {
  yield* readEvents(await send("POST", path, body));
}

/** `documents`: the ids of the documents the message carries (before its text); `variations`: one per reply, each with
 * its instruction (null: n replies as asked). */
export const sendMessage = (id, content, parentId, n, documents = [], variations = null) =>
  stream(`${conversation(id)}/messages`, { content, parent_id: parentId, n, ...(documents.length && { documents }),
    ...(variations && { variations }) });
export const editMessage = (id, messageId, content, n, variations = null) =>
  stream(`${message(id, messageId)}/edit`, { content, n, ...(variations && { variations }) });
export const regenerate = (id, messageId, n, variations = null) =>
  stream(`${message(id, messageId)}/regenerate`, { n, ...(variations && { variations }) });
export const pinChat = (id) => json("POST", `${conversation(id)}/pin`);
export const unpinChat = (id) => json("DELETE", `${conversation(id)}/pin`);
export const continueReply = (id, messageId) => stream(`${message(id, messageId)}/continue`, {});
