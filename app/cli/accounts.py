"""`pitfalls user …` and `pitfalls token …`: accounts and API tokens from the command line."""

import sys
from collections.abc import Iterator
from contextlib import contextmanager

import click

from app.cli.group import _database, cli


@contextmanager
def _accounts() -> Iterator:
    """A session for account commands; an AccountError is a clear message and exit 1."""
    from sqlmodel import Session

    from app.accounts import AccountError

    with _database() as engine, Session(engine) as session:
        try:
            yield session
            session.commit()
        except AccountError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)


def _passwords_on(command: str) -> None:
    """Exit 1 with a sentence where the site has no password logins (OIDC only)."""
    from app.cli.group import _settings

    if not _settings().local_passwords:
        click.echo(
            f"error: passwords are off here (PITFALLS_LOCAL_PASSWORDS=false), so `pitfalls user "
            f"{command}` has nothing to do: an account is made at its first OpenID Connect "
            "sign-in; then `pitfalls user role NAME ROLE` sets its role",
            err=True,
        )
        sys.exit(1)


def _read_password(from_stdin: bool) -> str:
    if from_stdin:
        return sys.stdin.readline().rstrip("\n")
    return click.prompt("Password", hide_input=True, confirmation_prompt=True)


@cli.group()
def user() -> None:
    """Accounts: reader (read), editor (edit entries), admin (also users and all tokens)."""


ROLE_CHOICE = click.Choice(["reader", "editor", "admin"])


@user.command("add")
@click.argument("name")
@click.option("--role", type=ROLE_CHOICE, default="editor", show_default=True)
@click.option("--password-stdin", is_flag=True, help="Read the password from stdin (scripts).")
def user_add(name: str, role: str, password_stdin: bool) -> None:
    """Create a user; the password is asked for (or read from stdin)."""
    from app.accounts import CLI, add_user

    _passwords_on("add")  # before the prompt: never ask for a password nobody can use
    password = _read_password(password_stdin)
    with _accounts() as session:
        add_user(session, name=name, role=role, password=password, actor=CLI)
    click.echo(f"added {name} ({role})")


@user.command("list")
def user_list() -> None:
    """List the users with their roles and last login."""
    from app.accounts import list_users

    with _accounts() as session:
        for row in list_users(session):
            last = f"{row.last_login_at:%Y-%m-%d %H:%M}" if row.last_login_at else "never"
            click.echo(f"{row.name:<24} {row.role:<8} last login {last}")


@user.command("role")
@click.argument("name")
@click.argument("role", type=ROLE_CHOICE, required=False)
@click.option(
    "--from-groups",
    is_flag=True,
    help="Give the role back to the OpenID Connect groups: set at the user's next sign-in.",
)
def user_role(name: str, role: str | None, from_groups: bool) -> None:
    """Change a user's role (a role set here stays, whatever the groups say, until
    --from-groups gives it back to them)."""
    from app.accounts import CLI, role_from_groups, set_role

    if from_groups == (role is not None):
        raise click.UsageError("give either a ROLE or --from-groups")
    with _accounts() as session:
        if from_groups:
            role_from_groups(session, name=name, actor=CLI)
        else:
            assert role is not None
            set_role(session, name=name, role=role, actor=CLI)
    if from_groups:
        click.echo(f"{name}'s role follows the groups again, from the next sign-in")
    else:
        click.echo(f"{name} is now {role}")


@user.command("password")
@click.argument("name")
@click.option("--password-stdin", is_flag=True, help="Read the password from stdin (scripts).")
def user_password(name: str, password_stdin: bool) -> None:
    """Set a user's password (this logs them out everywhere)."""
    from app.accounts import CLI, set_password

    _passwords_on("password")
    password = _read_password(password_stdin)
    with _accounts() as session:
        set_password(session, name=name, password=password, actor=CLI)
    click.echo(f"password of {name} changed")


@cli.group()
def token() -> None:
    """API tokens for bots and CI: `Authorization: Bearer <token>`."""


@token.command("create")
@click.option("--name", required=True, help="What the token is for, e.g. ci-bot.")
@click.option("--scope", type=click.Choice(["read", "write"]), default="read", show_default=True)
@click.option("--expires", help="Lifetime such as 90d, 12h or 2w (default: never).")
def token_create(name: str, scope: str, expires: str | None) -> None:
    """Create a token and print it once; only its hash is kept."""
    from app.accounts import CLI, create_token, parse_duration

    with _accounts() as session:
        lifetime = parse_duration(expires) if expires else None
        row, secret = create_token(session, name=name, scope=scope, expires_in=lifetime, owner=CLI)
        expiry = f"{row.expires_at:%Y-%m-%d}" if row.expires_at else "never"
    click.echo(secret)
    click.echo(
        f"token {name!r} ({scope}, expires {expiry}): copy it now, it is not shown again", err=True
    )


@token.command("list")
def token_list() -> None:
    """List tokens: id, name, scope, owner, state, last use."""
    from app.accounts import list_tokens, token_state

    with _accounts() as session:
        for row in list_tokens(session):
            used = f"{row.last_used_at:%Y-%m-%d %H:%M}" if row.last_used_at else "never"
            click.echo(
                f"{row.id:>4} {row.name:<20} {row.scope:<6} {row.owner or 'cli':<12} "
                f"{token_state(row):<8} {row.prefix}…  last used {used}"
            )


@token.command("revoke")
@click.argument("token_id", type=int)
def token_revoke(token_id: int) -> None:
    """Revoke a token by its id (see `pitfalls token list`)."""
    from app.accounts import CLI, revoke_token

    with _accounts() as session:
        name = revoke_token(session, token_id=token_id, actor=CLI).name
    click.echo(f"revoked token {token_id} ({name})")
