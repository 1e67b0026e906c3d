"""A thinking model's replies in the terminal UI: the thinking collapsed above the answer while it streams
("Thinking… N tokens") and after ("Thought for 12 s"), expanded with enter on the focused reply (its details) or a
click, ended with ctrl+r (the answer follows), kept per reply across branches and the N-reply picker, and its
settings. On fixed data (FakeEngine), and
against a real engine on a tiny thinking model whose replies think until they are told to stop."""

import pytest
from fake_engine import PRIME_THOUGHTS, THOUGHTS, FakeEngine
from textual.widgets import Checkbox, DataTable, Footer, Input, Label
from textual.widgets._footer import FooterKey
from tui_pilot import (
    chat_screen,
    fork,
    note_text,
    open_settings,
    reply_written,
    screen_of,
    shown,
    thinking_text,
    thinking_title,
    wait_until,
)

from localchat.app.protocol.conversations import SamplingSettings
from localchat.tui.app import LocalChatApp
from localchat.tui.reply_text import shown_markdown
from localchat.tui.screens.chat import ChatScreen
from localchat.tui.screens.fork_picker import ForkPicker
from localchat.tui.screens.help import HelpScreen
from localchat.tui.widgets.message_view import ChatMessage

SMALL = (80, 24)


def app_with(engine, tmp_path) -> LocalChatApp:
    return LocalChatApp(client=engine, config_file=tmp_path / "tui.toml")


async def primes_chat(pilot) -> ChatScreen:
    """The thinking model's chat ("Is 91 prime?" and two replies that thought), on its first reply."""
    screen = await chat_screen(pilot, "c_think")
    await wait_until(pilot, lambda: len(screen.view.views) == 2 and screen.focused is screen.composer)
    return screen


def inside(widget, size=SMALL) -> bool:
    region = widget.region
    return region.width > 0 and region.height > 0 and region.right <= size[0] and region.bottom <= size[1]


def footer_key(screen, action: str) -> FooterKey | None:
    return next((key for key in screen.query_one(Footer).query(FooterKey) if key.action == action), None)


@pytest.mark.asyncio
async def test_a_stored_replys_thinking_is_collapsed_and_t_or_a_click_expands_it(tmp_path):
    async with app_with(FakeEngine(thinking=True), tmp_path).run_test(size=SMALL) as pilot:
        screen = await primes_chat(pilot)
        question, reply = screen.view.views
        assert thinking_title(question) == ""  # the user's message has none
        assert thinking_title(reply) == "▶ Thought for 3.4 s" and thinking_text(reply) == ""
        assert reply.body.source == "No: **91 = 7 × 13**."
        await wait_until(pilot, lambda: inside(reply.thinking_block), what="the thinking's line on screen")

        await pilot.press("up")  # the last message
        assert screen.focused is reply
        await pilot.press("enter")
        await wait_until(pilot, lambda: thinking_text(reply) == PRIME_THOUGHTS[0], what="the thinking expanded")
        assert thinking_title(reply) == "▼ Thought for 3.4 s" and screen.composer.text == ""
        await pilot.press("enter")
        await wait_until(pilot, lambda: thinking_text(reply) == "", what="the thinking collapsed")

        await pilot.click(reply.thinking_block.query_one(".thinking-title"))
        await wait_until(pilot, lambda: thinking_text(reply) == PRIME_THOUGHTS[0], what="expanded by a click")


@pytest.mark.asyncio
async def test_each_branch_shows_its_own_thinking(tmp_path):
    async with app_with(FakeEngine(thinking=True), tmp_path).run_test(size=SMALL) as pilot:
        screen = await primes_chat(pilot)
        await pilot.press("up", "right")  # the sibling reply
        second = await wait_until(pilot, lambda: screen.view.views[-1].message.id == "m_r2" and screen.view.views[-1])
        assert thinking_title(second) == "▶ Thought for 12 s"  # its own, collapsed
        await pilot.press("enter")
        await wait_until(pilot, lambda: thinking_text(second) == PRIME_THOUGHTS[1])
        await pilot.press("left")
        first = await wait_until(pilot, lambda: screen.view.views[-1].message.id == "m_r1" and screen.view.views[-1])
        assert thinking_title(first) == "▶ Thought for 3.4 s" and thinking_text(first) == ""


@pytest.mark.asyncio
async def test_thinking_streams_collapsed_and_ctrl_r_ends_it(tmp_path):
    engine = FakeEngine(thinking=True)
    engine.think_until_ended = True  # it thinks until told to answer
    async with app_with(engine, tmp_path).run_test(size=SMALL) as pilot:
        screen = await primes_chat(pilot)
        await pilot.press(*"Name a colour", "enter")
        reply = await wait_until(pilot, lambda: screen.view.views[-1].message.role == "assistant"
                                 and screen.view.views[-1].thinking and screen.view.views[-1])
        await wait_until(pilot, lambda: reply.thinking_block.tokens > 20, what="some thinking")
        assert thinking_title(reply).startswith("▶ Thinking… ") and thinking_title(reply).endswith(" tokens")
        assert thinking_text(reply) == "" and reply.body.source == ""  # collapsed, and no answer yet
        assert note_text(reply) == "thinking… ^r answers now"
        key = await wait_until(pilot, lambda: footer_key(screen, "end_thinking"), what="the key in the footer")
        assert inside(key) and str(key.description) == "Answer now"
        await wait_until(pilot, lambda: inside(reply.thinking_block), what="the thinking's line on screen")

        await pilot.press("ctrl+r")
        done = await reply_written(pilot, screen, old={"m_r1"})
        assert engine.end_thinking_calls == [("c_think", None)]
        stored = engine.messages["c_think"][-1]
        assert stored.reasoning_content.startswith(THOUGHTS[0]) and done.body.source == shown_markdown(stored)
        assert thinking_title(done) == "▶ Thought for 2.5 s"  # the stored reply's stats.thinking_s
        assert note_text(done) == "" and footer_key(screen, "end_thinking") is None
        await pilot.press("up", "enter")  # its details
        await wait_until(pilot, lambda: thinking_text(done) == stored.reasoning_content)


@pytest.mark.asyncio
async def test_the_n_reply_picker_keeps_each_replys_thinking_and_ctrl_r_ends_it(tmp_path):
    engine = FakeEngine(thinking=True)
    engine.think_until_ended = True
    async with app_with(engine, tmp_path).run_test(size=SMALL) as pilot:
        screen = await primes_chat(pilot)
        await pilot.press(*"Three colours")
        await fork(pilot)
        picker = await screen_of(pilot, ForkPicker)
        await wait_until(pilot, lambda: picker.cards[0].thinking, what="the first reply thinking")
        assert note_text(picker.cards[0]) == "thinking… ^r answers now"
        await wait_until(pilot, lambda: footer_key(picker, "end_thinking"), what="the key in the picker's footer")
        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: not picker.streaming, what="three replies")
        assert engine.end_thinking_calls == [("c_think", None)]
        stored = {m.id: m for m in engine.messages["c_think"]}
        for card, thoughts in zip(picker.cards, THOUGHTS, strict=True):  # each its own
            assert thinking_title(card) == "▶ Thought for 2.5 s"
            assert card.thinking_block.text.startswith(thoughts)
            assert card.thinking_block.text == stored[card.message.id].reasoning_content
        second = picker.cards[1].message
        await pilot.press("2")
        shown_reply = await wait_until(pilot, lambda: not isinstance(pilot.app.screen, ForkPicker)
                                       and screen.view.views[-1].message.id == second.id and screen.view.views[-1])
        assert shown_reply.thinking_block.text == stored[second.id].reasoning_content


@pytest.mark.asyncio
async def test_the_settings_set_thinking_and_its_budget_for_a_thinking_model(tmp_path):
    engine = FakeEngine(thinking=True)
    async with app_with(engine, tmp_path).run_test(size=SMALL) as pilot:
        await primes_chat(pilot)

        dialog = await open_settings(pilot)
        budget = dialog.query_one("#thinking-token-budget", Input)
        assert budget.value == "" and budget.placeholder == "server default"
        assert dialog.query_one("#enable-thinking", Checkbox).value is True
        budget.value = "-1"
        await pilot.press("ctrl+s")
        assert str(dialog.query_one("#settings-error", Label).visual) == "Thinking budget is at least 0"
        budget.value = "64"
        dialog.query_one("#enable-thinking", Checkbox).value = False
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: engine.conversations["c_think"].settings.thinking_token_budget == 64)
        assert engine.conversations["c_think"].settings.enable_thinking is False

        dialog = await open_settings(pilot)
        assert dialog.query_one("#thinking-token-budget", Input).value == "64"
        dialog.query_one("#thinking-token-budget", Input).value = ""  # the server's default again
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: engine.conversations["c_think"].settings.thinking_token_budget is None)


@pytest.mark.asyncio
async def test_a_model_that_does_not_think_shows_no_thinking_settings_or_key(tmp_path):
    async with app_with(FakeEngine(), tmp_path).run_test(size=SMALL) as pilot:
        screen = await chat_screen(pilot, "c_sort")
        dialog = await open_settings(pilot)
        assert not dialog.query("#thinking-token-budget") and not dialog.query("#enable-thinking")
        await pilot.press("escape")
        assert all(not view.thinking_block.display for view in screen.view.views)
        assert footer_key(screen, "end_thinking") is None


@pytest.mark.asyncio
async def test_the_help_lists_the_thinking_keys(tmp_path):
    async with app_with(FakeEngine(thinking=True), tmp_path).run_test(size=SMALL) as pilot:
        await primes_chat(pilot)
        await pilot.press("f1")
        help_screen = await screen_of(pilot, HelpScreen)
        table = help_screen.query_one(DataTable)
        rows = {(row[0], row[3]): row[1] for row in map(table.get_row_at, range(table.row_count))}
        assert rows[("Chat", "end_thinking")] == "ctrl+r" and rows[("N replies", "end_thinking")] == "ctrl+r"
        assert rows[("Message", "toggle_details")] == "enter" and rows[("N replies", "card_details")] == "t"


@pytest.mark.slow  # a real engine process
@pytest.mark.asyncio
async def test_ctrl_r_ends_a_real_models_thinking_and_its_answer_follows(thinking_client, tmp_path):
    """tiny-r1-thinking's replies start inside their thinking and never end it themselves: without a budget, only
    ctrl+r (the engine's end-thinking) lets the answer come before max_tokens. ctrl+r goes as soon as 5 thinking
    tokens show; max_tokens is most of the model's 2,048-token context, so that the thinking outlasts the keypress on
    a loaded machine (a reply of 400 tokens once ended before the pilot saw it think)."""
    conversation = await thinking_client.create_conversation(settings=SamplingSettings(temperature=0.7,
                                                                                       max_tokens=2000))
    async with app_with(thinking_client, tmp_path).run_test(size=SMALL) as pilot:
        screen = await chat_screen(pilot, conversation.id)
        await wait_until(pilot, lambda: screen.model.thinks, what="the model known to think")
        await pilot.press(*"Hello", "enter")
        reply = await wait_until(pilot, lambda: screen.view.views and isinstance(screen.view.views[-1], ChatMessage)
                                 and screen.view.views[-1].message.role == "assistant" and screen.view.views[-1],
                                 what="the reply started")
        await wait_until(pilot, lambda: reply.thinking, what="the reply thinking")
        await wait_until(pilot, lambda: reply.thinking_block.tokens >= 5, what="some thinking")
        assert thinking_title(reply).startswith("▶ Thinking… ") and reply.body.source == ""
        assert note_text(reply) == "thinking… ^r answers now"

        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: reply.body.source, what="the answer")
        if reply.has_class("-streaming"):  # the answer still streams: the thinking's time as measured here
            assert thinking_title(reply).startswith("▶ Thought for ")
            await pilot.press("escape")  # the answer has begun: the rest of its 2,000 tokens proves nothing more
        done = await reply_written(pilot, screen)

        stored = (await thinking_client.conversation(conversation.id)).messages[-1]
        assert stored.id == done.message.id and stored.reasoning_content and stored.content
        assert 0 < stored.stats.reasoning_tokens < stored.stats.completion_tokens
        assert stored.stats.thinking_s is not None
        assert shown(done.thinking_block.query_one(".thinking-title")).startswith("▶ Thought for ")
        assert done.thinking_block.text == stored.reasoning_content and done.body.source == shown_markdown(stored)


@pytest.mark.slow  # a real engine process
@pytest.mark.asyncio
async def test_a_thinking_budget_set_in_the_settings_ends_a_real_models_thinking(thinking_client, tmp_path):
    conversation = await thinking_client.create_conversation(settings=SamplingSettings(max_tokens=60))
    async with app_with(thinking_client, tmp_path).run_test(size=SMALL) as pilot:
        screen = await chat_screen(pilot, conversation.id)
        await wait_until(pilot, lambda: screen.model.thinks, what="the model known to think")
        dialog = await open_settings(pilot)
        dialog.query_one("#thinking-token-budget", Input).value = "12"
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: pilot.app.screen is screen, what="the settings saved")
        await pilot.press(*"Hello", "enter")
        done = await reply_written(pilot, screen)

        stored = (await thinking_client.conversation(conversation.id)).messages[-1]
        assert stored.reasoning_content and stored.stats.reasoning_tokens == 12
        assert thinking_title(done).startswith("▶ Thought for ") and done.body.source == shown_markdown(stored)
