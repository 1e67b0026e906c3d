"""Documents through the server: read once (text, Markdown, HTML, PDF made here), chats that start with the same
document sharing its KV blocks (in memory, and from the disk tier after a restart), a message carrying one, and the
bad inputs (too big, an image, a broken PDF, a document larger than the context, a path for a name)."""

import stat

import pytest

from support import SMALL_CONTEXT, Server, make_home, stream_api

pytestmark = pytest.mark.slow  # real `localchat serve` processes: left out of `./dev test --fast`

LINES = [f"Entry {n}: the mill by the river ground {n * 7} sacks of wheat in the year {1850 + n}, and the miller "
         f"wrote down the price of bread, which was {n % 9 + 2} pence." for n in range(40)]
TEXT = "\n".join(LINES)  # about 1,900 tokens: more than a small context holds
# the chats' document, about 550 tokens (35 KV blocks): a prefill of a second on the CPU, where TEXT's takes five
DOCUMENT = "\n".join(LINES[:12])


def make_pdf(lines: list[str]) -> bytes:
    """A one-page PDF whose text is `lines` (Helvetica, one line each), its offsets exact."""
    escaped = (line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") for line in lines)
    text = "BT /F1 6 Tf 8 TL 20 820 Td " + " ".join(f"({line}) Tj T*" for line in escaped) + " ET"
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 842] /Resources << /Font << /F1 5 0 R >> >> "
               b"/Contents 4 0 R >>",
               b"<< /Length %d >>\nstream\n%s\nendstream" % (len(text), text.encode("latin-1")),
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def upload(api, name: str, content: bytes):
    return api.post("/api/documents", files={"file": (name, content)})


def first_reply(api, conversation: str, content: str = "What did the miller write down?", **body) -> dict:
    events = stream_api(api, f"/api/conversations/{conversation}/messages",
                        {"content": content, "settings": {"temperature": 0.0, "max_tokens": 8}, **body})
    return next(e["message"] for e in events if e["type"] == "done")


def test_a_text_file_and_a_pdf_of_it_give_the_same_text(api):
    text_file = upload(api, "mill.txt", TEXT.encode())
    assert text_file.status_code == 201, text_file.text
    pdf = upload(api, "mill.pdf", make_pdf(LINES))
    assert pdf.status_code == 201, pdf.text
    read = {d["media_type"]: api.get(f"/api/documents/{d['id']}").json()["text"]
            for d in (text_file.json(), pdf.json())}
    assert read["text/plain"] == read["application/pdf"] == TEXT
    assert text_file.json()["tokens"] == pdf.json()["tokens"] > 1000
    assert text_file.json()["chars"] == len(TEXT) and pdf.json()["empty_pages"] == []
    listed = [d["id"] for d in api.get("/api/documents").json()]
    assert pdf.json()["id"] in listed and text_file.json()["id"] in listed


def test_html_and_markdown_are_read_as_their_text(api):
    page = b"<!doctype html><html><head><title>t</title><style>p{}</style></head><body><h1>Mill</h1>" \
           b"<p>It ground <b>wheat</b>.</p><script>x()</script></body></html>"
    document = upload(api, "mill.html", page).json()
    assert document["media_type"] == "text/html"
    assert api.get(f"/api/documents/{document['id']}").json()["text"] == "Mill\n\nIt ground wheat."
    assert upload(api, "notes.md", b"# Notes\n\n- one").json()["media_type"] == "text/markdown"


def test_a_second_chat_on_the_same_document_finds_it_cached(api):
    document = upload(api, "mill-cache.txt", DOCUMENT.encode()).json()
    chats = [api.post("/api/conversations", json={"documents": [document["id"]]}).json() for _ in range(2)]
    assert chats[0]["documents"] == [document["id"]]
    first, second = (first_reply(api, chat["id"]) for chat in chats)
    assert first["stats"]["prompt_tokens"] > document["tokens"]
    assert second["stats"]["cached_tokens"] >= 0.9 * document["tokens"]
    print(f"a second chat on a {document['tokens']}-token document: {second['stats']['cached_tokens']} of "
          f"{second['stats']['prompt_tokens']} prompt tokens cached (the first: {first['stats']['cached_tokens']})")
    tree = api.get(f"/api/conversations/{chats[1]['id']}").json()
    assert [d["id"] for d in tree["documents"]] == [document["id"]]


def test_a_message_carries_its_documents_before_its_text(api):
    document = upload(api, "mill-message.txt", DOCUMENT.encode()).json()
    conversation = api.post("/api/conversations", json={}).json()["id"]
    reply = first_reply(api, conversation, documents=[document["id"]])
    assert reply["stats"]["prompt_tokens"] > document["tokens"]
    user = next(m for m in api.get(f"/api/conversations/{conversation}").json()["messages"] if m["role"] == "user")
    assert user["documents"] == [document["id"]] and user["content"] == "What did the miller write down?"
    events = stream_api(api, f"/api/conversations/{conversation}/messages/{user['id']}/edit",
                        {"content": "And the price of bread?", "settings": {"temperature": 0.0, "max_tokens": 4}})
    edited = next(e["message"] for e in events if e["type"] == "user")
    assert edited["documents"] == [document["id"]]  # an edit keeps what the message carried
    edited_reply = next(e["message"] for e in events if e["type"] == "done")
    assert edited_reply["stats"]["cached_tokens"] >= 0.9 * document["tokens"]


def test_a_document_in_use_is_not_deleted_and_a_deleted_conversation_leaves_it(api):
    document = upload(api, "mill-kept.txt", DOCUMENT.encode()).json()
    conversation = api.post("/api/conversations", json={"documents": [document["id"]]}).json()["id"]
    first_reply(api, conversation)
    response = api.delete(f"/api/documents/{document['id']}")
    assert response.status_code == 409 and conversation in response.json()["error"]["message"]
    assert api.delete(f"/api/conversations/{conversation}").status_code == 204
    assert api.get(f"/api/documents/{document['id']}").status_code == 200  # the conversation's end is not its end
    assert api.delete(f"/api/documents/{document['id']}").status_code == 204
    assert api.get(f"/api/documents/{document['id']}").status_code == 404
    assert api.post("/api/conversations", json={"documents": [document["id"]]}).status_code == 404


@pytest.mark.parametrize("name, content, status, words", [
    ("photo.png", b"\x89PNG\r\n\x1a\n" + bytes(64), 415, "an image (image/png)"),
    ("tool.bin", bytes(range(256)) * 4, 415, "neither UTF-8 text nor a PDF"),
    ("broken.pdf", b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog", 400, "not a readable PDF"),
])
def test_unreadable_uploads_are_refused_with_their_type(api, name, content, status, words):
    response = upload(api, name, content)
    assert response.status_code == status and words in response.json()["error"]["message"]


def test_an_upload_over_the_size_limit_is_413(api):
    limit = api.get("/api/limits").json()["max_document_bytes"]
    response = upload(api, "huge.txt", b"a" * (limit + 1))
    assert response.status_code == 413


def test_a_name_is_data_and_the_file_is_private(api, server):
    document = upload(api, "../../etc/passwd", b"root:x:0:0").json()
    assert document["name"] == "passwd"
    folder = server.home / "data" / "documents"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    kept = folder / document["id"]
    assert kept.read_bytes() == b"root:x:0:0" and stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in folder.iterdir() if p.is_file())


def test_a_document_larger_than_the_context_names_both_sizes(small_context_server):
    with small_context_server.client() as api:
        response = upload(api, "long.txt", TEXT.encode())
    assert response.status_code == 400
    message = response.json()["error"]["message"]
    assert "tokens: more than the model's context of" in message and f"{SMALL_CONTEXT}" in message


def test_a_chat_after_a_restart_finds_the_document_on_disk(tmp_path):
    home = make_home(tmp_path / "restart-home")
    server = Server(home, args=["--kv-blocks", "256"]).start()
    try:
        with server.client() as api:
            document = upload(api, "mill-disk.txt", DOCUMENT.encode()).json()
            first_reply(api, api.post("/api/conversations", json={"documents": [document["id"]]}).json()["id"])
    finally:
        server.stop()
    server = Server(home, args=["--kv-blocks", "256"]).start()
    try:
        with server.client() as api:
            chat = api.post("/api/conversations", json={"documents": [document["id"]]}).json()["id"]
            reply = first_reply(api, chat)
    finally:
        server.stop()
    assert reply["stats"]["cached_tokens"] >= 0.9 * document["tokens"]
    print(f"after a restart: {reply['stats']['cached_tokens']} of {reply['stats']['prompt_tokens']} prompt tokens "
          f"cached from the disk tier ({document['tokens']}-token document)")


def test_a_chat_without_messages_may_be_set_to_start_from_documents(api):
    document = upload(api, "mill-patch.txt", DOCUMENT.encode()).json()
    conversation = api.post("/api/conversations", json={"system_prompt": ""}).json()["id"]  # the documents alone
    patched = api.patch(f"/api/conversations/{conversation}", json={"documents": [document["id"]]})
    assert patched.status_code == 200 and patched.json()["documents"] == [document["id"]]
    context = api.get(f"/api/conversations/{conversation}").json()["context"]
    assert document["tokens"] <= context["tokens"] <= document["tokens"] + 16  # the system message's frame too
    first_reply(api, conversation)
    late = api.patch(f"/api/conversations/{conversation}", json={"documents": []})
    assert late.status_code == 409 and "before its first message" in late.json()["error"]["message"]
