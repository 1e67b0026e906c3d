// Markdown to DOM for model replies. Every piece of text becomes a text node (or an attribute set through the
// DOM), never HTML: a reply that says <script> or <img onerror=...> shows those characters.
import { h } from "./dom.js";
import { highlight } from "./highlight.js";

const SAFE_LINK = /^(https?:|mailto:)/i;

/** A fragment for `source`; an unclosed code fence (a reply still streaming) renders as code so far. */
export function renderMarkdown(source) {
  const fragment = document.createDocumentFragment();
  const lines = source.replace(/\r\n?/g, "\n").split("\n");
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = line.match(/^\s*(```+|~~~+)\s*([\w+#.-]*)/);
    if (fence) {
      const body = [];
      for (i++; i < lines.length && !lines[i].trim().startsWith(fence[1]); i++) body.push(lines[i]);
      i++;
      fragment.append(codeBlock(body.join("\n"), fence[2]));
      continue;
    }
    if (!line.trim()) {
      i++;
      continue;
    }
    const heading = line.match(/^(#{1,6})\s+(.*)$/);
    if (heading) {
      fragment.append(h(`h${heading[1].length}`, {}, inline(heading[2])));
      i++;
      continue;
    }
    if (/^\s*([-*_])(\s*\1){2,}\s*$/.test(line)) {
      fragment.append(document.createElement("hr"));
      i++;
      continue;
    }
    if (/^\s*>/.test(line)) {
      const quoted = [];
      for (; i < lines.length && /^\s*>/.test(lines[i]); i++) quoted.push(lines[i].replace(/^\s*> ?/, ""));
      fragment.append(h("blockquote", {}, renderMarkdown(quoted.join("\n"))));
      continue;
    }
    const item = listItem(line);
    if (item) {
      const list = document.createElement(item.ordered ? "ol" : "ul");
      if (item.ordered && item.start !== 1) list.start = item.start;
      for (let next = item; next && next.ordered === item.ordered; next = listItem(lines[i] ?? "")) {
        const text = [next.text];
        for (i++; i < lines.length && /^\s{2,}\S/.test(lines[i]) && !listItem(lines[i]); i++) text.push(lines[i].trim());
        list.append(h("li", {}, inline(text.join("\n"))));
      }
      fragment.append(list);
      continue;
    }
    const paragraph = [line];
    for (i++; i < lines.length && lines[i].trim() && !startsBlock(lines[i]); i++) paragraph.push(lines[i]);
    fragment.append(h("p", {}, inline(paragraph.join("\n"))));
  }
  return fragment;
}

function listItem(line) {
  const match = line.match(/^\s{0,3}(?:([-*+])|(\d{1,9})[.)])\s+(.*)$/);
  if (!match) return null;
  return { ordered: !match[1], start: Number(match[2] ?? 1), text: match[3] };
}

function startsBlock(line) {
  return /^\s*(```|~~~|>|#{1,6}\s)/.test(line) || listItem(line) !== null;
}

function codeBlock(code, language) {
  return h("div", { class: "code-block" },
    h("div", { class: "code-head" },
      h("span", { class: "code-language", text: language || "code" }),
      h("button", { type: "button", class: "copy-code", text: "Copy", title: "Copy the code" })),
    h("pre", {}, h("code", {}, highlight(code, language))));
}

// `code`, **strong**, *em* / _em_, ~~del~~, [text](url); a newline inside a paragraph is a line break
const INLINE = /(`+)([\s\S]*?[^`])\1(?!`)|\*\*([\s\S]+?)\*\*|__([\s\S]+?)__|(?<![\w*])\*(?!\s)([\s\S]+?)(?<!\s)\*(?!\w)|(?<!\w)_(?!\s)([\s\S]+?)(?<!\s)_(?!\w)|~~([\s\S]+?)~~|\[([^\]\n]+)\]\(([^)\s]+)\)|\n/g;

function inline(text) {
  const fragment = document.createDocumentFragment();
  let last = 0;
  for (const match of text.matchAll(INLINE)) {
    if (match.index > last) fragment.append(text.slice(last, match.index));
    fragment.append(inlineNode(match));
    last = match.index + match[0].length;
  }
  if (last < text.length) fragment.append(text.slice(last));
  return fragment;
}

function inlineNode([whole, , code, strong, strong2, em, em2, del, linkText, href]) {
  if (code !== undefined) {
    return h("code", { text: code.trim() ? code.replace(/^ (.*) $/s, "$1") : code });
  }
  if (strong ?? strong2) return h("strong", {}, inline(strong ?? strong2));
  if (em ?? em2) return h("em", {}, inline(em ?? em2));
  if (del) return h("del", {}, inline(del));
  if (linkText) {
    if (!SAFE_LINK.test(href)) return document.createTextNode(whole);
    return h("a", { href, target: "_blank", rel: "noopener noreferrer" }, inline(linkText));
  }
  return document.createElement("br");
}
