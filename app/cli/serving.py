"""`pitfalls serve` and `pitfalls mcp`: the web app and API, and the MCP tools over stdio."""

import threading
import time
import urllib.error
import urllib.request

import click

from app.cli.group import _settings, cli


@cli.command()
@click.option("--server", metavar="URL", help="Ask a running Pitfalls server's API instead.")
@click.option(
    "--token",
    envvar="PITFALLS_TOKEN",
    help="API token for --server (or PITFALLS_TOKEN), where reading needs one.",
)
def mcp(server: str | None, token: str | None) -> None:
    """Serve the MCP tools over stdio, for a coding agent: match_traceback, search_pitfalls,
    get_pitfall, report_outcome, and the entries as pitfall:// resources."""
    from app.answer_sources import RemotePitfalls, local_pitfalls
    from app.mcp_server import build_server

    if server:  # links lead to the server asked
        remote = RemotePitfalls(server, token)
        build_server(remote, link_base=lambda: remote.base).run("stdio")
        return
    settings = _settings()
    build_server(local_pitfalls(settings), link_base=lambda: settings.public_url).run("stdio")


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=click.IntRange(1, 65535))
@click.option("--reload", is_flag=True, help="Restart when the code changes (development).")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 64))
@click.option(
    "--forwarded-allow-ips",
    default=None,
    help="Proxy addresses whose X-Forwarded-Proto/-For are trusted, comma-separated, or * "
    "[default: PITFALLS_FORWARDED_ALLOW_IPS, else none].",
)
def serve(
    host: str, port: int, reload: bool, workers: int, forwarded_allow_ips: str | None
) -> None:
    """Prepare the data dir (schema, content, index) and serve the web app and API.

    Each step that does work prints a line on stderr (a first start: migrations, the ingest
    counted, the index build); every start ends with `ready at URL` once the server answers."""
    import uvicorn

    from app.bootstrap import prepare_data
    from app.cli.start_progress import StartProgress
    from app.logs import log_config
    from app.snapshots import shipped_snapshot_dir
    from app.storage import create_db_engine

    settings = _settings()
    engine = create_db_engine(settings)
    progress = StartProgress()
    try:
        snapshots = settings.snapshot_dir  # None: off, and the shipped ones with them
        shipped = shipped_snapshot_dir() if snapshots is not None else None
        ingested = prepare_data(
            settings, engine, on_step=progress, snapshots=snapshots, shipped=shipped
        ).ingest
    finally:
        progress.close()
    engine.dispose()
    assert ingested is not None  # ingest="always"
    for problem in ingested.problems:
        click.echo(str(problem), err=True)
    if ingested.changed or ingested.problems:
        click.echo(ingested.summary_line(), err=True)
    local, shown = addresses(host, port, settings.root_path)
    announce_when_answering(local, lambda: progress.ready(shown))
    uvicorn.run(
        "app.web:create_app",
        factory=True,
        host=host,
        port=port,
        reload=reload,
        workers=None if reload else workers,
        **proxy_options(settings, forwarded_allow_ips),
        log_config=log_config(settings),
        access_log=False,  # the app logs each request itself, with its request id
    )


READY_POLL_S = 0.05
READY_WAIT_S = 600  # a start that takes longer than this never says it is ready


def addresses(host: str, port: int, root_path: str = "") -> tuple[str, str]:
    """(the health URL to ask from here, the address to show): a wildcard host is asked and
    shown through this machine's loopback, which it serves too."""
    loopback = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    netloc = f"[{loopback}]:{port}" if ":" in loopback else f"{loopback}:{port}"
    return f"http://{netloc}/api/v1/health", f"http://{netloc}{root_path}/"


def announce_when_answering(health_url: str, announce) -> threading.Thread:
    """Call `announce` once `health_url` answers at all (any HTTP status: the server is up),
    from a daemon thread that asks every READY_POLL_S, for at most READY_WAIT_S."""

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy

    def wait() -> None:
        deadline = time.monotonic() + READY_WAIT_S
        while time.monotonic() < deadline:
            try:
                with opener.open(health_url, timeout=5):
                    pass
            except urllib.error.HTTPError:
                pass  # an answer all the same (a degraded health says 503)
            except (OSError, ValueError):
                time.sleep(READY_POLL_S)
                continue
            announce()
            return

    thread = threading.Thread(target=wait, name="ready-line", daemon=True)
    thread.start()
    return thread


def proxy_options(settings, forwarded_allow_ips: str | None = None) -> dict:
    """uvicorn's options for forwarded headers: read only from the proxies named (the option,
    else PITFALLS_FORWARDED_ALLOW_IPS), none by default: trusted from anyone, a client could
    name any address and dodge every per-address limit."""
    trusted = (forwarded_allow_ips or settings.forwarded_allow_ips).strip()
    return {"proxy_headers": bool(trusted), "forwarded_allow_ips": trusted or None}
