"""Long chats in the terminal UI: the header's gauge of the context the branch on screen uses ("6.8k / 8k"), which
warns near the edge and offers a new chat from a summary (F5); the divider where the last prompt was cut; the links
between a chat and the one begun from its summary (ctrl+l); the context overflow setting; a refused send's text put
back. On fixed data (FakeEngine), and on tests/conftest.py's small_context_server (the embedded model with a context
of 512 tokens, which a few long turns fill)."""

import asyncio
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from fake_engine import LONG_CUT, FakeEngine
from textual.widgets import DataTable, Select
from tui_pilot import chat_screen, open_settings, reply_written, screen_of, shown, wait_until

from localchat.app.client.engine_client import EngineError
from localchat.app.protocol.conversations import ContextUse, SamplingSettings
from localchat.tui.app import LocalChatApp
from localchat.tui.chat.news import ChatsChanged
from localchat.tui.context_budget import branch_use, gauge_text, tokens_text
from localchat.tui.screens.attach import AttachScreen, path_completions, typed_path
from localchat.tui.screens.chat import ChatScreen
from localchat.tui.screens.help import HelpScreen
from localchat.tui.widgets.chat_links import ChatLinkLine
from localchat.tui.widgets.conversation_view import CutMarker
from localchat.tui.widgets.document_chips import AttachedChip, DocumentChip, DocumentChips
from support import SMALL_CONTEXT  # the small_context_server's max_model_len

SMALL = (80, 24)


def app_with(engine, tmp_path) -> LocalChatApp:
    return LocalChatApp(client=engine, config_file=tmp_path / "tui.toml")


async def long_chat(pilot) -> ChatScreen:
    """The chat near the edge of the 8k context, its branch shown."""
    screen = await chat_screen(pilot, "c_long")
    await wait_until(pilot, lambda: len(screen.view.views) == 10, what="the long chat")
    return screen


def inside(widget, size=SMALL) -> bool:
    region = widget.region
    return region.width > 0 and region.height > 0 and region.right <= size[0] and region.bottom <= size[1]


def gauge(screen: ChatScreen) -> str:
    return shown(screen.gauge)


def links(screen: ChatScreen) -> list[str]:
    return [shown(line) for line in screen.query(ChatLinkLine)] if screen.query_one("#chat-links").display else []


def test_token_counts_read_as_people_count_contexts():
    assert [tokens_text(n) for n in (0, 812, 1023, 1024, 3481, 8192, 32768, 131072)] == \
        ["0", "812", "1023", "1k", "3.4k", "8k", "32k", "128k"]
    assert gauge_text(ContextUse(3481, 8192)) == "3.4k / 8k"
    assert branch_use([], 8192) is None and branch_use([], None, 300) is None
    assert branch_use([], 8192, 300) == ContextUse(300, 8192)  # before the first message: the chat's documents


COUNTS = [0, 83, 599, 1023, 1024, 3328, 3481, 7000, 8192, 10188, 10752, 33000, 131072]


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node to run the web UI's module")
def test_the_terminal_and_the_browser_write_a_count_alike():
    """The gauge's number is the engine's count (ConversationTree.context, which both UIs reckon with its own
    branch_tokens) written one way in both: "8k" for 8192 tokens in the terminal and the browser (issue 43: the
    browser said 8.2k), halves rounded up in both (3328 tokens: 3.3k)."""
    module = Path(__file__).parents[2] / "webui" / "static" / "context.js"
    script = (f"const {{ formatTokens }} = await import({json.dumps(module.as_uri())});"
              f"console.log(JSON.stringify({json.dumps(COUNTS)}.map(formatTokens)));")
    browser = json.loads(subprocess.run(["node", "--input-type=module", "-e", script], capture_output=True, text=True,
                                        check=True).stdout)
    assert browser == [tokens_text(count) for count in COUNTS]
    assert browser[COUNTS.index(8192)] == "8k" and browser[COUNTS.index(3328)] == "3.3k"


@pytest.mark.asyncio
async def test_the_gauge_shows_the_branchs_use_and_warns_near_the_edge_once(tmp_path):
    app = app_with(FakeEngine(long_chat=True), tmp_path)
    warnings, notify = [], app.notify  # every warning said (the app's list drops those gone from screen)
    app.notify = lambda message, **options: (options.get("title") == "Context" and warnings.append(message),
                                             notify(message, **options))
    async with app.run_test(size=SMALL) as pilot:
        screen = await long_chat(pilot)
        await wait_until(pilot, lambda: gauge(screen) == "⚠ 6.8k / 8k · f5 summarize", what="the warning")
        assert screen.gauge.has_class("-near-limit") and screen.gauge.region.right == SMALL[0]
        assert "f5: a new chat that starts from a summary" in screen.gauge.tooltip
        assert len(warnings) == 1 and "6.8k / 8k of the model's context" in warnings[0]

        await pilot.press("ctrl+b")  # the chat list, hidden at 80 columns
        await wait_until(pilot, lambda: screen.query_one("#chats").region.width, what="the chat list")
        await pilot.click("#chats", offset=(2, 1))  # the next chat: its context is small
        await chat_screen(pilot, "c_sort")
        await wait_until(pilot, lambda: gauge(screen) == "106 / 8k", what="the other chat's gauge")
        assert not screen.gauge.has_class("-near-limit")
        await pilot.click("#chats", offset=(2, 0))
        await long_chat(pilot)
        await wait_until(pilot, lambda: screen.gauge.has_class("-near-limit"))
        assert len(warnings) == 1  # said once per chat


@pytest.mark.asyncio
async def test_the_gauge_is_empty_where_the_context_is_not_known(tmp_path):
    async with app_with(FakeEngine(), tmp_path).run_test(size=SMALL) as pilot:  # a remote engine's, say
        screen = await chat_screen(pilot, "c_sort")
        await wait_until(pilot, lambda: len(screen.view.views) == 4)
        assert gauge(screen) == "" and not links(screen)


@pytest.mark.asyncio
async def test_a_divider_stands_where_the_last_prompt_was_cut(tmp_path):
    async with app_with(FakeEngine(long_chat=True), tmp_path).run_test(size=SMALL) as pilot:
        screen = await long_chat(pilot)
        marker = await wait_until(pilot, lambda: screen.view.cut_marker, what="the cut marker")
        assert shown(marker) == "4 earlier messages left out — the model sees from here"
        assert screen.view.after(marker) is screen.view.view_of(LONG_CUT[0])
        assert len(screen.view.query(CutMarker)) == 1

        await pilot.press(*"And in 1905?", "enter")  # the fake's reply was not cut
        await reply_written(pilot, screen, old={"m_l10"})
        await wait_until(pilot, lambda: screen.view.cut_marker is None, what="the divider gone")


@pytest.mark.asyncio
async def test_f5_starts_a_new_chat_from_a_summary_linked_both_ways(tmp_path):
    engine = FakeEngine(long_chat=True)
    engine.summary_hold = asyncio.Event()
    async with app_with(engine, tmp_path).run_test(size=SMALL) as pilot:
        screen = await long_chat(pilot)
        await pilot.press("f5")
        await wait_until(pilot, lambda: gauge(screen).startswith("summarizing… "), what="the progress")
        assert engine.summarize_calls == [("c_long", "m_l10")]
        await pilot.press("f5")  # one at a time
        assert len(engine.summarize_calls) == 1
        engine.summary_hold.set()

        await chat_screen(pilot, "c_sum1")
        await wait_until(pilot, lambda: links(screen) == ["↰ Started from a summary of “The river and the mill”  "
                                                          "(^l opens it)"], what="the link back")
        await wait_until(pilot, lambda: screen.view.views == [] and gauge(screen) == ""
                         and screen.focused is screen.composer, what="the new chat, empty")

        await pilot.press("ctrl+l")
        await long_chat(pilot)
        await wait_until(pilot, lambda: links(screen) == ["↳ Continued in “Summary: The river and the mill”  "
                                                          "(^l opens it)"], what="the link onward")
        await pilot.click(ChatLinkLine)
        await chat_screen(pilot, "c_sum1")


@pytest.mark.asyncio
async def test_a_click_on_the_warning_gauge_summarizes_and_a_deleted_origin_is_no_link(tmp_path):
    engine = FakeEngine(long_chat=True)
    async with app_with(engine, tmp_path).run_test(size=SMALL) as pilot:
        screen = await long_chat(pilot)
        await wait_until(pilot, lambda: screen.gauge.has_class("-near-limit"))
        await pilot.click("#context-gauge")
        await chat_screen(pilot, "c_sum1")
        del engine.conversations["c_long"], engine.messages["c_long"]
        screen.post_message(ChatsChanged())  # the chat list read again
        await wait_until(pilot, lambda: links(screen) == ["↰ Started from a summary of a deleted chat"])
        await pilot.press("ctrl+l")  # nothing to open
        await pilot.pause()
        assert screen.session.conversation.id == "c_sum1"


@pytest.mark.asyncio
async def test_the_settings_choose_what_happens_at_the_edge(tmp_path):
    engine = FakeEngine(long_chat=True)
    async with app_with(engine, tmp_path).run_test(size=SMALL) as pilot:
        await long_chat(pilot)

        async def settings() -> Select:
            return (await open_settings(pilot)).query_one("#context-overflow", Select)

        policy = await settings()
        assert policy.value == "default"
        policy.value = "stop"
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: engine.conversations["c_long"].settings.context_overflow == "stop")
        policy = await settings()
        assert policy.value == "stop"
        policy.value = "rolling_window"
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: engine.conversations["c_long"].settings.context_overflow == "rolling_window")
        policy = await settings()
        policy.value = "default"
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: engine.conversations["c_long"].settings.context_overflow is None)


@pytest.mark.asyncio
async def test_a_refused_message_goes_back_into_the_message_box(tmp_path):
    engine = FakeEngine(long_chat=True)
    engine.refuse_with = EngineError(400, "this chat holds 8,000 tokens ... (context_overflow is \"stop\")")
    async with app_with(engine, tmp_path).run_test(size=SMALL) as pilot:
        screen = await long_chat(pilot)
        await pilot.press(*"One more question", "enter")
        await wait_until(pilot, lambda: screen.composer.text == "One more question", what="the text back")
        assert not screen.replies.writing and len(screen.view.views) == 10
        refusal = [n for n in pilot.app._notifications if n.title == "The engine refused"]
        assert refusal and "context_overflow" in refusal[0].message


@pytest.mark.asyncio
async def test_the_help_lists_the_context_and_document_keys(tmp_path):
    async with app_with(FakeEngine(long_chat=True), tmp_path).run_test(size=SMALL) as pilot:
        await long_chat(pilot)
        await pilot.press("f1")
        help_screen = await screen_of(pilot, HelpScreen)
        table = help_screen.query_one(DataTable)
        rows = {row[3]: row[1] for row in map(table.get_row_at, range(table.row_count))}
        assert rows["summarize"] == "f5" and rows["open_linked_chat"] == "ctrl+l"
        assert rows["attach_document"] == "f3" and rows["detach_document"] == "delete"


# --- on a real engine whose context holds 512 tokens ---

QUESTION = ("Here is a long question about the history of the river and the old mill by the bridge, the town "
            "around it and the families who lived there for a hundred years: what happened in year {n}?")


async def write_turns(client, conversation_id: str, turns: int) -> None:
    parent = None
    for n in range(turns):
        async for event in client.send(conversation_id, QUESTION.format(n=1900 + n), parent):
            if event.__struct_config__.tag == "done":
                parent = event.message.id


@pytest.mark.slow  # a real engine process
@pytest.mark.asyncio
async def test_a_real_chat_reaches_the_edge_is_cut_and_continues_from_a_summary(small_context_client, tmp_path):
    settings = SamplingSettings(temperature=0.0, max_tokens=32)
    conversation = await small_context_client.create_conversation("The river", settings=settings)
    await write_turns(small_context_client, conversation.id, 5)
    async with app_with(small_context_client, tmp_path).run_test(size=SMALL) as pilot:
        screen = await chat_screen(pilot, conversation.id)
        await wait_until(pilot, lambda: gauge(screen).endswith(f"/ {SMALL_CONTEXT}"), what="the gauge")
        stored = await small_context_client.conversation(conversation.id)
        assert gauge(screen).removeprefix("⚠ ").split(" · ")[0] == f"{stored.context.tokens} / {SMALL_CONTEXT}"

        cut = None
        for n in range(5, 9):  # more long questions, until one's prompt is cut
            old = {view.message.id for view in screen.view.views}
            await pilot.press(*QUESTION.format(n=1900 + n), "enter")
            reply = await reply_written(pilot, screen, old)
            if reply.message.stats.dropped_messages:
                cut = reply.message.stats
                break
        assert cut is not None, "no prompt was cut"
        assert cut.context_limit == SMALL_CONTEXT and cut.prompt_tokens + 32 <= SMALL_CONTEXT
        marker = await wait_until(pilot, lambda: screen.view.cut_marker, what="the cut marker")
        assert shown(marker) == f"{cut.dropped_messages} earlier messages left out — the model sees from here"
        assert screen.view.after(marker).message.id == cut.first_kept_id
        assert gauge(screen).removeprefix("⚠ ").split(" · ")[0] == f"{cut.context_tokens} / {SMALL_CONTEXT}"

        await pilot.press("f5")
        await wait_until(pilot, lambda: screen.session.conversation.id != conversation.id, timeout=120,
                         what="the chat begun from the summary")
        continued = screen.session.conversation
        assert continued.summary_of == conversation.id and "A summary of an earlier conversation" in \
            continued.system_prompt
        await wait_until(pilot, lambda: links(screen) == ["↰ Started from a summary of “The river”  (^l opens it)"])
        assert (await small_context_client.conversation(conversation.id)).summaries == [continued.id]


# --- documents ---


def test_a_path_completes_to_the_entries_of_its_folder(tmp_path):
    (tmp_path / "notes").mkdir()
    for name in ("mill-history.md", "mill-map.txt", ".hidden-mill"):
        (tmp_path / "notes" / name).write_text("x")
    (tmp_path / "notes" / "mill-photos").mkdir()
    folder = f"{tmp_path}/notes/"
    assert path_completions(folder + "mill") == [folder + "mill-photos/", folder + "mill-history.md",
                                                 folder + "mill-map.txt"]
    assert path_completions(folder + "mill-h") == [folder + "mill-history.md"]
    assert path_completions(folder + ".h") == [folder + ".hidden-mill"]
    assert path_completions(f"{tmp_path}/nowhere/x") == []
    # a path from the root typed after the "~/" the dialog starts with is that path, as a shell reads it
    assert typed_path(f"~/{folder}mill-h") == f"{folder}mill-h"
    assert path_completions(f"~/{folder}mill-h") == [f"~/{folder}mill-history.md"]
    assert typed_path("~/Documents/~/notes.txt") == "~/notes.txt"


async def attach(pilot, path: str) -> AttachScreen:
    """F3, the path typed, Enter; the dialog (closed once the document is read)."""
    await pilot.press("f3")
    dialog = await screen_of(pilot, AttachScreen)
    dialog.path_input.value = path
    await pilot.press("enter")
    return dialog


def attached(screen: ChatScreen) -> list[str]:
    return [shown(chip) for chip in screen.attached.query(AttachedChip)] if screen.attached.display else []


@pytest.mark.asyncio
async def test_f3_attaches_a_document_by_its_completed_path_and_the_next_message_carries_it(tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "mill-history.md").write_text("The mill was built in 1850 by the river.")
    (tmp_path / "notes" / "other.txt").write_text("x")
    engine = FakeEngine(long_chat=True)
    async with app_with(engine, tmp_path).run_test(size=SMALL) as pilot:
        screen = await long_chat(pilot)
        await pilot.press("f3")
        dialog = await screen_of(pilot, AttachScreen)
        assert "your next message" in shown(dialog.query_one(".dialog-title"))
        dialog.path_input.value = f"{tmp_path}/notes/"
        dialog.path_input.action_end()
        await pilot.press("m")
        await wait_until(pilot, lambda: shown(dialog.query_one("#path-matches")) == "mill-history.md",
                         what="the names that match")
        await pilot.press("tab")  # takes the completion
        await wait_until(pilot, lambda: dialog.path_input.value == f"{tmp_path}/notes/mill-history.md")
        assert inside(dialog.query_one("#attach"))
        await pilot.press("enter")
        await wait_until(pilot, lambda: pilot.app.screen is screen, what="the dialog closed")
        assert attached(screen) == ["▤ mill-history.md · 9 tokens ✕"] and screen.focused is screen.composer

        await pilot.press(*"What does it say?", "enter")
        await reply_written(pilot, screen, old={"m_l10"})
        assert engine.sent[-1] == ("c_long", "What does it say?", ["d_1"])
        assert attached(screen) == []
        question = screen.view.views[-2]
        chips = question.query_one(".message-documents", DocumentChips)
        assert chips.display and [shown(chip) for chip in chips.query(DocumentChip)] == ["▤ mill-history.md · 9 tokens"]

        await pilot.press("f3")  # the next dialog starts in the folder of the last file
        dialog = await screen_of(pilot, AttachScreen)
        assert dialog.path_input.value == f"{tmp_path}/notes/"


@pytest.mark.asyncio
async def test_a_new_chat_starts_with_its_documents_and_a_chip_comes_off_with_a_click_or_delete(tmp_path):
    for name, text in (("a.txt", "one two three"), ("b.txt", "four five")):
        (tmp_path / name).write_text(text)
    engine = FakeEngine(long_chat=True)
    async with app_with(engine, tmp_path).run_test(size=SMALL) as pilot:
        screen = await long_chat(pilot)
        await pilot.press("ctrl+n")
        for name in ("a.txt", "b.txt", "a.txt"):
            await attach(pilot, str(tmp_path / name))
            await wait_until(pilot, lambda: pilot.app.screen is screen)
        assert attached(screen) == ["▤ a.txt · 3 tokens ✕", "▤ b.txt · 2 tokens ✕", "▤ a.txt · 3 tokens ✕"]
        await pilot.click(AttachedChip)  # the first comes off
        await wait_until(pilot, lambda: len(attached(screen)) == 2)
        screen.attached.query(AttachedChip).last().focus()
        await pilot.press("delete")
        await wait_until(pilot, lambda: attached(screen) == ["▤ b.txt · 2 tokens ✕"])
        assert screen.focused is screen.composer

        await pilot.press(*"Hello", "enter")
        await reply_written(pilot, screen)
        created = screen.session.conversation
        assert created.documents == ["d_2"] and engine.sent[-1] == (created.id, "Hello", [])
        assert attached(screen) == []
        chat_documents = screen.query_one("#chat-documents", DocumentChips)
        await wait_until(pilot, lambda: chat_documents.display)
        assert [shown(chip) for chip in chat_documents.query(DocumentChip)] == ["▤ b.txt · 2 tokens"]


@pytest.mark.asyncio
async def test_the_attach_dialog_says_what_is_wrong_and_stays_open(tmp_path):
    (tmp_path / "empty.txt").write_text("")
    async with app_with(FakeEngine(long_chat=True), tmp_path).run_test(size=SMALL) as pilot:
        screen = await long_chat(pilot)
        dialog = await attach(pilot, str(tmp_path / "missing.txt"))
        status = dialog.query_one("#attach-status")
        await wait_until(pilot, lambda: shown(status) == f"There is no file {tmp_path}/missing.txt")
        dialog.path_input.value = str(tmp_path / "empty.txt")
        await pilot.press("enter")
        await wait_until(pilot, lambda: shown(status) == '"empty.txt" holds no text', what="the engine's refusal")
        dialog.path_input.value = str(tmp_path)
        await pilot.press("enter")  # a folder: into it
        assert dialog.path_input.value == f"{tmp_path}/" and pilot.app.screen is dialog
        await pilot.press("escape")
        await wait_until(pilot, lambda: pilot.app.screen is screen)
        assert attached(screen) == []


@pytest.mark.slow  # a real engine process
@pytest.mark.asyncio
async def test_documents_attached_in_the_tui_start_a_real_chat_and_go_with_a_message(client, tmp_path):
    (tmp_path / "mill.md").write_text("# The mill\n\nThe mill by the river was built in 1850 and ground wheat.\n")
    (tmp_path / "bridge.txt").write_text("The stone bridge next to the mill was built in 1790.\n")
    before = await client.create_conversation("Before")  # opened first; ctrl+n leaves it
    async with app_with(client, tmp_path).run_test(size=SMALL) as pilot:
        screen = await chat_screen(pilot, before.id)
        await pilot.press("ctrl+n")
        await attach(pilot, str(tmp_path / "mill.md"))
        await wait_until(pilot, lambda: pilot.app.screen is screen and attached(screen), what="the chip")
        mill = screen.attached.documents[0]
        assert mill.media_type == "text/markdown" and mill.tokens > 10
        assert attached(screen) == [f"▤ mill.md · {mill.tokens} tokens ✕"]
        await pilot.press(*"When was the mill built?", "enter")
        await reply_written(pilot, screen)
        conversation = screen.session.conversation
        assert conversation.documents == [mill.id]

        await attach(pilot, str(tmp_path / "bridge.txt"))
        await wait_until(pilot, lambda: pilot.app.screen is screen and attached(screen), what="the chip")
        bridge = screen.attached.documents[0]
        old = {view.message.id for view in screen.view.views}
        await pilot.press(*"And the bridge?", "enter")
        reply = await reply_written(pilot, screen, old)
        stored = await client.conversation(conversation.id)
        question = next(m for m in stored.messages if m.content == "And the bridge?")
        assert question.documents == [bridge.id] and {d.id for d in stored.documents} == {mill.id, bridge.id}
        assert reply.message.stats.prompt_tokens > mill.tokens + bridge.tokens
        chips = screen.view.view_of(question.id).query_one(".message-documents", DocumentChips)
        assert [shown(chip) for chip in chips.query(DocumentChip)] == [f"▤ bridge.txt · {bridge.tokens} tokens"]
        chat_documents = screen.query_one("#chat-documents", DocumentChips)
        assert [shown(chip) for chip in chat_documents.query(DocumentChip)] == [f"▤ mill.md · {mill.tokens} tokens"]


@pytest.mark.asyncio
async def test_a_chat_without_messages_starts_with_the_documents_its_first_message_had(tmp_path):
    (tmp_path / "a.txt").write_text("one two three")
    engine = FakeEngine(long_chat=True)
    async with app_with(engine, tmp_path).run_test(size=SMALL) as pilot:
        screen = await long_chat(pilot)
        await pilot.press("f5")  # a chat begun from a summary: it has no messages yet
        await chat_screen(pilot, "c_sum1")
        await pilot.press("f3")
        dialog = await screen_of(pilot, AttachScreen)
        assert shown(dialog.query_one(".dialog-title")) == "Attach a document to the chat (it starts with it)"
        dialog.path_input.value = str(tmp_path / "a.txt")
        await pilot.press("enter")
        await wait_until(pilot, lambda: pilot.app.screen is screen and attached(screen))

        engine.refuse_with = EngineError(400, "the model is busy")  # the documents stay the chat's all the same
        await pilot.press(*"Hello", "enter")
        await wait_until(pilot, lambda: screen.composer.text == "Hello", what="the refused text back")
        assert engine.conversations["c_sum1"].documents == ["d_1"] and engine.sent[-1] == ("c_sum1", "Hello", [])
        assert attached(screen) == [] and screen.view.views == []
        await wait_until(pilot, lambda: gauge(screen) == "3 / 8k", what="the gauge of the chat's documents")
        chat_documents = screen.query_one("#chat-documents", DocumentChips)
        assert [shown(chip) for chip in chat_documents.query(DocumentChip)] == ["▤ a.txt · 3 tokens"]
