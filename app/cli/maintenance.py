"""`pitfalls backup`, `restore`, `reindex` and `snapshot`: the database as one file, the index
rebuilt, and the first-start snapshot an installation ships."""

import time
from pathlib import Path

import click

from app.cli.group import CannotRun, _index_dir, _settings, cli


@cli.command()
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
def backup(file: Path) -> None:
    """Save every table (entries, revisions, users, tokens, sessions, audit log, verification
    results) to FILE as one consistent snapshot, while the server keeps serving. The file is
    gzip JSON lines and restores into SQLite or PostgreSQL alike."""
    from app.backup import backup as save
    from app.storage import create_db_engine, setup_lock, upgrade_schema

    settings = _settings()
    engine = create_db_engine(settings)
    with setup_lock(engine, timeout_s=settings.setup_lock_timeout_s):
        upgrade_schema(engine)
    started = time.perf_counter()
    counts = save(engine, file)
    engine.dispose()
    rows = sum(counts.values())
    click.echo(
        f"backed up {rows} rows of {len(counts)} tables to {file} "
        f"in {time.perf_counter() - started:.2f} s"
    )


@cli.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--accept-unverified",
    is_flag=True,
    help="Also restore a backup made before backups carried an end marker and checksum "
    "(version 1), which cannot be told from one cut short: only once you know it is whole.",
)
def restore(file: Path, accept_unverified: bool) -> None:
    """Load a backup FILE into an empty database (a new data dir, or a new PostgreSQL
    database), then build the search index. A database that holds anything is refused, and so
    is a file that does not add up (cut short, damaged, changed): nothing is written then."""
    from app.backup import BackupError
    from app.backup import restore as load
    from app.search.index import rebuild_index
    from app.storage import create_db_engine, setup_lock, upgrade_schema

    settings = _settings()
    engine = create_db_engine(settings)
    try:
        with setup_lock(engine, timeout_s=settings.setup_lock_timeout_s):
            upgrade_schema(engine)
            counts = load(engine, file, accept_unverified=accept_unverified)
        state = rebuild_index(engine, _index_dir(settings), search_engine=settings.search_engine)
    except BackupError as exc:
        raise CannotRun(str(exc)) from None
    finally:
        engine.dispose()
    click.echo(
        f"restored {sum(counts.values())} rows of {len(counts)} tables; "
        f"index built at change {state.seq}"
    )


@cli.command()
def reindex() -> None:
    """Rebuild the search index from the database (atomically: the old one serves until done)."""
    from app.search.index import rebuild_index
    from app.storage import create_db_engine, upgrade_schema

    settings = _settings()
    engine = create_db_engine(settings)
    upgrade_schema(engine)
    started = time.perf_counter()
    state = rebuild_index(engine, _index_dir(settings), search_engine=settings.search_engine)
    engine.dispose()
    elapsed = time.perf_counter() - started
    click.echo(f"reindexed in {elapsed:.2f} s (change sequence {state.seq})")


@cli.command()
@click.option(
    "--into",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder to keep it in [default: the package's own first-start folder].",
)
def snapshot(into: Path | None) -> None:
    """Make the first-start snapshot this installation ships: a first start of the entries in
    a temporary data dir, whose database and index a later first start anywhere on this
    installation copies instead of redoing (the same entries, code and search engine only; any
    change is a miss). Run it where a wheel or an image is built, after installing."""
    from app.bootstrap import build_shipped_snapshot
    from app.cli.start_progress import StartProgress
    from app.snapshots import shipped_snapshot_dir

    settings = _settings()
    folder = into or shipped_snapshot_dir()
    started = time.perf_counter()
    progress = StartProgress()
    try:
        found, report = build_shipped_snapshot(settings, folder, on_step=progress)
    except OSError as exc:
        raise CannotRun(f"cannot write the snapshot in {folder}: {exc}") from None
    finally:
        progress.close()
    if report.ingest is not None:
        for problem in report.ingest.problems:
            click.echo(str(problem), err=True)
    if found is None:
        click.echo(
            f"no snapshot kept in {folder}: the first start was not clean (see above)", err=True
        )
        raise SystemExit(1)
    size = sum(path.stat().st_size for path in found.folder.rglob("*") if path.is_file())
    click.echo(
        f"snapshot {found.folder.name[:12]} of {settings.content_dir} ({settings.search_engine}) "
        f"kept in {folder}: {size / 1e6:.1f} MB, made in {time.perf_counter() - started:.1f} s"
    )
