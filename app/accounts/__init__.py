"""Accounts, API tokens, login sessions and throttling, and the audit log: who may do what.

Everything here works on a `Session` and leaves the commit to the caller, so a write and its audit
record land in one transaction. `authenticate` is the exception: it commits the count of an attempt
before it checks the password, so that every process sees the count at once. The web layer and the
CLI both call these functions, through this package: `principals` (who asks, roles, the audit
log), `passwords`, `users`, `logins` (throttling, the password check, sessions), `identities`
(accounts that sign in through an OpenID Connect provider) and `tokens`.
"""

from app.accounts.identities import (
    Identity,
    groups_of,
    identity_user,
    role_for_groups,
    sign_in_identity,
    sign_in_identity_once_settled,
)
from app.accounts.logins import (
    ADDRESS_WINDOW,
    MAX_FAILURES_PER_ADDRESS,
    PAIR_FIRST_WAIT,
    PAIR_FREE_ATTEMPTS,
    PAIR_LONGEST_WAIT,
    PAIR_MEMORY,
    TooManyAttempts,
    authenticate,
    change_own_password,
    end_login_session,
    login_session_user,
    pair_wait,
    start_login_session,
    user_principal,
)
from app.accounts.passwords import (
    MIN_PASSWORD_LENGTH,
)
from app.accounts.principals import (
    ANONYMOUS,
    CLI,
    INGEST,
    ROLE_RANK,
    SCOPE_ROLE,
    AccountDisabled,
    AccountError,
    Principal,
    audit,
    recent_audit,
)
from app.accounts.tokens import (
    LAST_USE_GRANULARITY,
    TOKEN_PREFIX,
    create_token,
    list_tokens,
    parse_duration,
    revoke_token,
    token_principal,
    token_state,
)
from app.accounts.users import (
    GENERATED_PASSWORD_BYTES,
    NAME_PATTERN,
    add_user,
    admin_names,
    disable_user,
    enable_user,
    get_user,
    list_users,
    reset_password,
    role_from_groups,
    set_password,
    set_role,
)

__all__ = [
    "ADDRESS_WINDOW",
    "ANONYMOUS",
    "CLI",
    "GENERATED_PASSWORD_BYTES",
    "INGEST",
    "LAST_USE_GRANULARITY",
    "MAX_FAILURES_PER_ADDRESS",
    "MIN_PASSWORD_LENGTH",
    "NAME_PATTERN",
    "PAIR_FIRST_WAIT",
    "PAIR_FREE_ATTEMPTS",
    "PAIR_LONGEST_WAIT",
    "PAIR_MEMORY",
    "ROLE_RANK",
    "SCOPE_ROLE",
    "TOKEN_PREFIX",
    "AccountDisabled",
    "AccountError",
    "Identity",
    "Principal",
    "TooManyAttempts",
    "add_user",
    "admin_names",
    "audit",
    "authenticate",
    "change_own_password",
    "create_token",
    "disable_user",
    "enable_user",
    "end_login_session",
    "get_user",
    "groups_of",
    "identity_user",
    "list_tokens",
    "list_users",
    "login_session_user",
    "pair_wait",
    "parse_duration",
    "recent_audit",
    "reset_password",
    "revoke_token",
    "role_for_groups",
    "role_from_groups",
    "set_password",
    "set_role",
    "sign_in_identity",
    "sign_in_identity_once_settled",
    "start_login_session",
    "token_principal",
    "token_state",
    "user_principal",
]
