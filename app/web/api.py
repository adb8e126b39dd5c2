"""The JSON API under /api/v1: the same data the pages show, for bots and CI jobs."""

from datetime import UTC, datetime

from fastapi import APIRouter, HTTPException, Path, Query, Response
from sqlmodel import Session

from app import storage
from app.catalog import Overview, TagPage, get_overview, get_tag_page
from app.entry_details import EntryDetails, get_entry_details
from app.search_index import read_state
from app.web.deps import SearchDep, SessionDep, SettingsDep

router = APIRouter(prefix="/api/v1", tags=["api"])


def health_data(session: Session, settings) -> dict:
    state = read_state(settings.index_dir)
    seq = storage.current_change_seq(session)
    index = None
    if state is not None:
        built = datetime.fromisoformat(state.updated_at)
        index = {
            "seq": state.seq,
            "built_at": state.built_at,
            "updated_at": state.updated_at,
            "age_seconds": round((datetime.now(UTC) - built).total_seconds(), 1),
            "behind": max(0, seq - state.seq),
        }
    return {
        "status": "ok" if index is not None else "degraded",
        "entries": storage.count_entries(session),
        "change_seq": seq,
        "index": index,
    }


@router.get("/health", summary="Liveness and freshness: entry count, change sequence, index age")
def health(session: SessionDep, settings: SettingsDep) -> dict:
    return health_data(session, settings)


@router.get("/overview", summary="What the home page shows: counts by kind and tag, recent entries")
def overview(session: SessionDep, service: SearchDep) -> Overview:
    return get_overview(session, service)


@router.get("/tags/{tag}", summary="The entries with one tag")
def tag(tag: str, service: SearchDep) -> TagPage:
    return get_tag_page(service, tag)


@router.get("/search", summary="Full-text search over the entries")
def search(
    service: SearchDep,
    settings: SettingsDep,
    q: str = Query(
        "",
        description="Words, an error message or an identifier; empty lists every entry",
        max_length=2000,
        examples=["batches tracked", "torch.cuda.FloatTensor", "显存"],
    ),
    kind: str | None = Query(None, description="Only entries of this kind", examples=["error"]),
    tag: str | None = Query(
        None, description="Only entries with this tag", examples=["checkpoint"]
    ),
    page: int = Query(1, ge=1),
    limit: int | None = Query(None, ge=1, le=200),
) -> dict:
    result = service.search(
        q, kind=kind, tag=tag, page=page, limit=limit or settings.search_page_size
    )
    return result.to_dict()


@router.get(
    "/entries/{entry_id}",
    summary="One entry with its rendered HTML and Markdown source",
    description="The `ETag` header carries the entry's revision.",
)
def entry(
    session: SessionDep,
    response: Response,
    entry_id: str = Path(description="The entry's id", examples=["view-non-contiguous"]),
) -> EntryDetails:
    details = get_entry_details(session, entry_id)
    if details is None:
        raise HTTPException(404, f"no entry with id {entry_id!r}")
    response.headers["ETag"] = f'"{details.revision}"'
    return details
