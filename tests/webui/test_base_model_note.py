"""The web UI on a base model (a GGUF without a chat template, tests/base_models.py): a note where the composer is
says that the model only continues text, and the composer is off until a chat model runs."""

from collections.abc import Iterator

import httpx
import pytest
from base_models import BASE_GEMMA3, base_model_file, base_model_server
from playwright.sync_api import expect
from test_model_switching import pick_model
from webui_page import REPLY_TIMEOUT_MS, ChatPage, assert_fits, new_page

from support import SECOND_MODEL_NAME, Server

pytestmark = pytest.mark.slow  # headless chromium against a real `localchat serve`: left out of `./dev test --fast`

NOTE = (f"{BASE_GEMMA3} is a base model without a chat template: it only continues text; it answers "
        "/v1/completions")


@pytest.fixture(scope="module")
def base_server(tmp_path_factory) -> Iterator[Server]:
    with base_model_server(tmp_path_factory.mktemp("base-model-home"), BASE_GEMMA3) as server:
        yield server


@pytest.fixture
def base_api(base_server) -> Iterator[httpx.Client]:
    with base_server.client() as client:
        yield client


@pytest.mark.parametrize("size", [(1440, 900), (390, 844)], ids=["desktop", "phone"])
def test_a_base_model_is_named_where_the_composer_is_until_a_chat_model_runs(browser, base_server, base_api, size):
    with new_page(browser, *size) as page:
        chat = ChatPage(page, base_server, base_api).sign_in()
        note = page.locator("#base-model-note")
        expect(note).to_contain_text(NOTE)
        expect(note).to_be_in_viewport(ratio=1)
        expect(page.locator("#empty-chat")).to_be_hidden()  # not "Send a message to start."
        for control in ("#message", "#replies", "#send"):
            expect(page.locator(control)).to_be_disabled()
        assert_fits(page)

        pick_model(chat, SECOND_MODEL_NAME)
        expect(note).to_be_hidden()
        expect(page.locator("#message")).to_be_enabled()
        expect(page.locator("#send")).to_be_enabled()
        switched = base_api.post("/api/models/current", json={"model": str(base_model_file(BASE_GEMMA3))})
        assert switched.status_code == 202, switched.text  # back, for the other size
        page.reload()
        expect(note).to_contain_text(NOTE, timeout=REPLY_TIMEOUT_MS)  # once loaded
        expect(page.locator("#message")).to_be_disabled()
