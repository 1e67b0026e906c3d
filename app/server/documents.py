"""Documents: an uploaded file read once into text (plain text, Markdown, source code, HTML, PDF), and that text as
a prompt holds it, a block after the system prompt (a chat's documents) or before a message's text (a message's).

Two chats that start with the same documents (and system prompt) have the same prompt tokens up to their first
message, so the prefix cache serves the documents' KV blocks to the second, and the disk tier across restarts. The
file is data: its name is kept as text and never used as a path; what is kept on disk is under the data folder, named
by the document's id, readable by the user alone."""

import html.parser
import io
import json
import re
from pathlib import Path, PurePath

from localchat.app.paths import private_opener
from localchat.engine.loading.dirs import user_dir

MAX_DOCUMENT_BYTES = 16 * 1024 * 1024  # an upload; a larger one is refused (413)
MAX_NAME_CHARS = 200  # of a document's name, as kept
MARKDOWN_SUFFIXES = {".md", ".markdown", ".mdx", ".rst"}
HTML_SUFFIXES = {".html", ".htm", ".xhtml"}
SOURCE_SUFFIXES = {".py", ".js", ".ts", ".tsx", ".jsx", ".c", ".h", ".cc", ".cpp", ".hpp", ".rs", ".go", ".java",
                   ".kt", ".swift", ".rb", ".php", ".cs", ".sh", ".sql", ".toml", ".yaml", ".yml", ".json", ".css",
                   ".lua", ".r", ".jl", ".scala", ".zig", ".ex", ".hs", ".ml", ".m", ".pl", ".ps1", ".ini", ".cfg"}
IMAGE_SIGNATURES = {b"\x89PNG\r\n\x1a\n": "image/png", b"\xff\xd8\xff": "image/jpeg", b"GIF87a": "image/gif",
                    b"GIF89a": "image/gif", b"BM": "image/bmp", b"II*\x00": "image/tiff", b"MM\x00*": "image/tiff"}


class DocumentError(ValueError):
    """An upload that cannot be read as a document; status: the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def read_document(name: str, data: bytes) -> tuple[str, str, list[int]]:
    """(media type, text, the pages without text) of an uploaded file; DocumentError for one that holds no text
    that can be read (an empty file, an image, a binary file, a broken or empty PDF)."""
    media_type, text, empty_pages = _read(name, data)
    if not text.strip():
        raise DocumentError(f"{json.dumps(name)} holds no text ({len(data):,} bytes): there is nothing to read")
    return media_type, text, empty_pages


def _read(name: str, data: bytes) -> tuple[str, str, list[int]]:
    shown = json.dumps(name)
    if data.startswith(b"%PDF"):
        return ("application/pdf", *_pdf_text(shown, data))
    image = next((kind for signature, kind in IMAGE_SIGNATURES.items() if data.startswith(signature)), None)
    if image is None and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        image = "image/webp"
    if image is not None:
        raise DocumentError(f"{shown} is an image ({image}): documents are text (plain text, Markdown, source code, "
                            "HTML or PDF)", 415)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise DocumentError(f"{shown} is neither UTF-8 text nor a PDF (a binary file?): documents are text (plain "
                            "text, Markdown, source code, HTML or PDF)", 415) from None
    if "\x00" in text:
        raise DocumentError(f"{shown} holds NUL characters (a binary file?): documents are text", 415)
    suffix = PurePath(name).suffix.lower()
    if suffix in HTML_SUFFIXES or re.match(r"\s*<(!doctype\s+html|html)", text[:200], re.IGNORECASE):
        return "text/html", _html_text(text), []
    kind = ("text/markdown" if suffix in MARKDOWN_SUFFIXES else "text/x-source" if suffix in SOURCE_SUFFIXES
            else "text/plain")
    return kind, text.replace("\r\n", "\n").strip(), []


def placed(name: str, text: str) -> str:
    """A document as a prompt holds it."""
    return f"<document name={json.dumps(name)}>\n{text.strip()}\n</document>"


def system_with_documents(system_prompt: str, documents: list[tuple[str, str]]) -> str:
    """A chat's system prompt, then its documents (name, text)."""
    return "\n\n".join([*([system_prompt] if system_prompt else []), *(placed(n, t) for n, t in documents)])


def message_with_documents(text: str, documents: list[tuple[str, str]]) -> str:
    """A message's documents (name, text), then its text."""
    return "\n\n".join([*(placed(n, t) for n, t in documents), text])


def kept_name(name: str) -> str:
    """An uploaded file's name as kept: its last part (a browser may send a path), without control characters."""
    name = re.split(r"[\\/]", name or "")[-1]
    name = "".join(ch for ch in name if ch.isprintable()).strip()
    return name[:MAX_NAME_CHARS] or "document"


def save_file(document_id: str, data: bytes) -> None:
    """The uploaded bytes, kept under the data folder by the document's id (mode 0600, in a 0700 folder)."""
    with open(files_dir() / document_id, "wb", opener=private_opener) as file:
        file.write(data)


def delete_file(document_id: str) -> None:
    (files_dir() / document_id).unlink(missing_ok=True)


def files_dir() -> Path:
    folder = user_dir("data") / "documents"
    folder.mkdir(mode=0o700, exist_ok=True)
    folder.chmod(0o700)
    return folder


def _pdf_text(shown: str, data: bytes) -> tuple[str, list[int]]:
    """A PDF's text, page after page (pypdf), and its pages without text."""
    import pypdf
    from pypdf.errors import PyPdfError

    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            raise DocumentError(f"{shown} is an encrypted PDF: save it without a password and upload it again")
        pages = [page.extract_text() or "" for page in reader.pages]
    except DocumentError:
        raise
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError) as error:
        raise DocumentError(f"{shown} is not a readable PDF ({type(error).__name__}: {error})") from None
    empty = [number for number, text in enumerate(pages, 1) if not text.strip()]
    if len(empty) == len(pages):
        raise DocumentError(f"{shown} is a PDF of {len(pages)} page(s) without text (scanned images?): there is "
                            "nothing to read")
    return "\n\n".join(text.strip() for text in pages if text.strip()), empty


class _HTMLText(html.parser.HTMLParser):
    """The text of an HTML page: what it shows, blocks on lines of their own, without scripts and styles."""

    BLOCKS = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section", "article", "pre",
              "blockquote", "table", "ul", "ol", "header", "footer", "title"}
    HIDDEN = {"script", "style", "noscript", "template", "head"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.hidden = 0

    def handle_starttag(self, tag, attrs):
        if tag in self.HIDDEN:
            self.hidden += 1
        elif tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag):
        if tag in self.HIDDEN:
            self.hidden = max(0, self.hidden - 1)
        elif tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data):
        if not self.hidden:
            self.parts.append(data)


def _html_text(page: str) -> str:
    parser = _HTMLText()
    parser.feed(page)
    parser.close()
    lines = (" ".join(line.split()) for line in "".join(parser.parts).splitlines())
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
