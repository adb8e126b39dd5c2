"""The operator's routes: Prometheus metrics, and the API's docs served from local files.

/docs loads Swagger UI 5 from the `swagger-ui-py` package's files under /static/swagger-ui,
never from a CDN: it works on an air-gapped cluster, under the same Content-Security-Policy as
every other page (its start-up code is a static file, not an inline script).
"""

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from app import metrics
from app.web.api import health_data
from app.web.auth import read_access
from app.web.deps import SearchDep, SessionDep, SettingsDep

router = APIRouter(include_in_schema=False)


@router.get("/metrics", dependencies=[Depends(read_access)])
def prometheus_metrics(session: SessionDep, settings: SettingsDep, search: SearchDep) -> Response:
    health = health_data(session, settings, search)
    if health["entries"] is not None:  # None while the database cannot be reached
        metrics.ENTRIES.set(health["entries"])
        metrics.CHANGE_SEQ.set(health["change_seq"])
    if health["index"] is not None:
        if health["index"]["behind"] is not None:
            metrics.INDEX_LAG.set(health["index"]["behind"])
        metrics.INDEX_AGE.set(health["index"]["age_seconds"])
    return Response(generate_latest(metrics.REGISTRY), media_type=CONTENT_TYPE_LATEST)


@router.get("/docs", response_class=HTMLResponse)
def api_docs(request: Request) -> HTMLResponse:
    return request.app.state.templates.TemplateResponse(request, "docs.html", {})
