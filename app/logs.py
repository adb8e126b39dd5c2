"""How the server logs: a level, plain text or one JSON object per line, and the request id.

`pitfalls serve` hands `log_config(settings)` to uvicorn, so uvicorn's own lines and the app's
share one format. Every record made while a request runs carries its id (see
app.web.middleware.observe); the access line is the app's own, with the id, not uvicorn's.
"""

import json
import logging
from datetime import UTC, datetime

from app.settings import Settings

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, request id, and any extras."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_") and key != "color_message":
                data[key] = value if isinstance(value, str | int | float | bool) else str(value)
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, ensure_ascii=False)


def log_config(settings: Settings) -> dict:
    level = settings.log_level.upper()
    if settings.log_format == "json":
        formatter = {"()": "app.logs.JsonFormatter"}
    else:
        formatter = {"format": "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"}
    handler = {
        "class": "logging.StreamHandler",
        "formatter": "main",
        "filters": ["request_id"],
        "stream": "ext://sys.stderr",
    }
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"request_id": {"()": "app.web.middleware.observe.RequestIdFilter"}},
        "formatters": {"main": formatter},
        "handlers": {"main": handler},
        "loggers": {
            "uvicorn": {"handlers": ["main"], "level": level, "propagate": False},
            "uvicorn.access": {"handlers": [], "level": "WARNING", "propagate": False},
            "pitfalls": {"handlers": ["main"], "level": level, "propagate": False},
            "app": {"handlers": ["main"], "level": level, "propagate": False},
        },
        "root": {"handlers": ["main"], "level": "WARNING"},
    }
