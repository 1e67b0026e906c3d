"""The conversation store: schema migrations, the message tree, token ids, search, durability settings."""

import sqlite3
import time

import pytest

from localchat.app.protocol.conversations import Message, ReplyStats, SamplingSettings, SnippetRun
from localchat.app.server.store import (
    MIGRATIONS,
    SCHEMA_VERSION,
    Store,
    StoreError,
    new_id,
    pack_tokens,
    query_words,
    search_snippet,
    unpack_tokens,
)


def message(conversation_id, parent_id, role, content, **fields):
    return Message(id=new_id("m"), conversation_id=conversation_id, parent_id=parent_id, role=role,
                   content=content, created_at=fields.pop("created_at", 1.0), **fields)


@pytest.fixture
def store(tmp_path):
    store = Store(tmp_path / "chats.db")
    yield store
    store.close()


def pragma(store: Store, name: str):
    return store.db.execute(f"PRAGMA {name}").fetchone()[0]


def test_a_new_store_has_the_latest_schema_in_wal_mode_with_foreign_keys(store):
    assert pragma(store, "user_version") == SCHEMA_VERSION == len(MIGRATIONS)
    assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.db.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert pragma(store, "integrity_check") == "ok"


def test_an_old_database_is_migrated_and_keeps_its_messages(tmp_path):
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript(f"{MIGRATIONS[0]}; PRAGMA user_version = 1;")
    db.execute("INSERT INTO conversations VALUES ('c_1', 'old', '', '{}', 1, 1)")
    db.execute("INSERT INTO messages (id, conversation_id, role, content, token_ids, created_at) "
               "VALUES ('m_1', 'c_1', 'user', 'an old message about penguins', ?, 1)", (pack_tokens([1, 2]),))
    db.execute("INSERT INTO messages (id, conversation_id, parent_id, role, content, token_ids, created_at) "
               "VALUES ('m_2', 'c_1', 'm_1', 'assistant', 'a reply about walruses', ?, 2)", (pack_tokens([3]),))
    db.commit()
    db.close()
    store = Store(path)
    assert pragma(store, "user_version") == SCHEMA_VERSION
    assert [hit.message_id for hit in store.search("penguins")] == ["m_1"]  # the search index was built
    assert [hit.message_id for hit in store.search("walruses")] == ["m_2"]  # and follows the rebuilt table
    # the messages table was rebuilt (for role 'tool'): a reply under a parent survived, keys and index intact
    assert [(m.id, m.token_ids) for m in store.path("c_1", "m_2")] == [("m_1", [1, 2]), ("m_2", [3])]
    assert pragma(store, "integrity_check") == "ok" and pragma(store, "foreign_keys") == 1
    store.delete_conversation("c_1")  # cascades as before
    assert store.db.execute("SELECT count(*) FROM messages").fetchone()[0] == 0
    store.close()


def test_a_database_from_a_newer_localchat_is_refused(tmp_path):
    path = tmp_path / "new.db"
    sqlite3.connect(path).execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(RuntimeError, match="newer than this localchat"):
        Store(path)


def test_tree_paths_tokens_and_cascading_deletes(store):
    conversation = store.create_conversation("t", "", SamplingSettings())
    cid, t = conversation.id, time.time()
    root = store.add_message(message(cid, None, "user", "hi", created_at=t + 1), [10, 11])
    a = store.add_message(message(cid, root.id, "assistant", "A", created_at=t + 2, finish_reason="stop",
                                  stats=ReplyStats(prompt_tokens=2, cached_tokens=0, completion_tokens=1,
                                                   time_to_first_token_s=0.1, tokens_per_s=None, duration_s=0.2)),
                          [20, 21, 2**31 + 5])
    b = store.add_message(message(cid, root.id, "assistant", "B", created_at=t + 3, stopped=True,
                                  finish_reason="abort"), [30])
    follow = store.add_message(message(cid, a.id, "user", "more", created_at=t + 4), [40])
    assert [m.id for m in store.path(cid, follow.id)] == [root.id, a.id, follow.id]
    assert [m.token_ids for m in store.path(cid, follow.id)] == [[10, 11], [20, 21, 2**31 + 5], [40]]
    assert store.get_message(cid, b.id).stopped is True
    assert store.get_message(cid, a.id).stats.time_to_first_token_s == 0.1
    assert [m.id for m in store.messages(cid)] == [root.id, a.id, b.id, follow.id]
    assert store.messages(cid)[0].token_ids is None and store.messages(cid, with_tokens=True)[0].token_ids
    assert store.get_conversation(cid).updated_at == t + 4  # last activity
    with pytest.raises(StoreError):
        store.path(cid, "m_missing")
    with pytest.raises(StoreError):
        store.get_message("c_other", a.id)
    store.delete_message(cid, a.id)  # a branch goes with its replies
    assert [m.id for m in store.messages(cid)] == [root.id, b.id]
    store.delete_conversation(cid)
    assert store.db.execute("SELECT count(*) FROM messages").fetchone()[0] == 0
    with pytest.raises(StoreError):
        store.get_conversation(cid)


def test_list_order_rename_settings_and_search(store):
    old = store.create_conversation("old", "", SamplingSettings())
    new = store.create_conversation("new", "sys", SamplingSettings(temperature=0.1, stop=["\n"]))
    store.add_message(message(old.id, None, "user", "zebras are striped", created_at=10**10), [1])
    assert [c.id for c in store.list_conversations()] == [old.id, new.id]
    store.update_conversation(new.id, title="renamed", settings=SamplingSettings(max_tokens=3))
    assert [c.title for c in store.list_conversations()] == ["old", "renamed"]
    got = store.get_conversation(new.id)
    assert got.settings.max_tokens == 3 and got.system_prompt == "sys"
    hits = store.search("zebra*")
    assert [(h.conversation_title, h.role) for h in hits] == [("old", "user")]
    assert [(run.text, run.match) for run in hits[0].snippet] == [("zebras", True), (" are striped", False)]
    assert store.search('unbalanced "quote') == []  # not FTS5 syntax: searched as a phrase


def test_a_snippet_marks_every_word_of_the_query_and_is_cut_at_spaces():
    text = "word " * 20 + "Paris is the capital; PARIS again and paris-like " + "tail " * 30
    runs = search_snippet(text, query_words("paris"))
    shown = "".join(run.text for run in runs)
    assert shown.startswith("…word ") and shown.endswith("…") and len(shown) < len(text)
    assert [run.text for run in runs if run.match] == ["Paris", "PARIS", "paris"]
    assert all(not run.match or run.text.lower() == "paris" for run in runs)
    assert search_snippet("nothing here", query_words("zebra")) == [SnippetRun("nothing here")]


def test_token_ids_round_trip():
    ids = [0, 1, 49151, 2**32 - 1]
    assert unpack_tokens(pack_tokens(ids)) == ids
    assert len(pack_tokens(ids)) == 16


def test_committed_messages_survive_an_unclosed_connection(tmp_path):
    store = Store(tmp_path / "c.db")
    cid = store.create_conversation("t", "", SamplingSettings()).id
    store.add_message(message(cid, None, "user", "kept"), [1])
    # no close(): what a killed process leaves behind
    other = Store(tmp_path / "c.db")
    assert [m.content for m in other.messages(cid)] == ["kept"]
    other.close()
    store.close()
