"""Long chats and documents in the web UI, on tests/conftest.py's small_context_server (the embedded model with a
context of 512 tokens: a few long turns reach its edge): the gauge of the context the shown branch uses ("428 / 512"),
which warns near the edge and offers a new chat from a summary; the marker where a cut left earlier messages out; the
links between a chat and the one started from its summary; the setting of what happens at the edge; and documents,
attached as chips with their size in tokens, that a chat starts from or a message carries."""

import re
from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import Locator, Page, expect
from webui_page import ChatPage, assert_fits, expect_within_width, new_page, wait_until

from support import SMALL_CONTEXT as LIMIT  # the server's max_model_len
from support import stream_api

pytestmark = pytest.mark.slow  # headless chromium against a real `localchat serve`: left out of `./dev test --fast`

SIZES = {"phone": (390, 844), "desktop": (1440, 900)}
LONG = {"temperature": 0.0, "max_tokens": 32}  # reproducible replies; a reply needs room for 32 tokens
QUESTION = ("Here is a long question about the history of the river and the old mill by the bridge, the town "
            "around it and the families who lived there for a hundred years: what happened in year {n}?")
TURNS_TO_THE_EDGE = 6  # of QUESTION: the sixth reply's context is over 80% of 512 tokens, a seventh does not fit
WARNING = re.compile(r"\bwarning\b")
NOTES = "Notes on the town.\nThe mill by the bridge was built in 1870 and burned down in 1923.\n"


@pytest.fixture(scope="module")
def context_api(small_context_server) -> Iterator[httpx.Client]:
    with small_context_server.client() as client:
        yield client


@pytest.fixture
def context_chat(page, small_context_server, context_api) -> ChatPage:
    """The signed-in web UI of the small context's server."""
    return ChatPage(page, small_context_server, context_api).sign_in()


def long_chat(api: httpx.Client, policy: str, turns: int = TURNS_TO_THE_EDGE, title: str | None = None) -> str:
    """A chat of `turns` long questions and their replies under `policy`, written through the API."""
    conversation = api.post("/api/conversations", json={"title": title or f"The river ({policy})", "system_prompt": "",
                                                        "settings": {**LONG, "context_overflow": policy}}).json()
    messages, parent = f"/api/conversations/{conversation['id']}/messages", None
    for n in range(turns):
        parent = stream_api(api, messages, {"content": QUESTION.format(n=1900 + n), "parent_id": parent}
                            )[-1]["message"]["id"]
    return conversation["id"]


def last_reply_stats(chat: ChatPage) -> dict:
    return next(m for m in reversed(chat.stored()["messages"]) if m["role"] == "assistant")["stats"]


def expect_gauge(page: Page, context: dict) -> None:
    """The gauge shows the server's count of the open branch's context, and warns from 80% of it on."""
    gauge = page.locator("#context-gauge")
    expect(gauge.locator(".gauge-text")).to_have_text(f"{context['tokens']} / {LIMIT}")
    if context["tokens"] >= 0.8 * LIMIT:
        expect(gauge).to_have_class(WARNING)
        expect(page.locator("#context-warning")).to_be_visible()
    else:
        expect(gauge).not_to_have_class(WARNING)
        expect(page.locator("#context-warning")).to_be_hidden()


def test_the_gauge_follows_each_reply_and_warns_near_the_edge(context_chat):
    chat, page = context_chat, context_chat.page
    chat.create_chat(**LONG, context_overflow="stop")
    expect(page.locator("#context-gauge")).to_be_hidden()  # nothing written yet
    for n in range(TURNS_TO_THE_EDGE):
        chat.send(QUESTION.format(n=1900 + n))
        chat.wait_replies()
        expect_gauge(page, chat.stored()["context"])
    context = chat.stored()["context"]
    share = context["tokens"] / LIMIT
    assert share >= 0.8, f"{TURNS_TO_THE_EDGE} turns took {context['tokens']} tokens: not near the edge"
    warning = page.locator("#context-warning")
    expect(warning).to_contain_text(f"This chat uses {round(share * 100)}% of the model's context")
    expect(warning).to_contain_text("refused")  # the chat's policy is to stop
    expect(page.locator("#summarize")).to_be_in_viewport(ratio=1)

    stored = len(chat.stored()["messages"])
    refused = QUESTION.format(n=2000)
    chat.send(refused)  # past the edge: the server refuses it, and the text stays to send elsewhere
    expect(page.locator("#error")).to_contain_text(f"the model's context holds {LIMIT}")
    expect(page.locator("#message")).to_have_value(refused)
    assert len(chat.stored()["messages"]) == stored

    page.reload()  # opened again: the gauge comes from the stored chat
    expect_gauge(page, context)


def test_a_cut_marks_where_the_model_sees_from_and_dims_what_it_left_out(context_chat):
    chat, page = context_chat, context_chat.page
    chat.open(long_chat(chat.api, "truncate_middle"))
    marker = page.locator("#thread > .cut-marker")
    expect(marker).to_have_count(0)
    chat.send(QUESTION.format(n=2000))  # past the edge: earlier exchanges are left out
    chat.wait_replies()
    stats = last_reply_stats(chat)
    dropped, first_kept = stats["dropped_messages"], stats["first_kept_id"]
    assert dropped and first_kept
    expect(marker).to_have_text(f"{dropped} earlier messages left out — the model sees from here")
    expect_gauge(page, chat.stored()["context"])  # down to about half the context

    for _ in range(2):  # as it came, and opened again
        assert marker.evaluate("m => m.nextElementSibling.dataset.id") == first_kept
        ids = chat.shown_ids()
        left_out = ids[ids.index(first_kept) - dropped:ids.index(first_kept)]
        assert not set(ids[:2]) & set(left_out)  # truncate_middle keeps the first exchange
        assert page.locator("#thread > .message.left-out").evaluate_all("ns => ns.map(n => n.dataset.id)") == left_out
        page.reload()
        expect(marker).to_have_count(1)


def test_a_new_chat_from_a_summary_links_both_ways(context_chat):
    chat, page = context_chat, context_chat.page
    source = long_chat(chat.api, "stop", title="The old mill")
    chat.open(source)
    summarize = page.locator("#summarize")
    held = []  # the summary request, let through once "Summarizing…" was seen
    page.route(re.compile(r"/summarize$"), lambda route: held.append(route))
    with page.expect_request(re.compile(r"/summarize$")):
        summarize.click()
    expect(summarize).to_have_text("Summarizing…")
    expect(summarize).to_be_disabled()
    expect(page.locator("#context-warning progress")).to_be_visible()
    assert held
    with page.expect_response(re.compile(r"/summarize$")) as summarized:
        held[0].continue_()
    fresh = summarized.value.json()
    assert summarized.value.status == 201 and fresh["summary_of"] == source

    expect(page.locator(f'#chats li.current[data-id="{fresh["id"]}"]')).to_have_count(1)  # it opened
    expect(page.locator("#chat-title")).to_have_text("Summary: The old mill")
    back = page.locator("#summary-of")
    expect(back).to_have_text("Started from a summary of The old mill")
    expect(page.locator("#context-gauge")).to_be_hidden()  # nothing written yet
    expect(page.locator("#continued-in")).to_be_hidden()
    assert "A summary of an earlier conversation" in chat.stored()["conversation"]["system_prompt"]

    back.get_by_role("link").click()
    expect(page.locator(f'#chats li.current[data-id="{source}"]')).to_have_count(1)
    expect(back).to_be_hidden()
    onward = page.locator("#continued-in")
    expect(onward).to_have_text("Continued in Summary: The old mill")
    expect(summarize).to_have_text("New chat from a summary")
    onward.get_by_role("link").click()
    expect(page.locator(f'#chats li.current[data-id="{fresh["id"]}"]')).to_have_count(1)


def test_the_settings_choose_what_happens_at_the_edge(context_chat):
    chat, page = context_chat, context_chat.page
    chat.create_chat()
    chat.use_tool("settings")
    dialog = page.locator("#settings-dialog")
    policy = dialog.get_by_label("When the chat outgrows the context")
    expect(policy).to_have_value("")  # the server's default
    policy.select_option(label="Rolling window")
    expect(dialog.locator(".field-note")).to_have_text("The oldest messages are left out.")
    dialog.locator('button[value="save"]').click()
    expect(dialog).to_be_hidden()
    wait_until(lambda: chat.stored()["conversation"]["settings"]["context_overflow"] == "rolling_window")

    chat.use_tool("settings")
    expect(policy).to_have_value("rolling_window")
    policy.select_option(label="The server's default")
    dialog.locator('button[value="save"]').click()
    expect(dialog).to_be_hidden()
    wait_until(lambda: chat.stored()["conversation"]["settings"]["context_overflow"] is None)


def attached_chips(page: Page) -> Locator:
    return page.locator("#attachments .document-chip")


def expect_chip(chip: Locator, document: dict) -> None:
    expect(chip.locator(".document-name")).to_have_text(document["name"])
    expect(chip.locator(".document-detail")).to_have_text(f"{document['tokens']} tokens")


def uploaded(api: httpx.Client, name: str) -> dict:
    """The newest document of that name."""
    return next(d for d in api.get("/api/documents").json() if d["name"] == name)


def drop_file(page: Page, name: str, text: str) -> None:
    """A file dragged onto the composer and dropped there."""
    files = page.evaluate_handle("([name, text]) => { const files = new DataTransfer(); "
                                 "files.items.add(new File([text], name, { type: 'text/plain' })); return files; }",
                                 [name, text])
    for event in ["dragenter", "dragover", "drop"]:
        page.dispatch_event("#composer", event, {"dataTransfer": files})


def test_a_chat_starts_from_its_first_messages_documents_and_a_later_message_carries_its_own(context_chat,
                                                                                           tmp_path):
    chat, page = context_chat, context_chat.page
    empty = chat.create_chat()
    notes, image = tmp_path / "mill-notes.txt", tmp_path / "photo.png"
    notes.write_text(NOTES)
    image.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(64))
    page.set_input_files("#attach-input", [notes, image])
    expect(page.locator("#error")).to_contain_text('"photo.png" is an image')  # refused: documents are text
    expect(attached_chips(page)).to_have_count(1)
    expect(attached_chips(page).locator(".document-detail")).to_have_text(re.compile(r"^\d+ tokens$"))
    document = uploaded(chat.api, "mill-notes.txt")
    expect_chip(attached_chips(page), document)

    chat.send("When was the mill built?")
    expect(chat.messages).to_have_count(2)
    chat.wait_replies()
    expect(page.locator("#attachments")).to_be_hidden()
    stored = chat.stored()
    assert stored["conversation"]["documents"] == [document["id"]]  # the empty chat now starts from it
    assert stored["conversation"]["settings"]["max_tokens"] == 12  # with its settings
    assert chat.conversation_id == empty
    assert stored["messages"][1]["stats"]["prompt_tokens"] > document["tokens"]
    expect_chip(page.locator("#chat-documents .document-chip"), document)
    expect(chat.messages.first.locator(".document-chip")).to_have_count(0)

    drop_file(page, "more-notes.txt", "The bridge itself is older: it was built in 1820.")
    expect(attached_chips(page).locator(".document-detail")).to_have_text(re.compile(r"^\d+ tokens$"))
    more = uploaded(chat.api, "more-notes.txt")
    chat.send("And the bridge?")
    expect(chat.messages).to_have_count(4)
    chat.wait_replies()
    question = chat.stored()["messages"][2]
    assert question["content"] == "And the bridge?" and question["documents"] == [more["id"]]
    expect_chip(chat.messages.nth(2).locator(".document-chip"), more)

    page.reload()  # opened again: the chips come from the stored chat
    expect_chip(page.locator("#chat-documents .document-chip"), document)
    expect_chip(chat.messages.nth(2).locator(".document-chip"), more)


def test_an_attachment_can_be_removed_and_one_too_large_is_refused(context_chat):
    chat, page = context_chat, context_chat.page
    chat.create_chat()
    limit = chat.api.get("/api/limits").json()["max_document_bytes"]
    page.set_input_files("#attach-input", {"name": "huge.txt", "mimeType": "text/plain", "buffer": b"a" * (limit + 1)})
    expect(page.locator("#error")).to_contain_text(f"documents may have {limit // 2 ** 20} MB at most")
    expect(page.locator("#attachments")).to_be_hidden()

    page.set_input_files("#attach-input", {"name": "draft.txt", "mimeType": "text/plain", "buffer": NOTES.encode()})
    expect(attached_chips(page).locator(".document-detail")).to_have_text(re.compile(r"^\d+ tokens$"))
    draft = uploaded(chat.api, "draft.txt")
    attached_chips(page).get_by_role("button", name="Remove draft.txt").click()
    expect(page.locator("#attachments")).to_be_hidden()
    wait_until(lambda: chat.api.get(f"/api/documents/{draft['id']}").status_code == 404)  # it was not kept


@pytest.fixture(scope="module")
def context_chats(small_context_server) -> dict[str, str]:
    """For the layout test, made once: a chat near the edge, one with a cut, one started from a summary, and one that
    starts from a document and has a message that carries two."""
    with small_context_server.client() as api:
        near = long_chat(api, "stop", title="Near the edge of the context")
        cut = long_chat(api, "truncate_middle", TURNS_TO_THE_EDGE + 1, title="A chat with a cut")
        summary = api.post(f"/api/conversations/{cut}/summarize", json={}).json()["id"]
        notes, bridge, history = (api.post("/api/documents", files={"file": (name, text.encode(), "text/plain")}
                                           ).json()["id"] for name, text in [
            ("mill-notes.txt", NOTES), ("the-bridge-and-its-builders-1820.md", "Built in 1820."),
            ("history.txt", "A short history.")])
        documents = api.post("/api/conversations", json={"title": "The mill's notes", "system_prompt": "",
                                                         "settings": LONG, "documents": [notes]}).json()["id"]
        stream_api(api, f"/api/conversations/{documents}/messages",
                   {"content": "What do these add?", "documents": [bridge, history]})
    return {"near": near, "cut": cut, "summary": summary, "documents": documents}


@pytest.mark.parametrize("color_scheme", ["light", "dark"])
@pytest.mark.parametrize("size", SIZES)
def test_the_gauge_the_marker_and_the_links_fit(browser, small_context_server, context_api, context_chats, size,
                                               color_scheme):
    with new_page(browser, *SIZES[size], color_scheme=color_scheme) as page:
        chat = ChatPage(page, small_context_server, context_api).sign_in()

        def screenshot(name: str) -> None:
            assert_fits(page)
            page.mouse.move(0, SIZES[size][1] - 1)  # no hover effects
            page.screenshot(path=f"/tmp/webui-context-{name}-{size}-{color_scheme}.png")

        chat.open(context_chats["near"])
        for part in ["#chat-title", "#context-gauge", "#context-warning", "#summarize", "#message", "#send"]:
            expect(page.locator(part)).to_be_in_viewport(ratio=1)
        screenshot("warning")

        chat.use_tool("settings")
        dialog = page.locator("#settings-dialog")
        policy = dialog.get_by_label("When the chat outgrows the context")
        policy.select_option("truncate_middle")  # the longest note
        policy.scroll_into_view_if_needed()
        expect(policy).to_be_in_viewport(ratio=1)
        assert dialog.evaluate("d => d.scrollWidth <= d.clientWidth")
        screenshot("settings")
        dialog.locator('button[value="cancel"]').click()

        chat.open(context_chats["cut"])
        marker = page.locator("#thread > .cut-marker")
        marker.scroll_into_view_if_needed()
        expect_within_width(page, marker)
        expect(page.locator("#continued-in")).to_be_visible()
        screenshot("cut")

        chat.open(context_chats["summary"])
        expect(page.locator("#summary-of")).to_be_in_viewport(ratio=1)
        screenshot("summary")

        chat.open(context_chats["documents"])
        page.set_input_files("#attach-input", {"name": "a-long-name-for-a-file-of-notes-on-the-town.txt",
                                               "mimeType": "text/plain", "buffer": NOTES.encode()})
        expect(attached_chips(page).locator(".document-detail")).to_have_text(re.compile(r"^\d+ tokens$"))
        for part in [*page.locator(".document-chip").all(), page.locator("#attach"), page.locator("#message")]:
            expect_within_width(page, part)
        expect(attached_chips(page)).to_be_in_viewport(ratio=1)
        screenshot("documents")
