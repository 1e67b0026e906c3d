"""The web UI's routes in process (no browser, no engine): the page, its static files from a fixed list, and
the page a used login link lands on."""

import pytest
from litestar.testing import TestClient

from localchat.app.server.app import create_app
from localchat.app.server.config import ServerConfig
from localchat.app.server.remote_backend import RemoteBackend
from localchat.app.server.store import Store
from localchat.webui.routes import STATIC_FILES
from support import free_port


@pytest.fixture
def client(tmp_path):
    """In process and synchronous: the browser tests' Playwright keeps an event loop on this thread."""
    app = create_app(ServerConfig(port=8741), backend=RemoteBackend(f"http://127.0.0.1:{free_port()}"),
                     store=Store(tmp_path / "app.db"), token="t")
    with TestClient(app, base_url="http://127.0.0.1:8741") as client:
        yield client


def test_the_page_and_its_files_are_served_with_a_strict_policy(client):
    page = client.get("/")
    assert page.status_code == 200 and "script-src 'self'" in page.headers["content-security-policy"]
    for name in STATIC_FILES:
        response = client.get(f"/static/{name}")
        assert response.status_code == 200 and response.headers["x-content-type-options"] == "nosniff"
    assert (client.get("/static/app.js")).headers["content-type"].startswith("text/javascript")


@pytest.mark.parametrize("path", ["/static/%00", "/static/index.html/x", "/static/.", "/static/..%2Froutes.py",
                                  "/static/__init__.py", "/static/nothing.js"])
def test_no_other_path_reaches_the_file_system(client, path):
    response = client.get(path)
    assert response.status_code == 404
    assert "webui" not in response.text and "site-packages" not in response.text


def test_a_used_login_link_shows_a_page_that_says_what_to_run(client):
    response = client.get("/auth", params={"code": "used-or-expired"})
    assert response.status_code == 403 and response.headers["content-type"].startswith("text/html")
    assert "localchat web" in response.text and "default-src 'self'" in response.headers["content-security-policy"]
