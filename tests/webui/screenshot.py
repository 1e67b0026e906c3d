"""Takes docs/webui.png and docs/webui-phone.png: the web UI's main screen with a branched chat on a desktop and on
a phone, against a real `localchat serve` on the embedded model.

    .venv/bin/python tests/webui/screenshot.py
"""

import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
os.environ.setdefault("LOCALCHAT_HOME", tempfile.mkdtemp(prefix="localchat-screenshot-"))
sys.path[:0] = [str(HERE), str(HERE.parent)]

from playwright.sync_api import expect, sync_playwright  # noqa: E402
from webui_page import ChatPage, launch_chromium, new_page  # noqa: E402

from support import Server, make_home  # noqa: E402

DOCS = HERE.parents[1] / "docs"
DESKTOP, PHONE = (1440, 900), (390, 844)
OTHER_CHATS = ["Plan a weekend in Lisbon", "Explain paged attention", "Regex for ISO dates"]


def main() -> None:
    cache = Path(os.environ["LOCALCHAT_HOME"]) / "cache"  # the test runs' converted models, where there are some
    cache.mkdir(parents=True, exist_ok=True)
    kept_models = HERE.parents[1] / ".test-cache" / "models"
    if kept_models.is_dir() and not (cache / "models").exists():
        (cache / "models").symlink_to(kept_models)
    server = Server(make_home(Path(os.environ["LOCALCHAT_HOME"]) / "serve")).start()
    try:
        with server.client() as api, sync_playwright() as playwright:
            browser = launch_chromium(playwright)
            DOCS.mkdir(exist_ok=True)
            for title in OTHER_CHATS:
                api.post("/api/conversations", json={"title": title})
            with new_page(browser, *DESKTOP) as page:
                chat = ChatPage(page, server, api).sign_in()
                conversation_id = chat.create_chat(temperature=0.7, max_tokens=48, seed=None)
                chat.send("What is a KV cache, in two sentences?")
                chat.wait_replies()
                chat.messages.last.locator("button.regenerate").click()  # a second branch: the switcher shows 2/2
                chat.wait_replies()
                chat.send("Write a Python function that reverses a string.")
                chat.wait_replies()
                page.click("#toggle-branches")
                expect(page.locator("#branches .node.active")).to_have_count(4)
                page.mouse.move(0, DESKTOP[1] - 1)  # no hover effects
                page.screenshot(path=str(DOCS / "webui.png"))
            with new_page(browser, *PHONE) as page:  # the same chat, scrolled to its end
                ChatPage(page, server, api).sign_in().open(conversation_id)
                page.locator("#message").blur()
                page.screenshot(path=str(DOCS / "webui-phone.png"))
            browser.close()
    finally:
        server.stop()
    print(DOCS / "webui.png", DOCS / "webui-phone.png")


if __name__ == "__main__":
    main()
