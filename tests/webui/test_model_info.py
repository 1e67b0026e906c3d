"""The model's info in the web UI (GET /health's sampling and kv_cache): what a reply samples with where its chat sets
nothing, and where those values come from; what the KV cache holds, in the server's one wording for every UI, never a
bare size. Under the Model list, and in the model chip's tooltip."""

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.slow  # headless chromium against a real `localchat serve`: left out of `./dev test --fast`


def test_the_model_info_says_sampling_and_the_kv_cache_in_a_users_terms(chat_at_both_sizes, api):
    health = api.get("/health").json()
    sampling, kv_cache = health["sampling"], health["kv_cache"]
    page = chat_at_both_sizes.page
    chat_at_both_sizes.show_sidebar()
    info = page.locator("#model-info")
    expect(info.locator("dl")).to_be_hidden()  # quiet until asked for
    info.locator("summary").click()
    expect(info.locator("dl")).to_be_in_viewport()
    shown = dict(zip(info.locator("dt").all_inner_texts(), info.locator("dd").all_inner_texts(), strict=True))
    assert shown.keys() == {"Samples at", "Forks sample at", "KV cache"}
    assert shown["KV cache"] == kv_cache["summary"]
    said = shown["Samples at"]
    assert said.startswith(f"temperature {sampling['temperature']:g}") and said.endswith(f" — {sampling['source']}")
    if sampling["top_p"] < 1:
        assert f"top_p {sampling['top_p']:g}" in said
    assert shown["Forks sample at"].startswith(f"temperature {sampling['fork_temperature']:g} at least")
    text = page.locator("body").inner_text()
    assert text.count("GiB") == text.count(kv_cache["summary"]) == 1  # no size said without what it holds

    title = page.locator("#chat-summary .model-chip").get_attribute("title")
    assert f"Samples at: {said}" in title and f"KV cache: {kv_cache['summary']}" in title
