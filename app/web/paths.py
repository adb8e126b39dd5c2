"""Paths on this site, wherever it is served: at the top of a host, or under a proxy's sub-path.

Every link, redirect and `Location` the app writes is a path relative to the host (never
`http://host/…` built from the request, which an HTTPS proxy would turn into mixed content),
prefixed with the root path the app is served under.
"""

from fastapi import Request
from fastapi.responses import RedirectResponse


def root_of(request: Request) -> str:
    return request.scope.get("root_path", "").rstrip("/")


def site_path(request: Request, path: str) -> str:
    """`path` (starting with /, relative to the app) as the browser must ask for it."""
    return root_of(request) + path


def app_path(request: Request) -> str:
    """The request's own path relative to the app (without the root path), with its query."""
    path = request.url.path
    root = root_of(request)
    if root and (path == root or path.startswith(root + "/")):
        path = path[len(root) :] or "/"
    return path + (f"?{request.url.query}" if request.url.query else "")


def see_other(request: Request, path: str) -> RedirectResponse:
    return RedirectResponse(site_path(request, path), status_code=303)


def public_base(request: Request) -> str:
    """The site's address for ids and links that leave the site (Atom, OpenSearch): the
    configured public URL, else the request's own (scheme and host as a trusted proxy gave
    them, with the root path)."""
    configured = request.app.state.settings.public_url
    if configured:
        return configured
    return str(request.base_url).rstrip("/")
