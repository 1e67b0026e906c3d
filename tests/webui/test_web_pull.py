"""Pulling a model from the web UI's sidebar (issue 56), at a laptop's and a phone's width, from the fake Hugging Face
Hub (tests/fake_hub.py): a field for REPO [FILE], the download's progress, then the model in the Model list."""

import pytest
from fake_hub import HubFile, HubRepo, tiny_gguf
from playwright.sync_api import expect
from webui_page import SIZES, ChatPage, new_page

pytestmark = pytest.mark.slow  # headless chromium against a real `localchat serve`: left out of `./dev test --fast`

FILE = "tiny.Q4_K_M.gguf"
MB = 2**20


@pytest.fixture(params=SIZES)
def hub_chat(request, browser, hub_server):
    """The web UI of the server whose Hub is the fake one, on a laptop's screen, then on a phone's."""
    with hub_server.client() as api, new_page(browser, *SIZES[request.param]) as page:
        yield ChatPage(page, hub_server, api).sign_in(), request.param


def test_a_model_pulled_from_the_sidebar_shows_its_progress_and_joins_the_model_list(hub_chat, fake_hub, tmp_path):
    chat, size = hub_chat
    repo = f"web-org/tiny-{size}-GGUF"
    data = tiny_gguf(tmp_path / FILE, megabytes=3)
    fake_hub.repos[repo] = HubRepo({FILE: HubFile(data, stall_after=MB)})
    page = chat.page
    chat.show_sidebar()
    page.click("#model-pull summary")
    page.fill("#pull-repo", repo)
    page.click("#pull-start")
    status = page.locator("#pull-status")
    expect(status).to_have_text(f"Downloading {FILE}: 1.0 of {len(data) / 1e6:.1f} MB")
    expect(page.locator("#pull-progress")).to_be_visible()
    assert 0.3 < page.eval_on_selector("#pull-progress", "p => p.value") < 0.4
    expect(page.locator("#pull-start")).to_be_disabled()

    fake_hub.repos[repo].files[FILE].stall_after = None
    fake_hub.repos[repo].files[FILE].released.set()
    expect(status).to_have_text(f"{FILE} is here: choose it in the Model list")
    expect(page.locator("#pull-progress")).to_be_hidden()
    expect(page.locator("#pull-repo")).to_have_value("")
    option = page.locator(f'#model option[value*="/models--web-org--tiny-{size}-GGUF/"]')
    expect(option).to_have_count(1)
    expect(option).to_have_text("tiny.Q4_K_M")


def test_a_pull_that_fails_says_why_and_keeps_what_was_typed(hub_chat, fake_hub, tmp_path):
    chat, size = hub_chat
    repo = f"web-org/gated-{size}-GGUF"
    fake_hub.repos[repo] = HubRepo({FILE: HubFile(b"GGUF")}, gated=True)
    chat.show_sidebar()
    chat.page.click("#model-pull summary")
    chat.page.fill("#pull-repo", repo)
    chat.page.press("#pull-repo", "Enter")
    status = chat.page.locator("#pull-status")
    expect(status).to_contain_text(f"Could not pull {repo}: {repo} is gated: accept its conditions on")
    expect(status).to_have_class("error")
    expect(chat.page.locator("#pull-repo")).to_have_value(repo)
