// Runs the web UI's chat session (webui/static/chat_session.js, no DOM) through the scenarios of a file
// (tests/tui/chat_session_scenarios.json) and prints, as JSON, what each step's `expect` asks about as the session
// has it after the step: one list per scenario, one object per step. test_web_chat_session.py compares them.
//   node chat_session_observer.mjs SCENARIOS.json
import { readFileSync } from "node:fs";
import { ChatSession, Fork } from "../../webui/static/chat_session.js";

const file = JSON.parse(readFileSync(process.argv[2], "utf8"));

/** A message of the file, as the engine sends it (in the scenarios' conversation). */
const stored = (message) => ({ conversation_id: file.conversation.id, ...message });
const snakeCase = (name) => name.replace(/[A-Z]/g, (letter) => `_${letter.toLowerCase()}`);
const camelCase = (name) => name.replace(/_([a-z])/g, (_, letter) => letter.toUpperCase());

/** A change's field as the scenarios write it: a message as its id, a fork as {parent_id, ids}. */
function plain(value) {
  if (value instanceof Fork) return { parent_id: value.parentId, ids: [...value.ids] };
  if (Array.isArray(value)) return value.map(plain);
  if (value && typeof value === "object" && "role" in value) return value.id;
  return value ?? null;
}

function summary(change) {
  if (!change) return null;
  const fields = Object.entries(change).map(([name, value]) => [snakeCase(name), plain(value)]);
  return { change: change.constructor.name, ...Object.fromEntries(fields) };
}

/** Does the step's action; what it answered (an event: its change, as the scenarios write it). */
function act(session, scenario, step) {
  const [[action, argument]] = Object.entries(step).filter(([key]) => key !== "expect");
  switch (action) {
    case "open": {
      const conversation = { ...file.conversation, active_leaf: argument.active_leaf ?? null };
      return session.open({ conversation, messages: scenario.messages.map(stored) }, argument.message_id ?? null);
    }
    case "new_chat":
      return session.newChat({ ...file.conversation });
    case "event": {
      const event = argument.message?.id ? { ...argument, message: stored(argument.message) } : argument;
      return summary(session.apply(structuredClone(event)));
    }
    default:
      return session[camelCase(action)](...(Array.isArray(argument) ? argument : [argument]));
  }
}

/** What the step's `expect` asks about, as the session has it now. */
function observe(session, step, answer) {
  const { expect } = step;
  const seen = { leaf: session.leaf, fork: plain(session.fork), path: session.path().map((m) => m.id) };
  if ("event" in step) seen.change = answer;
  if ("returns" in expect) seen.returns = answer ?? null;
  const each = (ids, of) => Object.fromEntries(Object.keys(ids).map((id) => [id, of(id)]));
  if ("content" in expect) seen.content = each(expect.content, (id) => session.tree.get(id).content);
  if ("siblings" in expect) seen.siblings = each(expect.siblings, (id) => session.tree.siblings(id));
  if ("variation" in expect) seen.variation = each(expect.variation, (id) => session.tree.get(id).variation ?? null);
  return seen;
}

const observed = file.scenarios.map((scenario) => {
  const session = new ChatSession();
  return scenario.steps.map((step) => observe(session, step, act(session, scenario, step)));
});
process.stdout.write(JSON.stringify(observed));
