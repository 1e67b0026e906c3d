"""The web UI's routes: the page at `/` (where the one-time login URL lands) and its static files."""

from pathlib import Path

from litestar import Response, get
from litestar.datastructures import CacheControlHeader, ResponseHeader
from litestar.exceptions import NotFoundException
from litestar.params import FromPath
from litestar.response import File

STATIC_DIR = Path(__file__).parent / "static"
MEDIA_TYPES = {".js": "text/javascript", ".css": "text/css", ".html": "text/html"}
# the files served under /static: a fixed list, so that no request path ever reaches the file system
STATIC_FILES = {path.name: path for path in STATIC_DIR.iterdir() if path.suffix in MEDIA_TYPES}

# Everything comes from this server; no inline script or style, no plugins, no framing by other pages.
CONTENT_SECURITY_POLICY = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                           "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
                           "frame-ancestors 'none'")
SECURITY_HEADERS = {"Content-Security-Policy": CONTENT_SECURITY_POLICY, "X-Content-Type-Options": "nosniff",
                    "Referrer-Policy": "no-referrer"}
NO_CACHE = CacheControlHeader(no_cache=True)


@get("/", include_in_schema=False, cache_control=NO_CACHE,
     response_headers=[ResponseHeader(name=k, value=v) for k, v in SECURITY_HEADERS.items()])
async def index() -> File:
    """The app's one page; it holds no data: the scripts fetch /api with the login cookie."""
    return File(STATIC_DIR / "index.html", filename="index.html", content_disposition_type="inline",
                media_type="text/html")


@get("/static/{name:str}", include_in_schema=False, cache_control=NO_CACHE,
     response_headers=[ResponseHeader(name="X-Content-Type-Options", value="nosniff")])
async def static_file(name: FromPath[str]) -> File:
    path = STATIC_FILES.get(name)
    if path is None:
        raise NotFoundException(f"no static file {name!r}")
    return File(path, filename=name, content_disposition_type="inline", media_type=MEDIA_TYPES[path.suffix])


def signin_failed_page() -> Response:
    """The page a used or expired login link lands on (403): what happened and what to run."""
    return Response((STATIC_DIR / "signin-failed.html").read_bytes(), status_code=403, media_type="text/html",
                    headers=SECURITY_HEADERS)


route_handlers = [index, static_file]
