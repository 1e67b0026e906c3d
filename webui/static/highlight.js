// A small syntax highlighter for code blocks: comments, strings, numbers and keywords of common languages.
// It only ever creates text nodes inside <span class="tok-...">, so code is never parsed as HTML.

const KEYWORDS = {
  python: "and as assert async await break class continue def del elif else except False finally for from global " +
    "if import in is lambda None nonlocal not or pass raise return True try while with yield self print",
  js: "async await break case catch class const continue default delete do else export extends false finally " +
    "for function if import in instanceof let new null of return static super switch this throw true try " +
    "typeof undefined var void while yield interface type enum implements",
  c: "auto bool break case char class const continue default delete do double else enum extern false float for " +
    "if include int long namespace new nullptr private public return short signed sizeof static struct switch " +
    "template this true typedef union unsigned using virtual void volatile while std",
  rust: "as async await break const continue crate else enum false fn for if impl in let loop match mod move mut " +
    "pub ref return self Self static struct super trait true type unsafe use where while Some None Ok Err",
  go: "break case chan const continue default defer else fallthrough for func go goto if import interface map " +
    "package range return select struct switch type var nil true false",
  shell: "if then else elif fi for while do done case esac function in export local return echo cd exit sudo",
  sql: "select from where insert into values update set delete create table drop alter index join left right " +
    "inner outer on group by order having limit as and or not null primary key distinct union",
};
const ALIASES = { py: "python", javascript: "js", ts: "js", typescript: "js", jsx: "js", tsx: "js", json: "js",
  cpp: "c", "c++": "c", h: "c", java: "c", cs: "c", csharp: "c", rs: "rust", golang: "go", bash: "shell",
  sh: "shell", zsh: "shell", console: "shell" };
const HASH_COMMENTS = new Set(["python", "shell"]);

const keywordSets = Object.fromEntries(
  Object.entries(KEYWORDS).map(([lang, words]) => [lang, new Set(words.split(" "))]));

function tokenPattern(lang) {
  const comment = HASH_COMMENTS.has(lang) ? "#[^\\n]*" : lang === "sql" ? "--[^\\n]*" : "\\/\\/[^\\n]*|\\/\\*[\\s\\S]*?\\*\\/";
  const strings = lang === "python" ? `"""[\\s\\S]*?"""|'''[\\s\\S]*?'''|` : "";
  return new RegExp(`(${comment})|(${strings}"(?:\\\\.|[^"\\\\\\n])*"|'(?:\\\\.|[^'\\\\\\n])*'|\`(?:\\\\.|[^\`\\\\])*\`)` +
    "|(\\b\\d[\\d_]*(?:\\.\\d+)?(?:e[+-]?\\d+)?\\b|\\b0x[0-9a-f]+\\b)|([A-Za-z_][A-Za-z0-9_]*)", "gi");
}

function span(kind, text) {
  const node = document.createElement("span");
  node.className = `tok-${kind}`;
  node.textContent = text;
  return node;
}

/** The code as a fragment of text nodes and token spans. */
export function highlight(code, language) {
  const fragment = document.createDocumentFragment();
  const lang = ALIASES[language?.toLowerCase()] ?? language?.toLowerCase();
  const keywords = keywordSets[lang];
  if (!keywords) {
    fragment.append(code);
    return fragment;
  }
  const caseless = lang === "sql";
  let last = 0;
  for (const match of code.matchAll(tokenPattern(lang))) {
    const [text, comment, string, number, word] = match;
    const kind = comment ? "com" : string ? "str" : number ? "num"
      : word && keywords.has(caseless ? word.toLowerCase() : word) ? "kw" : null;
    if (!kind) continue;
    if (match.index > last) fragment.append(code.slice(last, match.index));
    fragment.append(span(kind, text));
    last = match.index + text.length;
  }
  if (last < code.length) fragment.append(code.slice(last));
  return fragment;
}
