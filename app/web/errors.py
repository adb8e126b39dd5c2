"""One error shape: JSON `{"error": {"status", "message"}}` under /api, an HTML page elsewhere."""

import logging
from http import HTTPStatus

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from app.errors import PitfallsError
from app.storage import database_problem
from app.web.auth import TOKEN_REQUIRED, LoginRequired, login_url
from app.web.middleware.headers import add_security_headers
from app.web.middleware.twins import route_path
from app.web.runtime import runtime_of

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
    templates = runtime_of(request).templates
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
        headers = dict(exc.headers) if exc.headers else None
        return error_response(request, exc.status_code, message, headers=headers)

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

    @app.exception_handler(PitfallsError)
    async def _refused(request: Request, exc: PitfallsError) -> Response:
        """Every domain error: its status (a page's own, where it has one), its message, the
        fields and headers it carries. A page's GET that needs a login goes to the form."""
        wants_json = _wants_json(request)
        if isinstance(exc, LoginRequired):
            if wants_json:
                return error_response(
                    request, 401, TOKEN_REQUIRED, headers={"WWW-Authenticate": "Bearer"}
                )
            if request.method in ("GET", "HEAD"):
                return RedirectResponse(login_url(request), status_code=303)
        status = exc.status if wants_json or exc.page_status is None else exc.page_status
        headers = exc.headers()
        return error_response(
            request, status, exc.message, exc.extra(), headers=dict(headers) if headers else None
        )

    @app.exception_handler(ClientDisconnect)
    async def _gone(request: Request, exc: ClientDisconnect) -> Response:
        logger.info("client went away during %s %s", request.method, request.url.path)
        return Response(status_code=499)
