"""One error shape: JSON `{"error": {"status", "message"}}` under /api, an HTML page elsewhere."""

import logging
from http import HTTPStatus

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from app.accounts import AccountError
from app.catalog import NotFound
from app.search import IndexUnavailable, SearchTooSlow
from app.storage import database_problem
from app.web.auth import LoginRequired, login_url
from app.web.middleware.headers import add_security_headers
from app.web.middleware.twins import route_path
from app.wiki import EditConflict, SaveRefused

logger = logging.getLogger("pitfalls")


def _wants_json(request: Request) -> bool:
    # Under a proxy's sub-path too; a page's JSON twin reaches here as its API route.
    return route_path(request.scope).startswith("/api/")


def error_response(
    request: Request,
    status: int,
    message: str,
    extra: dict | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    if _wants_json(request):
        body = {"status": status, "message": message, **(extra or {})}
        return JSONResponse({"error": body}, status_code=status, headers=headers)
    templates = request.app.state.templates
    return templates.TemplateResponse(
        request,
        "error.html",
        {"status": status, "title": HTTPStatus(status).phrase, "message": message},
        status_code=status,
        headers=headers,
    )


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        message = exc.detail if isinstance(exc.detail, str) else HTTPStatus(exc.status_code).phrase
        return error_response(request, exc.status_code, message, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _bad_request(request: Request, exc: RequestValidationError) -> Response:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc'][1:])}: {error['msg']}"
            for error in exc.errors()
        )
        return error_response(request, 422, f"invalid request: {problems}")

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        problem = database_problem(exc)
        if problem is not None:  # the database is down, full or busy: the server's state
            logger.warning("%s %s: %s (%s)", request.method, request.url.path, problem, exc)
            response = error_response(request, 503, problem, headers={"Retry-After": "30"})
            return add_security_headers(response, request.url.path)
        logger.exception("unhandled error on %s %s", request.method, request.url.path)
        response = error_response(
            request, 500, "Something went wrong on our side; the error was logged."
        )
        # This handler answers outside the middleware that adds them to every other response.
        return add_security_headers(response, request.url.path)

    @app.exception_handler(OverflowError)
    async def _too_large_number(request: Request, exc: OverflowError) -> Response:
        return error_response(request, 422, "A number in the request is too large.")

    @app.exception_handler(NotFound)
    async def _not_found(request: Request, exc: NotFound) -> Response:
        return error_response(request, 404, str(exc))

    @app.exception_handler(LoginRequired)
    async def _login_required(request: Request, exc: LoginRequired) -> Response:
        if _wants_json(request):
            return error_response(
                request,
                401,
                "Authentication required: send 'Authorization: Bearer <token>' "
                "(create one with `pitfalls token create`).",
                headers={"WWW-Authenticate": "Bearer"},
            )
        if request.method in ("GET", "HEAD"):
            return RedirectResponse(login_url(request), status_code=303)
        return error_response(request, 401, "Log in first; nothing was saved.")

    @app.exception_handler(SaveRefused)
    async def _refused(request: Request, exc: SaveRefused) -> Response:
        problems = [
            {"line": p.line, "message": p.message, "severity": p.severity} for p in exc.problems
        ]
        return error_response(request, exc.status, str(exc), {"problems": problems})

    @app.exception_handler(EditConflict)
    async def _conflict(request: Request, exc: EditConflict) -> Response:
        # The API's edits are conditional requests (If-Match), hence 412 and the current ETag.
        status = 412 if _wants_json(request) else 409
        return error_response(
            request,
            status,
            str(exc),
            {"current_revision": exc.current},
            headers={"ETag": f'"{exc.current}"'},
        )

    @app.exception_handler(AccountError)
    async def _account_error(request: Request, exc: AccountError) -> Response:
        return error_response(request, 422, str(exc))

    @app.exception_handler(IndexUnavailable)
    async def _no_index(request: Request, exc: IndexUnavailable) -> Response:
        return error_response(request, 503, f"Search is unavailable for a moment: {exc}.")

    @app.exception_handler(SearchTooSlow)
    async def _slow_search(request: Request, exc: SearchTooSlow) -> Response:
        return error_response(request, 503, str(exc))

    @app.exception_handler(ClientDisconnect)
    async def _gone(request: Request, exc: ClientDisconnect) -> Response:
        logger.info("client went away during %s %s", request.method, request.url.path)
        return Response(status_code=499)

    @app.exception_handler(UnicodeError)
    async def _bad_text(request: Request, exc: UnicodeError) -> Response:
        return error_response(
            request,
            400,
            "The request holds text that is not valid Unicode (a lone surrogate such as "
            "\\ud800); send UTF-8 text.",
        )

    @app.exception_handler(RecursionError)
    async def _too_deep(request: Request, exc: RecursionError) -> Response:
        return error_response(request, 400, "The request is nested too deeply to read.")
