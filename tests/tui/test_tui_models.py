"""Switching the model from the terminal UI (F4), against a real engine with a second model (tiny-llama)."""

import pytest
from textual.widgets import OptionList
from tui_pilot import chat_screen, reply_written, wait_until

from localchat.app.client.engine_client import EngineClient
from localchat.app.protocol.conversations import SamplingSettings
from localchat.engine.loading.model_catalog import EMBEDDED_NAME
from localchat.tui.app import LocalChatApp
from localchat.tui.screens.models import ModelsScreen
from support import SECOND_MODEL_NAME

pytestmark = pytest.mark.slow  # a real engine process: left out of `./dev test --fast`


def notices(app) -> list[str]:
    return [str(n.message) for n in app._notifications]


async def pick_model(pilot, ending: str) -> None:
    """F4, then the model whose name ends with `ending`, and wait until the engine runs it."""
    await pilot.press("f4")
    # after its on_mount (which hides the progress bar, then highlights the current model: a choice made before
    # would be undone)
    def mounted():
        screen = pilot.app.screen
        return isinstance(screen, ModelsScreen) and screen.is_mounted and not screen.query_one(
            "#model-progress").display and screen
    dialog = await wait_until(pilot, mounted, what="the model list")
    # the running model's sampling defaults and KV cache, in the engine's words
    info = await wait_until(pilot, lambda: str(dialog.query_one("#model-info").render()), what="the model's info")
    health = await dialog.client.health()
    assert health.kv_cache.summary in info.replace("\n", " ") and health.sampling.source in info.replace("\n", " ")
    options = dialog.query_one(OptionList)
    at = next(i for i in range(options.option_count) if options.get_option_at_index(i).id.endswith(ending))
    options.focus()
    options.highlighted = at
    await pilot.press("enter")
    try:
        await wait_until(pilot, lambda: not isinstance(pilot.app.screen, ModelsScreen), timeout=120,
                         what="the model loaded")
    except TimeoutError:
        health = await dialog.client.health()
        raise TimeoutError(f"the model list stayed open; notices: {notices(pilot.app)}; engine: {health}") from None


@pytest.mark.asyncio
async def test_f4_switches_the_model_and_a_chat_continued_with_it_says_so(two_model_server, tmp_path):
    async with EngineClient(two_model_server.url, two_model_server.token) as client:
        conversation = await client.create_conversation(settings=SamplingSettings(temperature=0, max_tokens=6))
        async for _ in client.send(conversation.id, "Hello"):
            pass
        app = LocalChatApp(client=client, config_file=tmp_path / "tui.toml")
        async with app.run_test(size=(100, 30)) as pilot:
            screen = await chat_screen(pilot, conversation.id)
            await wait_until(pilot, lambda: screen.title == f"localchat · {EMBEDDED_NAME}", what="the model shown")
            old = {view.message.id for view in screen.view.views}

            await pick_model(pilot, SECOND_MODEL_NAME)
            # the title follows once the screen's worker has the model list's answer (just after the list closes)
            await wait_until(pilot, lambda: screen.title == f"localchat · {SECOND_MODEL_NAME}", what="the new title")
            assert (await client.health()).model == SECOND_MODEL_NAME
            # a notification shows once the app has handled its message, not at once
            await wait_until(pilot, lambda: any(f"Now running {SECOND_MODEL_NAME}" in n for n in notices(app)),
                             what="the model's notice")
            await wait_until(pilot, lambda: any(f"written with {EMBEDDED_NAME}" in n for n in notices(app)),
                             what="the open chat's model")

            await pilot.press(*"More", "enter")
            reply = await reply_written(pilot, screen, old)
            assert reply.message.model == SECOND_MODEL_NAME
            assert any(f"Continuing with {SECOND_MODEL_NAME}: the messages written with {EMBEDDED_NAME}" in n
                       for n in notices(app))

            await pick_model(pilot, EMBEDDED_NAME)  # back, for the other tests of this server
            await wait_until(pilot, lambda: screen.title == f"localchat · {EMBEDDED_NAME}", what="the title again")
