"""The conversation store: SQLite (WAL, foreign keys), schema versioned by PRAGMA user_version.

A conversation is a tree of messages; each message keeps the token ids it contributed to the prompt
(a little-endian uint32 array), so a branch's prompt is the concatenation along its path. Every write is
one committed transaction: a killed process loses nothing that was written.
"""

import array
import os
import re
import secrets
import sqlite3
import stat
import sys
import time
from pathlib import Path

import msgspec

from localchat.app.protocol.conversations import (
    Conversation,
    Message,
    ReplyStats,
    SamplingSettings,
    SearchHit,
    SnippetRun,
    Variation,
)
from localchat.app.protocol.documents import Document
from localchat.app.protocol.openai import ToolCall
from localchat.app.server.config import quoted

# The full-text index follows the messages table through these (migration 2 made them; 5 again, with the table)
SEARCH_TRIGGERS = """
    CREATE TRIGGER messages_search_insert AFTER INSERT ON messages BEGIN
        INSERT INTO message_search (rowid, content) VALUES (new.rowid, new.content);
    END;
    CREATE TRIGGER messages_search_delete AFTER DELETE ON messages BEGIN
        INSERT INTO message_search (message_search, rowid, content) VALUES ('delete', old.rowid, old.content);
    END;
    CREATE TRIGGER messages_search_update AFTER UPDATE OF content ON messages BEGIN
        INSERT INTO message_search (message_search, rowid, content) VALUES ('delete', old.rowid, old.content);
        INSERT INTO message_search (rowid, content) VALUES (new.rowid, new.content);
    END;
"""

# MIGRATIONS[i] brings the schema from user_version i to i + 1.
MIGRATIONS = [
    """
    CREATE TABLE conversations (
        id            TEXT PRIMARY KEY,
        title         TEXT NOT NULL,
        system_prompt TEXT NOT NULL DEFAULT '',
        settings      TEXT NOT NULL DEFAULT '{}',
        created_at    REAL NOT NULL,
        updated_at    REAL NOT NULL
    );
    CREATE TABLE messages (
        id              TEXT PRIMARY KEY,
        conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        parent_id       TEXT REFERENCES messages(id) ON DELETE CASCADE,
        role            TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
        content         TEXT NOT NULL,
        token_ids       BLOB NOT NULL,
        finish_reason   TEXT,
        stopped         INTEGER NOT NULL DEFAULT 0,
        model           TEXT,
        stats           TEXT,
        created_at      REAL NOT NULL
    );
    CREATE INDEX messages_by_conversation ON messages (conversation_id, created_at);
    CREATE INDEX messages_by_parent ON messages (parent_id);
    CREATE INDEX conversations_by_activity ON conversations (updated_at DESC);
    """,
    """
    CREATE VIRTUAL TABLE message_search USING fts5 (content, content='messages', content_rowid='rowid');
    """ + SEARCH_TRIGGERS + """
    INSERT INTO message_search (message_search) VALUES ('rebuild');
    """,
    # the branch the user last looked at: a message id (no foreign key: a reply is stored when it ends)
    "ALTER TABLE conversations ADD COLUMN active_leaf TEXT",
    # the browser's sessions (the login cookie), by the SHA-256 of their value
    """
    CREATE TABLE browser_sessions (
        id_hash    TEXT PRIMARY KEY,
        created_at REAL NOT NULL,
        expires_at REAL NOT NULL
    );
    """,
    # tool calls (an assistant's, as JSON) and tool results (role 'tool'): the table again, as SQLite changes a
    # CHECK constraint; rowids are kept, which the search index refers to (run with foreign keys off: migrate())
    """
    CREATE TABLE messages_new (
        id              TEXT PRIMARY KEY,
        conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        parent_id       TEXT REFERENCES messages(id) ON DELETE CASCADE,
        role            TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'tool')),
        content         TEXT NOT NULL,
        token_ids       BLOB NOT NULL,
        finish_reason   TEXT,
        stopped         INTEGER NOT NULL DEFAULT 0,
        model           TEXT,
        stats           TEXT,
        created_at      REAL NOT NULL,
        tool_calls      TEXT,
        tool_call_id    TEXT
    );
    INSERT INTO messages_new (rowid, id, conversation_id, parent_id, role, content, token_ids, finish_reason, stopped,
                              model, stats, created_at)
        SELECT rowid, id, conversation_id, parent_id, role, content, token_ids, finish_reason, stopped, model, stats,
               created_at FROM messages;
    DROP TABLE messages;
    ALTER TABLE messages_new RENAME TO messages;
    CREATE INDEX messages_by_conversation ON messages (conversation_id, created_at);
    CREATE INDEX messages_by_parent ON messages (parent_id);
    """ + SEARCH_TRIGGERS,
    # a thinking model's reply: its thinking, apart from its answer (content)
    "ALTER TABLE messages ADD COLUMN reasoning_content TEXT",
    # a conversation started from a summary of another (no foreign key: the other may be deleted, the link stays)
    "ALTER TABLE conversations ADD COLUMN summary_of TEXT",
    # documents (their text; the files are under the data folder), and the ones a conversation or a message carries
    # (a JSON list of ids)
    """
    CREATE TABLE documents (
        id          TEXT PRIMARY KEY,
        name        TEXT NOT NULL,
        media_type  TEXT NOT NULL,
        text        TEXT NOT NULL,
        tokens      INTEGER NOT NULL,
        empty_pages TEXT NOT NULL DEFAULT '[]',
        created_at  REAL NOT NULL
    );
    ALTER TABLE conversations ADD COLUMN documents TEXT NOT NULL DEFAULT '[]';
    ALTER TABLE messages ADD COLUMN documents TEXT NOT NULL DEFAULT '[]';
    """,
    # a pinned conversation (kept warm in the KV cache, pinned again at every start), and what a fork's reply that
    # varied on purpose was asked for (a JSON Variation)
    """
    ALTER TABLE conversations ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE messages ADD COLUMN variation TEXT;
    """,
]
SCHEMA_VERSION = len(MIGRATIONS)

_MESSAGE_COLUMNS = ("id, conversation_id, parent_id, role, content, token_ids, finish_reason, stopped, model, "
                    "stats, created_at, tool_calls, tool_call_id, reasoning_content, documents, variation")
# a conversation's row, its message count and the model of its latest reply
_CONVERSATION_COLUMNS = (
    "c.*, (SELECT count(*) FROM messages m WHERE m.conversation_id = c.id) AS message_count, "
    "(SELECT model FROM messages m WHERE m.conversation_id = c.id AND m.role = 'assistant' "
    "ORDER BY created_at DESC LIMIT 1) AS model")


SNIPPET_CHARS = (40, 90)  # of a search hit's snippet: before its first match, and from it on
_QUERY_OPERATORS = {"AND", "OR", "NOT", "NEAR"}


def query_words(query: str) -> re.Pattern:
    """The words of an FTS5 query (a prefix query's `word*` too) as one case-blind pattern of whole words."""
    words = [w for w in re.findall(r"\w+\*?", query) if w not in _QUERY_OPERATORS]
    words = [re.escape(w[:-1]) + r"\w*" if w.endswith("*") else re.escape(w) for w in words]
    return re.compile(r"\b(?:" + "|".join(sorted(words, key=len, reverse=True) or ["(?!)"]) + r")\b", re.IGNORECASE)


def search_snippet(text: str, words: re.Pattern) -> list[SnippetRun]:
    """The part of a message around the first of the words it holds, as runs of text with each of the words a match
    run, and … where it is cut, at spaces (the message's start where no word is found as written: FTS5 also folds
    accents)."""
    found = words.search(text)
    at, after_match = (found.start(), found.end()) if found else (0, 0)
    before, after = SNIPPET_CHARS
    start = 0 if at <= before else text.find(" ", at - before, at) + 1 or at - before
    end = len(text) if at + after >= len(text) else text.rfind(" ", after_match, at + after)
    end = end if end > after_match else min(len(text), at + after)
    shown = ("…" if start else "") + text[start:end] + ("…" if end < len(text) else "")
    runs, at = [], 0
    for found in words.finditer(shown):
        runs += [SnippetRun(shown[at:found.start()])] if found.start() > at else []
        runs.append(SnippetRun(found[0], match=True))
        at = found.end()
    return runs + ([SnippetRun(shown[at:])] if at < len(shown) else [])


class StoreError(LookupError):
    """An id that is not in the store."""


def private_files(db_file: Path) -> None:
    """The database and its WAL and shared-memory files readable by the user alone, whatever the umask:
    created 0600 (SQLite gives its -wal and -shm files the database file's mode), older installs fixed."""
    if not db_file.exists():
        os.close(os.open(db_file, os.O_WRONLY | os.O_CREAT, 0o600))
    for path in (db_file, Path(f"{db_file}-wal"), Path(f"{db_file}-shm")):
        if path.exists() and stat.S_IMODE(path.stat().st_mode) != 0o600:
            path.chmod(0o600)


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(8)}"


def pack_tokens(token_ids: list[int]) -> bytes:
    packed = array.array("I", token_ids)
    if sys.byteorder == "big":
        packed.byteswap()
    return packed.tobytes()


def unpack_tokens(blob: bytes) -> list[int]:
    packed = array.array("I")
    packed.frombytes(blob)
    if sys.byteorder == "big":
        packed.byteswap()
    return packed.tolist()


class Store:
    def __init__(self, path: Path | str):
        self.file = Path(path)
        private_files(self.file)
        self.db = sqlite3.connect(self.file, check_same_thread=False, isolation_level=None)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute("PRAGMA synchronous = FULL")
        self.db.execute("PRAGMA foreign_keys = ON")
        self.db.execute("PRAGMA busy_timeout = 5000")
        self.migrate()

    def migrate(self) -> None:
        version = self.db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise RuntimeError(f"{self.file} has schema version {version}, newer than this localchat "
                               f"({SCHEMA_VERSION}); upgrade localchat")
        if version == SCHEMA_VERSION:
            return
        # a migration may rebuild a table (SQLite's way to change a constraint): dropping the old one must not
        # cascade into the new; the keys are checked before each migration commits
        self.db.execute("PRAGMA foreign_keys = OFF")
        try:
            for target in range(version + 1, SCHEMA_VERSION + 1):
                try:
                    self.db.executescript(f"BEGIN; {MIGRATIONS[target - 1]};")
                    if self.db.execute("PRAGMA foreign_key_check").fetchone() is not None:
                        raise RuntimeError(f"{self.file}: migrating to schema version {target} broke a foreign key")
                    self.db.execute(f"PRAGMA user_version = {target}")
                    self.db.execute("COMMIT")
                except BaseException:
                    if self.db.in_transaction:
                        self.db.execute("ROLLBACK")  # the file stays at the last version that committed
                    raise
        finally:
            self.db.execute("PRAGMA foreign_keys = ON")

    def close(self) -> None:
        self.db.close()

    # --- conversations ---

    def create_conversation(self, title: str, system_prompt: str, settings: SamplingSettings,
                            summary_of: str | None = None, documents: list[str] = ()) -> Conversation:
        """summary_of: the conversation whose summary this one starts from; documents: the ids of those it starts
        with."""
        now = time.time()
        conversation = Conversation(id=new_id("c"), title=title, system_prompt=system_prompt, settings=settings,
                                    created_at=now, updated_at=now, summary_of=summary_of, documents=list(documents))
        self.db.execute("INSERT INTO conversations (id, title, system_prompt, settings, created_at, updated_at, "
                        "summary_of, documents) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        (conversation.id, title, system_prompt, _json(settings), now, now, summary_of,
                         _json(conversation.documents)))
        return conversation

    def summaries_of(self, conversation_id: str) -> list[str]:
        """The conversations started from a summary of this one, oldest first."""
        return [row[0] for row in self.db.execute(
            "SELECT id FROM conversations WHERE summary_of = ? ORDER BY created_at", (conversation_id,))]

    def list_conversations(self) -> list[Conversation]:
        """Newest activity first."""
        rows = self.db.execute(
            f"SELECT {_CONVERSATION_COLUMNS} FROM conversations c ORDER BY updated_at DESC, rowid DESC").fetchall()
        return [_conversation(row) for row in rows]

    def get_conversation(self, conversation_id: str) -> Conversation:
        row = self.db.execute(
            f"SELECT {_CONVERSATION_COLUMNS} FROM conversations c WHERE id = ?", (conversation_id,)).fetchone()
        if row is None:
            raise StoreError(f"no conversation {quoted(conversation_id)}")
        return _conversation(row)

    def update_conversation(self, conversation_id: str, *, title: str | None = None,
                            system_prompt: str | None = None, settings: SamplingSettings | None = None,
                            documents: list[str] | None = None) -> None:
        fields = {"title": title, "system_prompt": system_prompt, "settings": _json(settings),
                  "documents": _json(documents)}
        fields = {k: v for k, v in fields.items() if v is not None}
        if not fields:
            return
        assignments = ", ".join(f"{k} = ?" for k in fields)
        cursor = self.db.execute(f"UPDATE conversations SET {assignments}, updated_at = ? WHERE id = ?",
                                 (*fields.values(), time.time(), conversation_id))
        if cursor.rowcount == 0:
            raise StoreError(f"no conversation {quoted(conversation_id)}")

    def rename_conversation(self, conversation_id: str, title: str, only_if: str) -> bool:
        """A title the model wrote, where the chat's title is still `only_if` (not renamed meanwhile); not an
        activity (updated_at stays). Whether it was renamed."""
        return self.db.execute("UPDATE conversations SET title = ? WHERE id = ? AND title = ?",
                               (title, conversation_id, only_if)).rowcount == 1

    def set_pinned(self, conversation_id: str, pinned: bool) -> None:
        """Whether the conversation is kept warm (pinned again at every start); not an activity."""
        cursor = self.db.execute("UPDATE conversations SET pinned = ? WHERE id = ?", (int(pinned), conversation_id))
        if cursor.rowcount == 0:
            raise StoreError(f"no conversation {quoted(conversation_id)}")

    def pinned_conversations(self) -> list[Conversation]:
        """The pinned conversations, newest activity first."""
        rows = self.db.execute(f"SELECT {_CONVERSATION_COLUMNS} FROM conversations c WHERE pinned "
                               "ORDER BY updated_at DESC, rowid DESC").fetchall()
        return [_conversation(row) for row in rows]

    def set_active_leaf(self, conversation_id: str, message_id: str) -> None:
        """The branch shown when the conversation is opened again; not an activity (updated_at stays)."""
        cursor = self.db.execute("UPDATE conversations SET active_leaf = ? WHERE id = ?", (message_id, conversation_id))
        if cursor.rowcount == 0:
            raise StoreError(f"no conversation {quoted(conversation_id)}")

    def delete_conversation(self, conversation_id: str) -> None:
        cursor = self.db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))
        if cursor.rowcount == 0:
            raise StoreError(f"no conversation {quoted(conversation_id)}")

    # --- messages ---

    def add_message(self, message: Message, token_ids: list[int]) -> Message:
        """Write a complete message (and the conversation's last activity) in one transaction. A StoreError if its
        conversation or parent is gone (deleted while the message was on its way)."""
        try:
            with self._transaction():
                self.db.execute(f"INSERT INTO messages ({_MESSAGE_COLUMNS}) VALUES "
                                "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                                (message.id, message.conversation_id, message.parent_id, message.role,
                                 message.content, pack_tokens(token_ids), message.finish_reason, int(message.stopped),
                                 message.model, _json(message.stats), message.created_at, _json(message.tool_calls),
                                 message.tool_call_id, message.reasoning_content, _json(message.documents),
                                 _json(message.variation)))
                self.db.execute("UPDATE conversations SET updated_at = max(updated_at, ?) WHERE id = ?",
                                (message.created_at, message.conversation_id))
        except sqlite3.IntegrityError:  # a foreign key: nothing else in the row can fail
            raise StoreError(f"no conversation {quoted(message.conversation_id)} (or no message "
                             f"{quoted(message.parent_id or '')} in it): it was deleted") from None
        message.num_tokens = len(token_ids)
        return message

    def set_partial_content(self, texts: list[tuple[str, str, str | None]]) -> None:
        """The text so far of replies still being written (message id, answer, thinking)."""
        with self._transaction():
            self.db.executemany("UPDATE messages SET content = ?, reasoning_content = ? "
                                "WHERE id = ? AND finish_reason IS NULL",
                                [(text, reasoning, message_id) for message_id, text, reasoning in texts])

    def finish_message(self, message: Message, token_ids: list[int]) -> Message:
        """Store a reply whole (it was added unfinished). Nothing happens if its conversation is gone."""
        with self._transaction():
            self.db.execute("UPDATE messages SET content = ?, token_ids = ?, finish_reason = ?, stopped = ?, "
                            "stats = ?, tool_calls = ?, reasoning_content = ? WHERE id = ?",
                            (message.content, pack_tokens(token_ids), message.finish_reason, int(message.stopped),
                             _json(message.stats), _json(message.tool_calls), message.reasoning_content, message.id))
            self.db.execute("UPDATE conversations SET updated_at = max(updated_at, ?) WHERE id = ?",
                            (time.time(), message.conversation_id))
        message.num_tokens = len(token_ids)
        return message

    def reopen_message(self, message_id: str) -> None:
        """A stored reply that goes on (a continue): unfinished again until finish_message stores it whole."""
        self.db.execute("UPDATE messages SET finish_reason = NULL, stopped = 0 WHERE id = ?", (message_id,))

    def mark_interrupted(self) -> int:
        """Replies left unfinished by a process that died while writing them: kept as far as they were saved,
        marked interrupted. Their token ids are rendered again when a prompt needs them. The count."""
        return self.db.execute("UPDATE messages SET finish_reason = 'interrupted', stopped = 1 "
                               "WHERE role = 'assistant' AND finish_reason IS NULL").rowcount

    # --- documents ---

    def add_document(self, document: Document, text: str) -> Document:
        self.db.execute("INSERT INTO documents (id, name, media_type, text, tokens, empty_pages, created_at) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (document.id, document.name, document.media_type, text, document.tokens,
                         _json(document.empty_pages), document.created_at))
        return document

    def list_documents(self, ids: list[str] | None = None) -> list[Document]:
        """Every document (newest first), or those of `ids` in their order (a StoreError for an unknown one)."""
        if ids is None:
            rows = self.db.execute(f"SELECT {_DOCUMENT_COLUMNS} FROM documents ORDER BY created_at DESC").fetchall()
            return [_document(row) for row in rows]
        return [self.document(document_id)[0] for document_id in ids]

    def document(self, document_id: str) -> tuple[Document, str]:
        """A document and its text."""
        row = self.db.execute(f"SELECT {_DOCUMENT_COLUMNS}, text FROM documents WHERE id = ?",
                              (document_id,)).fetchone()
        if row is None:
            raise StoreError(f"no document {quoted(document_id)}")
        return _document(row), row["text"]

    def document_users(self, document_id: str) -> list[str]:
        """The conversations that carry the document (from their start, or in a message)."""
        pattern = f'%{json_text(document_id)}%'
        return [row[0] for row in self.db.execute(
            "SELECT id FROM conversations WHERE documents LIKE ? UNION "
            "SELECT DISTINCT conversation_id FROM messages WHERE documents LIKE ?", (pattern, pattern))]

    def delete_document(self, document_id: str) -> None:
        if self.db.execute("DELETE FROM documents WHERE id = ?", (document_id,)).rowcount == 0:
            raise StoreError(f"no document {quoted(document_id)}")

    # --- browser sessions ---

    def add_session(self, id_hash: str, expires_at: float) -> None:
        now = time.time()
        with self._transaction():
            self.db.execute("DELETE FROM browser_sessions WHERE expires_at <= ?", (now,))
            self.db.execute("INSERT INTO browser_sessions (id_hash, created_at, expires_at) VALUES (?, ?, ?)",
                            (id_hash, now, expires_at))

    def session_expiry(self, id_hash: str) -> float | None:
        row = self.db.execute("SELECT expires_at FROM browser_sessions WHERE id_hash = ?", (id_hash,)).fetchone()
        return None if row is None else row[0]

    def delete_sessions(self, id_hash: str | None = None) -> int:
        """One session, or all of them (None). The count."""
        if id_hash is None:
            return self.db.execute("DELETE FROM browser_sessions").rowcount
        return self.db.execute("DELETE FROM browser_sessions WHERE id_hash = ?", (id_hash,)).rowcount

    def get_message(self, conversation_id: str, message_id: str, with_tokens: bool = False) -> Message:
        row = self.db.execute(f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE id = ? AND conversation_id = ?",
                              (message_id, conversation_id)).fetchone()
        if row is None:
            raise StoreError(f"no message {quoted(message_id)} in conversation {quoted(conversation_id)}")
        return _message(row, with_tokens)

    def messages(self, conversation_id: str, with_tokens: bool = False) -> list[Message]:
        """Every message of the conversation, parents before children, siblings in the order written."""
        rows = self.db.execute(f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE conversation_id = ? "
                               "ORDER BY created_at, rowid", (conversation_id,)).fetchall()
        return [_message(row, with_tokens) for row in rows]

    def path(self, conversation_id: str, message_id: str) -> list[Message]:
        """The branch from the root down to message_id (with token ids)."""
        rows = self.db.execute(
            f"WITH RECURSIVE branch(id, depth) AS (SELECT ?, 0 UNION ALL "
            f"SELECT m.parent_id, b.depth + 1 FROM messages m JOIN branch b ON m.id = b.id "
            f"WHERE m.parent_id IS NOT NULL) "
            f"SELECT {', '.join('m.' + c for c in _MESSAGE_COLUMNS.split(', '))} FROM branch b "
            f"JOIN messages m ON m.id = b.id WHERE m.conversation_id = ? ORDER BY b.depth DESC",
            (message_id, conversation_id)).fetchall()
        if not rows or rows[-1]["id"] != message_id:
            raise StoreError(f"no message {quoted(message_id)} in conversation {quoted(conversation_id)}")
        return [_message(row, True) for row in rows]

    def replies_beside(self, conversation_id: str, parent: Message, limit: int) -> list[str]:
        """The texts of the newest `limit` replies written to `parent` before, or to a message it was edited from
        (a sibling of parent's role): what a regenerated or edited reply is likely to repeat."""
        rows = self.db.execute(
            "SELECT content FROM messages WHERE conversation_id = ? AND role = 'assistant' AND content != '' "
            "AND (parent_id = ? OR parent_id IN (SELECT id FROM messages WHERE conversation_id = ? "
            "AND parent_id IS ? AND role = ? AND id != ?)) ORDER BY created_at DESC, rowid DESC LIMIT ?",
            (conversation_id, parent.id, conversation_id, parent.parent_id, parent.role, parent.id, limit)).fetchall()
        return [row["content"] for row in rows]

    def delete_message(self, conversation_id: str, message_id: str) -> None:
        """Remove a message and its replies."""
        self.db.execute("DELETE FROM messages WHERE id = ? AND conversation_id = ?", (message_id, conversation_id))

    def set_token_ids(self, updates: list[tuple[str, list[int]]]) -> None:
        with self._transaction():
            self.db.executemany("UPDATE messages SET token_ids = ? WHERE id = ?",
                                [(pack_tokens(ids), message_id) for message_id, ids in updates])

    def search(self, query: str, limit: int = 50) -> list[SearchHit]:
        """Messages matching an FTS5 query, best first. A query FTS5 cannot parse is searched as one phrase. The
        snippets are cut here (search_snippet), not by FTS5's snippet(): that one reads the whole of every message
        it shows, seconds for long ones, while every other request waits."""
        sql = ("SELECT m.id, m.role, m.conversation_id, m.content, c.title "
               "FROM message_search JOIN messages m ON m.rowid = message_search.rowid "
               "JOIN conversations c ON c.id = m.conversation_id "
               "WHERE message_search MATCH ? ORDER BY rank LIMIT ?")
        try:
            rows = self.db.execute(sql, (query, limit)).fetchall()
        except sqlite3.OperationalError:
            rows = self.db.execute(sql, ('"' + query.replace('"', '""') + '"', limit)).fetchall()
        words = query_words(query)
        return [SearchHit(conversation_id=r["conversation_id"], conversation_title=r["title"],
                          message_id=r["id"], role=r["role"], snippet=search_snippet(r["content"], words))
                for r in rows]

    def _transaction(self):
        return _Transaction(self.db)


class _Transaction:
    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def __enter__(self):
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, error_type, error, traceback):
        self.db.execute("ROLLBACK" if error_type else "COMMIT")


def _conversation(row: sqlite3.Row) -> Conversation:
    return Conversation(id=row["id"], title=row["title"], system_prompt=row["system_prompt"],
                        settings=msgspec.json.decode(row["settings"], type=SamplingSettings),
                        created_at=row["created_at"], updated_at=row["updated_at"],
                        message_count=row["message_count"], active_leaf=row["active_leaf"], model=row["model"],
                        summary_of=row["summary_of"], documents=msgspec.json.decode(row["documents"], type=list[str]),
                        pinned=bool(row["pinned"]))


_DOCUMENT_COLUMNS = "id, name, media_type, tokens, empty_pages, length(text) AS chars, created_at"


def _document(row: sqlite3.Row) -> Document:
    return Document(id=row["id"], name=row["name"], media_type=row["media_type"], chars=row["chars"],
                    tokens=row["tokens"], created_at=row["created_at"],
                    empty_pages=msgspec.json.decode(row["empty_pages"], type=list[int]))


def json_text(value: str) -> str:
    return msgspec.json.encode(value).decode()


def _json(value) -> str | None:
    """A JSON column's text (None stays NULL)."""
    return None if value is None else msgspec.json.encode(value).decode()


def _from_json(text: str | None, kind: type):
    return None if text is None else msgspec.json.decode(text, type=kind)


def _message(row: sqlite3.Row, with_tokens: bool) -> Message:
    token_ids = unpack_tokens(row["token_ids"])
    return Message(id=row["id"], conversation_id=row["conversation_id"], parent_id=row["parent_id"],
                   role=row["role"], content=row["content"], created_at=row["created_at"],
                   num_tokens=len(token_ids), finish_reason=row["finish_reason"], stopped=bool(row["stopped"]),
                   model=row["model"],
                   stats=_from_json(row["stats"], ReplyStats), tool_calls=_from_json(row["tool_calls"], list[ToolCall]),
                   tool_call_id=row["tool_call_id"], reasoning_content=row["reasoning_content"],
                   documents=msgspec.json.decode(row["documents"], type=list[str]),
                   variation=_from_json(row["variation"], Variation), token_ids=token_ids if with_tokens else None)
