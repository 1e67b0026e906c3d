"""/api/documents: files read once (their text) that chats start from or messages carry."""

from msgspec import Struct


class Document(Struct, kw_only=True):
    id: str
    name: str  # the uploaded file's name, as given (data: never a path to anything)
    media_type: str  # what it was read as: text/plain, text/markdown, text/html, application/pdf, text/x-source
    chars: int  # of its text
    tokens: int  # of its text as it is placed in a prompt, by the model that read it
    created_at: float
    empty_pages: list[int] = []  # a PDF's pages (from 1) that hold no text (scans, images)


class DocumentText(Struct, kw_only=True):
    document: Document
    text: str  # as it was read, and as a prompt holds it (inside a <document> block)
