"""Takes docs/webui.png: the web UI's main screen with a branched chat, at a fixed viewport, against a real
`localchat serve` on the embedded model.

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
from webui_page import ChatPage, launch_chromium  # noqa: E402

from support import Server, make_home  # noqa: E402

OUTPUT = HERE.parents[1] / "docs" / "webui.png"
VIEWPORT = {"width": 1440, "height": 900}
OTHER_CHATS = ["Plan a weekend in Lisbon", "Explain paged attention", "Regex for ISO dates"]


def main() -> None:
    server = Server(make_home(Path(os.environ["LOCALCHAT_HOME"]) / "serve")).start()
    try:
        with server.client() as api, sync_playwright() as playwright:
            browser = launch_chromium(playwright)
            page = browser.new_page(viewport=VIEWPORT, color_scheme="light")
            chat = ChatPage(page, server, api)
            for title in OTHER_CHATS:
                api.post("/api/conversations", json={"title": title})
            chat.sign_in()
            chat.create_chat(temperature=0.7, max_tokens=48, seed=None)
            chat.send("What is a KV cache, in two sentences?")
            chat.wait_replies()
            chat.messages.last.locator("button.regenerate").click()  # a second branch: the switcher shows 2/2
            chat.wait_replies()
            chat.send("Write a Python function that reverses a string.")
            chat.wait_replies()
            page.click("#toggle-branches")
            expect(page.locator("#branches .node.active")).to_have_count(4)
            page.mouse.move(0, VIEWPORT["height"] - 1)  # no hover effects
            OUTPUT.parent.mkdir(exist_ok=True)
            page.screenshot(path=str(OUTPUT))
            browser.close()
    finally:
        server.stop()
    print(OUTPUT)


if __name__ == "__main__":
    main()
