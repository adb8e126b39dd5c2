"""`pitfalls webhooks …`: register, list and remove webhooks, and send what is due."""

import sys
from collections.abc import Iterator
from contextlib import contextmanager

import click

from app.cli.group import _database, _settings, cli

EVENTS = (
    "entry.created",
    "entry.changed",
    "entry.archived",
    "inbox.cluster_new",
    "inbox.cluster_threshold",
)


@contextmanager
def _webhooks_session() -> Iterator:
    """A session for webhook commands; a refusal is its sentence and exit 1."""
    from sqlmodel import Session

    from app.webhooks import WebhookError

    with _database() as engine, Session(engine) as session:
        try:
            yield session
            session.commit()
        except WebhookError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)


@cli.group()
def webhooks() -> None:
    """Webhooks: addresses told by an HTTP POST when entries or the inbox change."""


@webhooks.command("add")
@click.argument("url")
@click.option(
    "--event",
    "events",
    multiple=True,
    type=click.Choice(EVENTS),
    help="An event to send (repeat it); default: the three entry events.",
)
@click.option(
    "--format",
    "body_format",
    type=click.Choice(["json", "slack"]),
    default="json",
    show_default=True,
    help='The body: our event JSON, or Slack\'s {"text": ...}.',
)
@click.option(
    "--threshold",
    type=click.IntRange(1, 1_000_000),
    default=10,
    show_default=True,
    help="The count at which inbox.cluster_threshold fires.",
)
@click.option("--secret-stdin", is_flag=True, help="Read the signing secret from stdin.")
@click.option("--generate-secret", is_flag=True, help="Make a signing secret and print it once.")
def webhooks_add(
    url: str,
    events: tuple[str, ...],
    body_format: str,
    threshold: int,
    secret_stdin: bool,
    generate_secret: bool,
) -> None:
    """Register URL; with a secret, each delivery is signed (printed here once, never again)."""
    from app.accounts import CLI
    from app.webhooks import add_hook
    from app.webhooks import generate_secret as make_secret

    secret = None
    if secret_stdin:
        secret = sys.stdin.readline().strip()
    elif generate_secret:
        secret = make_secret()
    with _webhooks_session() as session:
        hook = add_hook(
            session,
            url=url,
            events=events or EVENTS[:3],
            body_format=body_format,
            secret=secret,
            threshold=threshold,
            actor=CLI,
        )
        hook_id, chosen = hook.id, ", ".join(hook.events)
    click.echo(f"webhook {hook_id}: {url} ({chosen}, {body_format})")
    if generate_secret and secret:
        click.echo(secret)
        click.echo("the secret above is shown only this once", err=True)


@webhooks.command("list")
def webhooks_list() -> None:
    """List the webhooks: id, address, events, body, secret (masked)."""
    from app.webhooks import list_hooks, mask_secret

    with _webhooks_session() as session:
        for hook in list_hooks(session):
            secret = f"secret {mask_secret(hook.secret)}" if hook.secret else "unsigned"
            click.echo(
                f"{hook.id:>4} {hook.url}  {','.join(hook.events)}  {hook.body_format}  "
                f"threshold {hook.threshold}  {secret}"
            )


@webhooks.command("remove")
@click.argument("hook_id", type=int)
def webhooks_remove(hook_id: int) -> None:
    """Remove a webhook, with its queued and logged deliveries."""
    from app.accounts import CLI
    from app.webhooks import remove_hook

    with _webhooks_session() as session:
        url = remove_hook(session, hook_id=hook_id, actor=CLI).url
    click.echo(f"removed webhook {hook_id} ({url})")


@webhooks.command("deliver")
@click.option(
    "--rounds",
    type=click.IntRange(1, 1000),
    default=50,
    show_default=True,
    help="At most this many rounds of up to 20 deliveries each.",
)
def webhooks_deliver(rounds: int) -> None:
    """Send the deliveries that are due, once (for cron); exit 1 when any attempt failed."""
    from app.webhooks import DeliveryRules, deliver_due

    rules = DeliveryRules.of(_settings())
    delivered = retried = failed = 0
    with _database() as engine:
        for _ in range(rounds):
            done = deliver_due(engine, rules)
            delivered, retried, failed = (
                delivered + done.delivered,
                retried + done.retried,
                failed + done.failed,
            )
            for error in done.errors:
                click.echo(error, err=True)
            if done.attempted == 0:
                break
    click.echo(f"delivered {delivered}, to retry {retried}, failed {failed}")
    if retried or failed:
        sys.exit(1)
