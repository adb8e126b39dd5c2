"""One error shape: JSON `{"error": {"status", "message"}}` under /api, an HTML page elsewhere."""

import logging
from http import HTTPStatus

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.catalog import NotFound
from app.search import IndexUnavailable

logger = logging.getLogger("pitfalls")


def _wants_json(request: Request) -> bool:
    return request.url.path.startswith("/api/")


def error_response(request: Request, status: int, message: str) -> Response:
    if _wants_json(request):
        return JSONResponse({"error": {"status": status, "message": message}}, status_code=status)
    templates = request.app.state.templates
    return templates.TemplateResponse(
        request,
        "error.html",
        {"status": status, "title": HTTPStatus(status).phrase, "message": message},
        status_code=status,
    )


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        message = exc.detail if isinstance(exc.detail, str) else HTTPStatus(exc.status_code).phrase
        return error_response(request, exc.status_code, message)

    @app.exception_handler(RequestValidationError)
    async def _bad_request(request: Request, exc: RequestValidationError) -> Response:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc'][1:])}: {error['msg']}"
            for error in exc.errors()
        )
        return error_response(request, 422, f"invalid request: {problems}")

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        logger.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(
            request, 500, "Something went wrong on our side; the error was logged."
        )

    @app.exception_handler(NotFound)
    async def _not_found(request: Request, exc: NotFound) -> Response:
        return error_response(request, 404, str(exc))

    @app.exception_handler(IndexUnavailable)
    async def _no_index(request: Request, exc: IndexUnavailable) -> Response:
        return error_response(request, 503, str(exc))
