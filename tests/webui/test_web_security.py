"""What a browser page may do: nothing without the login cookie; nothing from another origin; and what the model
or a user writes is shown as text, never run as HTML."""

import functools
import http.server
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import expect
from webui_page import BACKGROUNDS, FAST, assert_fits, new_page

from support import free_port, stream_api

pytestmark = pytest.mark.slow  # headless chromium against a real `localchat serve`: left out of `./dev test --fast`

SIGNIN_FAILED = Path(__file__).parents[2] / "webui" / "static" / "signin-failed.html"
INJECTION = '<script>window.injected = 1</script><img src="x" onerror="window.injected = 2"> hello'


def test_localchat_web_prints_a_login_url_that_works_once(browser, page, server):
    result = server.run_cli("web", "--print")
    assert result.returncode == 0, result.stderr
    url = result.stdout.strip()
    assert url.startswith(f"{server.url}/auth?code=")
    page.goto(url)
    expect(page.locator("#app")).to_be_visible()
    assert page.url == server.url + "/"  # the code is gone from the address bar
    cookie, = page.context.cookies()
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert page.evaluate("document.cookie") == ""  # the page's scripts cannot read the token

    other = browser.new_context()
    try:
        response = other.new_page().goto(url)  # a second use of the same link
        assert response.status == 403
        assert other.cookies() == []
    finally:
        other.close()


def expect_the_signin_failed_page(page) -> None:
    notice = page.locator("#signin-failed")
    expect(notice.locator("h1")).to_have_text("This login link no longer works")
    expect(notice).to_contain_text("It was used already, or it has expired: a login link works once, and for two "
                                   "minutes.")
    expect(notice.locator("code")).to_have_text(["localchat web", "localchat web --print"])


@pytest.mark.parametrize("color_scheme", ["light", "dark"])
def test_the_page_of_a_used_login_link_says_what_to_run(browser, server, color_scheme):
    source = SIGNIN_FAILED.read_text()
    assert not re.search(r"<script|<style|\sstyle=|\son\w+=", source)  # nothing the CSP would block
    with new_page(browser, 390, 844, color_scheme=color_scheme) as page:
        page.goto(f"{server.url}/static/signin-failed.html")
        expect_the_signin_failed_page(page)
        assert page.evaluate("getComputedStyle(document.body).backgroundColor") == BACKGROUNDS[color_scheme]
        assert_fits(page)


def test_a_used_login_link_answers_with_that_page(page, server):
    response = page.goto(f"{server.url}/auth?code=used-or-expired")
    assert response.status == 403
    if not response.headers["content-type"].startswith("text/html"):
        pytest.skip("the server still answers a used login link with JSON")
    assert response.headers["content-security-policy"].startswith("default-src 'self'")
    expect_the_signin_failed_page(page)


def test_without_the_login_url_the_page_gets_no_data(page, server, api):
    api.post("/api/conversations", json={"title": "a private chat"})
    page.goto(server.url + "/")
    expect(page.locator("#signed-out")).to_be_visible()
    expect(page.locator("#app")).to_be_hidden()
    assert "a private chat" not in page.content()
    status = page.evaluate("fetch('/api/conversations').then(r => r.status)")
    assert status == 401


@pytest.fixture
def other_origin(tmp_path) -> Iterator[str]:
    """A second local web server (another port of 127.0.0.1: same site, other origin) with one page."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    handler.log_message = lambda *args: None
    port = free_port()
    site = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    threading.Thread(target=site.serve_forever, daemon=True).start()
    yield tmp_path, f"http://127.0.0.1:{port}"
    site.shutdown()
    site.server_close()


def test_a_page_of_another_origin_can_neither_read_nor_write(chat, other_origin, api):
    folder, origin = other_origin
    api_url = chat.server.url
    (folder / "attack.html").write_text(f"""<!doctype html><script>
    const api = "{api_url}/api/conversations";
    async function attempt(name, request) {{
        try {{
            const response = await request();
            return [name, response.type === "opaque" ? "opaque" : await response.text()];
        }}
        catch (error) {{ return [name, "failed: " + error]; }}
    }}
    Promise.all([
        attempt("read", () => fetch(api, {{credentials: "include"}})),
        attempt("post json", () => fetch(api, {{method: "POST", credentials: "include",
            headers: {{"Content-Type": "application/json"}}, body: JSON.stringify({{title: "attack json"}})}})),
        attempt("post simple", () => fetch(api, {{method: "POST", credentials: "include", mode: "no-cors",
            headers: {{"Content-Type": "text/plain"}}, body: JSON.stringify({{title: "attack simple"}})}})),
    ]).then(results => {{ window.results = Object.fromEntries(results); }});
    </script>""")
    before = api.get("/api/conversations").json()
    # the browser holds the login cookie (chat signed in), and sends it to the API from this same-site page
    chat.page.goto(f"{origin}/attack.html")
    results = chat.page.wait_for_function("window.results").json_value()
    assert results["read"].startswith("failed"), results  # CORS: no Access-Control-Allow-Origin
    assert results["post json"].startswith("failed"), results  # the preflight is refused
    assert results["post simple"] == "opaque", results  # sent, but refused by the Origin check:
    after = api.get("/api/conversations").json()
    assert [c["id"] for c in after] == [c["id"] for c in before]
    assert not any(c["title"].startswith("attack") for c in after)


def test_the_markdown_renderer_writes_html_as_text(page, server):
    page.goto(server.url + "/")
    source = "\n".join([
        INJECTION,
        "# " + INJECTION,
        "- **" + INJECTION + "**",
        "`" + INJECTION + "`",
        "[click](javascript:window.injected=3) [ok](https://example.org)",
        "```html",
        INJECTION,
        "```",
    ])
    result = page.evaluate("""async (source) => {
        const { renderMarkdown } = await import('/static/markdown.js');
        const box = document.createElement('div');
        box.append(renderMarkdown(source));
        document.body.append(box);
        return { text: box.textContent, html: box.innerHTML,
                 elements: [...box.querySelectorAll('*')].map(e => e.tagName.toLowerCase()),
                 links: [...box.querySelectorAll('a')].map(a => a.href),
                 injected: window.injected ?? null };
    }""", source)
    assert "script" not in result["elements"] and "img" not in result["elements"], result["elements"]
    assert {"h1", "li", "strong", "code", "pre", "a"} <= set(result["elements"])
    assert result["text"].count("<script>window.injected = 1</script>") == 5
    assert result["text"].count('<img src="x" onerror="window.injected = 2">') == 5
    assert result["links"] == ["https://example.org/"]
    assert "[click](javascript:window.injected=3)" in result["text"]
    assert result["injected"] is None


def test_a_stored_message_with_html_shows_as_text(chat, api):
    conversation = api.post("/api/conversations", json={"settings": {**FAST, "max_tokens": 4}}).json()
    events = stream_api(api, f"/api/conversations/{conversation['id']}/messages", {"content": INJECTION})
    assert events[-1]["type"] == "done"
    chat.open(conversation["id"])
    user = chat.page.locator("#thread .message.user .content")
    expect(user).to_have_text(INJECTION)
    title = chat.stored()["conversation"]["title"]  # named by the message
    assert INJECTION.startswith(title.rstrip("…"))
    expect(chat.page.locator("#chats li.current .title")).to_have_text(title)
    expect(chat.page.locator("#chat-title")).to_have_text(title)
    assert chat.page.locator("#app img, #app script").count() == 0
    assert chat.page.evaluate("window.injected ?? null") is None
