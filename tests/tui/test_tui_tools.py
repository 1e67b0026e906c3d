"""Search, export and the settings modal of the terminal UI, against a real engine process."""

import json
import re
import secrets

import pytest
from textual.widgets import Input, Label, OptionList, RadioButton, TextArea
from tui_pilot import chat_screen, reply_written, screen_of, wait_until

from localchat.app.protocol.conversations import SamplingSettings
from localchat.tui.app import LocalChatApp
from localchat.tui.chat.settings_control import SettingsControl
from localchat.tui.screens.export import ExportScreen
from localchat.tui.screens.search import SearchScreen
from localchat.tui.screens.settings import SettingsScreen

pytestmark = pytest.mark.slow  # a real engine process: left out of `./dev test --fast`

SIZE = (120, 40)
SHORT = SamplingSettings(temperature=0.0, max_tokens=8)


async def chat_with_reply(client, text: str):
    conversation = await client.create_conversation(settings=SHORT)
    async for _ in client.send(conversation.id, text):
        pass
    return conversation, (await client.conversation(conversation.id)).messages


@pytest.mark.asyncio
async def test_search_finds_a_message_and_opens_its_chat(client, tmp_path):
    # a word no other chat of the shared engine holds: a run found a second chat with "axolotl" in it
    word = f"axolotl{secrets.token_hex(3)}"
    wanted, _ = await chat_with_reply(client, f"Tell me about the {word} please.")
    await chat_with_reply(client, "Something else entirely.")  # the newest chat: the one opened first
    async with LocalChatApp(client=client, config_file=tmp_path / "tui.toml").run_test(size=SIZE) as pilot:
        screen = await chat_screen(pilot)
        await wait_until(pilot, lambda: screen.session.conversation is not None)
        assert screen.session.conversation.id != wanted.id
        await pilot.press("ctrl+f")
        search = await screen_of(pilot, SearchScreen)
        await pilot.press(*word)
        hits = search.query_one(OptionList)
        await wait_until(pilot, lambda: hits.option_count > 0, what="search hits")
        assert {h.conversation_id for h in search.hits} == {wanted.id}  # the question (and maybe its reply)
        assert word in str(hits.get_option_at_index(0).prompt)
        await pilot.press("enter", "enter")  # to the hits, then open the first
        await chat_screen(pilot, wanted.id)
        assert screen.view.views[0].body.source == f"Tell me about the {word} please."


@pytest.mark.asyncio
async def test_export_writes_markdown_and_json_files(client, tmp_path):
    conversation, messages = await chat_with_reply(client, "Hello exporter.")
    conversation = await client.name_chat(conversation.id)  # the model's title, once written: the file's name
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", conversation.title).strip("-")
    async with LocalChatApp(client=client, config_file=tmp_path / "tui.toml").run_test(size=SIZE) as pilot:
        await chat_screen(pilot, conversation.id)
        await pilot.press("ctrl+o")
        export = await screen_of(pilot, ExportScreen)
        assert export.query_one("#path", Input).value.endswith(f"{stem}.md")
        export.query_one("#path", Input).value = str(tmp_path / "chat.md")
        await pilot.press("enter")
        markdown = tmp_path / "chat.md"
        await wait_until(pilot, markdown.exists, what="the Markdown file")
        text = markdown.read_text()
        assert text.startswith(f"# {conversation.title}") and messages[1].content in text
        await wait_until(pilot, lambda: any(f"Exported to {markdown}" in n.message
                                            for n in pilot.app._notifications), what="the notification")

        await pilot.press("ctrl+o")
        export = await screen_of(pilot, ExportScreen)
        export.query_one("#json", RadioButton).value = True
        await wait_until(pilot, lambda: export.query_one("#path", Input).value.endswith(".json"))
        export.query_one("#path", Input).value = str(tmp_path / "chat.json")
        await pilot.press("enter")
        await wait_until(pilot, (tmp_path / "chat.json").exists, what="the JSON file")
        tree = json.loads((tmp_path / "chat.json").read_text())
        assert [m["content"] for m in tree["messages"]] == [m.content for m in messages]


@pytest.mark.asyncio
async def test_settings_modal_saves_the_system_prompt_and_sampling(client, tmp_path):
    conversation = await client.create_conversation(settings=SHORT)
    async with LocalChatApp(client=client, config_file=tmp_path / "tui.toml").run_test(size=SIZE) as pilot:
        screen = await chat_screen(pilot, conversation.id)
        await pilot.press("ctrl+s")
        modal = await screen_of(pilot, SettingsScreen)
        assert modal.query_one("#max-tokens", Input).value == "8"
        modal.query_one("#system-prompt", TextArea).text = "Answer like a pirate."
        for field, value in {"temperature": "0.5", "top-p": "0.8", "max-tokens": "2x", "seed": "7",
                             "fork-n": "2"}.items():
            modal.query_one(f"#{field}", Input).value = value
        await pilot.press("ctrl+s")  # "2x" is not a number: the modal stays and says why
        await pilot.pause()
        assert pilot.app.screen is modal and "number" in str(modal.query_one("#settings-error", Label).visual)
        modal.query_one("#max-tokens", Input).value = "20"
        modal.query_one("#temperature", Input).value = "3"  # out of the engine's range (GET /api/limits)
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert pilot.app.screen is modal and "0.0 to 2.0" in str(modal.query_one("#settings-error", Label).visual)
        for field, value in {"temperature": "0.5", "top-k": "40", "min-p": "0.05", "presence-penalty": "0.5"}.items():
            modal.query_one(f"#{field}", Input).value = value
        modal.query_one("#stop", TextArea).text = "\n\nTHE END\n"
        await pilot.press("ctrl+s")
        settings = screen.query_one(SettingsControl)
        await wait_until(pilot, lambda: pilot.app.screen is screen and settings.n_of(conversation.id) == 2)
        await wait_until(pilot, lambda: screen.session.conversation.system_prompt == "Answer like a pirate.")

        stored = (await client.conversation(conversation.id)).conversation
        assert stored.system_prompt == "Answer like a pirate."
        assert (stored.settings.temperature, stored.settings.top_p, stored.settings.max_tokens,
                stored.settings.seed) == (0.5, 0.8, 20, 7)
        assert (stored.settings.top_k, stored.settings.min_p, stored.settings.presence_penalty,
                stored.settings.stop) == (40, 0.05, 0.5, ["THE END"])  # the web UI's settings, here too

        await pilot.press(*"Hi", "enter")  # the saved settings apply to the next reply
        reply = await reply_written(pilot, screen)
        assert reply.message.stats.completion_tokens <= 20
        await pilot.press("ctrl+s")
        modal = await screen_of(pilot, SettingsScreen)
        assert [modal.query_one(f"#{f}", Input).value for f in ("temperature", "top-p", "max-tokens", "seed",
                                                                "fork-n")] == ["0.5", "0.8", "20", "7", "2"]
