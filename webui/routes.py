"""The web UI's routes: the page at `/` (where the one-time login URL lands) and its static files."""

from pathlib import Path

from litestar import Response, get
from litestar.datastructures import CacheControlHeader, ResponseHeader
from litestar.response import File
from litestar.static_files import create_static_files_router

STATIC_DIR = Path(__file__).parent / "static"

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
    return File(STATIC_DIR / "index.html", filename="index.html", content_disposition_type="inline", media_type="text/html")


def _nosniff(response: Response) -> Response:
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response


static_files = create_static_files_router(path="/static", directories=[STATIC_DIR], cache_control=NO_CACHE,
                                          after_request=_nosniff)

route_handlers = [index, static_files]
