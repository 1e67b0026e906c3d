"""Switching the model from the web UI, against a real engine with a second model (tiny-llama): the list, the
loading progress, the note on a chat written with another model, and a phone-sized window."""

import pytest
from playwright.sync_api import expect
from webui_page import REPLY_TIMEOUT_MS, ChatPage, assert_fits, new_page

from localchat.engine.loading.model_catalog import EMBEDDED_NAME
from support import SECOND_MODEL_NAME

pytestmark = pytest.mark.slow  # headless chromium against a real `localchat serve`: left out of `./dev test --fast`


@pytest.fixture
def two_models_api(two_model_server):
    with two_model_server.client() as client:
        yield client


def pick_model(chat: ChatPage, served_name: str) -> None:
    """Choose a model in the sidebar's list and wait until it is loaded."""
    chat.show_sidebar()
    select = chat.page.locator("#model")
    expect(select).to_be_in_viewport(ratio=1)
    value = select.locator(f"option:text-is('{served_name}')").get_attribute("value")
    select.select_option(value)
    expect(select).to_be_enabled(timeout=REPLY_TIMEOUT_MS)
    expect(select.locator("option:checked")).to_have_text(served_name)
    expect(chat.page.locator("#model-status")).to_be_hidden()


@pytest.mark.parametrize("size", [(1440, 900), (390, 844)], ids=["desktop", "phone"])
def test_switching_the_model_and_continuing_a_chat_written_with_another(browser, two_model_server,
                                                                       two_models_api, size):
    with new_page(browser, *size) as page:
        chat = ChatPage(page, two_model_server, two_models_api).sign_in()
        conversation_id = chat.create_chat()
        chat.send("Hello")
        chat.wait_replies()
        assert chat.stored()["conversation"]["model"] == EMBEDDED_NAME
        expect(page.locator("#model-note")).to_be_hidden()  # written with the model that runs

        pick_model(chat, SECOND_MODEL_NAME)
        assert two_models_api.get("/health").json()["model"] == SECOND_MODEL_NAME
        chat.open(conversation_id)
        note = page.locator("#model-note")
        expect(note).to_contain_text(f"Written with {EMBEDDED_NAME}; the engine runs {SECOND_MODEL_NAME}")
        assert_fits(page)

        chat.send("More")
        chat.wait_replies()
        expect(note).to_contain_text(f"Continuing with {SECOND_MODEL_NAME}: the messages written with "
                                     f"{EMBEDDED_NAME} were tokenized again")
        assert chat.stored()["conversation"]["model"] == SECOND_MODEL_NAME

        chat.open(conversation_id)  # the note's button switches back to the chat's first model
        page.reload()
        expect(note).to_be_hidden()  # its latest reply is the running model's
        two_models_api.post("/api/models/current", json={"model": EMBEDDED_NAME})
        page.reload()
        button = note.get_by_role("button", name=f"Switch to {SECOND_MODEL_NAME}")
        expect(button).to_be_visible(timeout=REPLY_TIMEOUT_MS)
        button.click()
        expect(note).to_be_hidden(timeout=REPLY_TIMEOUT_MS)
        assert two_models_api.get("/health").json()["model"] == SECOND_MODEL_NAME
        pick_model(chat, EMBEDDED_NAME)  # back, for the other tests of this server
        assert_fits(page)
