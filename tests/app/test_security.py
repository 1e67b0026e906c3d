"""The engine process's defences, on a real `localchat serve`: Host check, API token, login URL cookie,
Origin check, token file mode."""

import stat

import httpx
import pytest

pytestmark = pytest.mark.slow  # a real `localchat serve`: left out of `./dev test --fast`


@pytest.fixture
def anonymous(server):
    with httpx.Client(base_url=server.url, timeout=30) as client:
        yield client


@pytest.mark.parametrize("path", ["/health", "/metrics", "/v1/models", "/api/conversations"])
def test_a_foreign_host_header_is_refused(server, anonymous, path):
    response = anonymous.get(path, headers={"Host": "attacker.example:8741",
                                            "Authorization": f"Bearer {server.token}"})
    assert response.status_code == 403
    assert "Host" in response.json()["error"]["message"]


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "localhost:1234", "[::1]:8741"])
def test_loopback_host_names_are_served(anonymous, host):
    assert anonymous.get("/health", headers={"Host": host}).status_code == 200


@pytest.mark.parametrize("path", ["/v1/models", "/api/conversations"])
def test_no_or_a_wrong_token_gets_401(anonymous, path):
    missing = anonymous.get(path)
    assert missing.status_code == 401 and "token" in missing.json()["error"]["message"]
    assert missing.headers["www-authenticate"].startswith("Bearer")
    assert anonymous.get(path, headers={"Authorization": "Bearer not-the-token"}).status_code == 401
    assert anonymous.post("/v1/chat/completions", json={}).status_code == 401


def test_health_and_metrics_need_no_token(anonymous):
    assert anonymous.get("/health").json()["status"] == "ready"
    assert "localchat_kv_blocks_used" in anonymous.get("/metrics").text


def test_the_token_file_is_private(server):
    path = server.home / "config" / "token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(server.token) >= 32


def login(server, anonymous) -> httpx.Cookies:
    with server.client() as api:
        code = api.post("/api/auth/login-code")
    assert code.status_code == 201
    url = code.json()["url"]
    assert url.startswith(f"{server.url}/auth?code=")
    response = anonymous.get(url)
    assert response.status_code == 303 and response.headers["location"] == "/"
    set_cookie = response.headers["set-cookie"].lower()
    assert "httponly" in set_cookie and "samesite=strict" in set_cookie
    assert anonymous.get(url).status_code == 403  # the link works once
    return response.cookies


def test_the_login_url_sets_a_cookie_that_passes_same_origin_requests_only(server, anonymous):
    cookies = login(server, anonymous)
    browser = httpx.Client(base_url=server.url, cookies=cookies, timeout=30)
    with browser:
        assert browser.get("/api/conversations").status_code == 200  # reads need no Origin
        own = {"Origin": server.url}
        created = browser.post("/api/conversations", json={"title": "from the browser"}, headers=own)
        assert created.status_code == 201
        cid = created.json()["id"]
        for origin in ({"Origin": "http://evil.example"}, {"Origin": "null"}, {}):
            refused = browser.post("/api/conversations", json={"title": "csrf"}, headers=origin)
            assert refused.status_code == 403, origin
            assert "cross-origin" in refused.json()["error"]["message"]
            assert browser.delete(f"/api/conversations/{cid}", headers=origin).status_code == 403
        assert browser.post("/v1/chat/completions", json={}, headers={"Origin": "http://evil.example"}
                            ).status_code == 403
        assert browser.delete(f"/api/conversations/{cid}", headers=own).status_code == 204


def test_a_bad_login_code_is_refused(anonymous):
    refused = anonymous.get("/auth", params={"code": "guessed"})
    assert refused.status_code == 403 and refused.headers["content-type"].startswith("text/html")
    assert "localchat web" in refused.text and "Content-Security-Policy" in refused.headers
    assert anonymous.get("/auth").status_code == 400
