"""/api/documents: upload a file once (its text is read and kept), list the documents, delete one with its cached
KV blocks. A chat starts with documents (POST /api/conversations, "documents") or a message carries them."""

import asyncio
import time
from dataclasses import dataclass
from typing import Annotated

from litestar import Controller, delete, get, post
from litestar.datastructures import UploadFile
from litestar.di import NamedDependency
from litestar.enums import RequestEncodingType
from litestar.exceptions import HTTPException
from litestar.params import Body, FromPath

from localchat.app.protocol.documents import Document, DocumentText
from localchat.app.server.backends import BackendDep
from localchat.app.server.config import quoted
from localchat.app.server.conversations import Conversations
from localchat.app.server.documents import (
    MAX_DOCUMENT_BYTES,
    DocumentError,
    delete_file,
    kept_name,
    placed,
    read_document,
    save_file,
    system_with_documents,
)
from localchat.app.server.store import Store, new_id


@dataclass
class DocumentUpload:
    file: UploadFile  # the multipart form's field `file`


Upload = Annotated[DocumentUpload, Body(media_type=RequestEncodingType.MULTI_PART)]


class DocumentController(Controller):
    path = "/api/documents"

    @post("/", request_max_body_size=MAX_DOCUMENT_BYTES + 64 * 1024)
    async def upload(self, data: Upload, store: NamedDependency[Store], backend: BackendDep) -> Document:
        """A multipart upload (its file in the field `file`): plain text, Markdown, source code, HTML or PDF. Its text
        is read once and kept; `tokens` counts it as a prompt holds it. 413 over the size limit; 400 (or 415, for an
        image or a binary file) for a file without readable text or larger than the model's context."""
        name = kept_name(data.file.filename)
        content = await data.file.read()
        if len(content) > MAX_DOCUMENT_BYTES:
            raise HTTPException(status_code=413, detail=f"{quoted(name)} has {len(content):,} bytes: documents may "
                                                        f"have {MAX_DOCUMENT_BYTES:,} at most")
        try:
            media_type, text, empty_pages = await asyncio.to_thread(read_document, name, content)
        except DocumentError as error:
            raise HTTPException(status_code=error.status, detail=str(error)) from None
        tokens = await _tokens(backend, placed(name, text))
        limit = backend.max_model_len
        if tokens is not None and limit is not None and tokens >= limit:
            raise HTTPException(status_code=400, detail=f"{quoted(name)} has {tokens:,} tokens: more than the "
                                                        f"model's context of {limit:,} holds")
        document = Document(id=new_id("d"), name=name, media_type=media_type, chars=len(text),
                            tokens=tokens if tokens is not None else 0, created_at=time.time(),
                            empty_pages=empty_pages)
        save_file(document.id, content)
        return store.add_document(document, text)

    @get("/")
    async def list(self, store: NamedDependency[Store]) -> list[Document]:
        """Newest first."""
        return store.list_documents()

    @get("/{document_id:str}")
    async def read(self, document_id: FromPath[str], store: NamedDependency[Store]) -> DocumentText:
        """A document with the text that was read from it."""
        document, text = store.document(document_id)
        return DocumentText(document=document, text=text)

    @delete("/{document_id:str}")
    async def remove(self, document_id: FromPath[str], store: NamedDependency[Store],
                     conversations: NamedDependency[Conversations]) -> None:
        """Delete a document no conversation carries (409 names those that do), with its KV blocks (memory and
        disk) that no conversation shares."""
        document, text = store.document(document_id)
        users = store.document_users(document_id)
        if users:
            raise HTTPException(status_code=409, detail=f"{quoted(document.name)} is in {len(users)} conversation(s) "
                                                        f"({', '.join(users[:5])}): delete those first")
        await conversations.forget_text(system_with_documents("", [(document.name, text)]))
        store.delete_document(document_id)
        delete_file(document_id)


async def _tokens(backend, text: str) -> int | None:
    """The tokens of `text` for the model (None where the engine is another server's: its tokenizer is its own)."""
    if not backend.renders_templates:
        return None
    return len(await backend.tokenize(text))
