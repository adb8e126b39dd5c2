"""`pitfalls serve` and `pitfalls mcp`: the web app and API, and the MCP tools over stdio."""

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
    """Prepare the data dir (schema, content, index) and serve the web app and API."""
    import uvicorn

    from app.bootstrap import prepare_data
    from app.logs import log_config
    from app.storage import create_db_engine

    settings = _settings()
    engine = create_db_engine(settings)
    ingested = prepare_data(settings, engine).ingest
    engine.dispose()
    assert ingested is not None  # ingest="always"
    for problem in ingested.problems:
        click.echo(str(problem), err=True)
    click.echo(ingested.summary_line(), err=True)
    click.echo(f"serving on http://{host}:{port}{settings.root_path}/", err=True)
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


def proxy_options(settings, forwarded_allow_ips: str | None = None) -> dict:
    """uvicorn's options for forwarded headers: read only from the proxies named (the option,
    else PITFALLS_FORWARDED_ALLOW_IPS), none by default: trusted from anyone, a client could
    name any address and dodge every per-address limit."""
    trusted = (forwarded_allow_ips or settings.forwarded_allow_ips).strip()
    return {"proxy_headers": bool(trusted), "forwarded_allow_ips": trusted or None}
