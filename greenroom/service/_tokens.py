"""``TokenStore``: the API's bearer tokens, kept hashed in ``<data dir>/tokens.json``.

A token is ``grt_<id>_<secret>``: the ``id`` finds its record, the SHA-256 of the whole
token is compared in constant time; the token itself is shown once, when it is made, and
stored nowhere. Each record maps to a user id and a scope:

- ``chat``: the chat endpoints, for that user's own conversations and tasks only;
- ``tasks``: the task graph (submit, list, show, cancel), the event stream and status;
- ``metrics``: ``GET /metrics`` only (a Prometheus scraper's; ``tasks`` may read it too);
- ``admin``: everything, and the only scope that may stop the daemon.

The file is written whole (temp file, fsync, rename) with mode 0600; a damaged file is an
error naming it, never overwritten. A running daemon reloads it when it changes, so a
token added or revoked with ``greenroom tokens`` takes effect without a restart.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from pathlib import Path
from typing import Annotated, Literal

import msgspec

from .._errors import DataError, InvalidInput
from .._files import replace_durably

TOKENS_FILE = "tokens.json"
FORMAT = "greenroom.tokens/1"

Scope = Literal["chat", "tasks", "admin", "metrics"]
SCOPES: tuple[Scope, ...] = ("chat", "tasks", "admin", "metrics")
UserId = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.@:-]{1,128}$")]

_TOKEN = re.compile(r"^grt_([0-9a-f]{12})_[A-Za-z0-9_-]{20,100}$")


class TokenRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    id: Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{12}$")]
    sha256: Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}$")]
    user: UserId
    scope: Scope
    created_at: float = 0.0
    note: Annotated[str, msgspec.Meta(max_length=200)] = ""


class TokensFile(msgspec.Struct, forbid_unknown_fields=True):
    format: str
    tokens: list[TokenRecord] = []


class TokenFileError(DataError):
    """``tokens.json`` is unreadable or invalid; it was not changed."""


class Principal(msgspec.Struct, frozen=True):
    """Who a request is from: the token's user and scope (``token_id`` for the logs)."""

    user: str
    scope: Scope
    token_id: str

    def allows(self, scope: Scope) -> bool:
        """``admin`` allows everything; ``tasks`` also reads ``metrics`` (an operator's
        token scrapes what it can read through the API anyway)."""
        return self.scope == "admin" or self.scope == scope or (scope == "metrics" and self.scope == "tasks")


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> tuple[str, str]:
    """A fresh ``(token, id)``."""
    token_id = secrets.token_hex(6)
    return f"grt_{token_id}_{secrets.token_urlsafe(32)}", token_id


def check_user(user: str) -> str:
    if not isinstance(user, str) or not re.fullmatch(r"[A-Za-z0-9_.@:-]{1,128}", user):
        raise InvalidInput(
            f"user must be 1-128 letters, digits or _.@:- (got {user!r:.60})", field="user", value=user
        )
    return user


def check_scope(scope: str) -> Scope:
    if scope not in SCOPES:
        raise InvalidInput(
            f"scope must be one of {', '.join(SCOPES)} (got {scope!r:.40})", field="scope", value=scope
        )
    return scope


class TokenStore:
    """The tokens of one data dir. Blocking methods (files): call them in a worker thread
    from async code, except :meth:`authenticate`, which only reads memory (plus a
    ``stat`` at most once a second to notice a changed file)."""

    def __init__(self, data_dir: Path, *, extra: list[tuple[str, Principal]] | None = None) -> None:
        self.path = data_dir / TOKENS_FILE
        self._records: dict[str, TokenRecord] = {}
        self._extra = {_digest(token): principal for token, principal in extra or ()}
        """Tokens held in memory only (the daemon's local admin token)."""
        self._mtime: int | None = None
        self._checked = 0.0

    # -- the file ---------------------------------------------------------------------

    def load(self) -> list[TokenRecord]:
        try:
            stat = self.path.stat()
            data = self.path.read_bytes()
        except FileNotFoundError:
            self._records, self._mtime = {}, None
            return []
        except OSError as error:
            raise TokenFileError(f"cannot read {self.path}: {error.strerror or error}") from None
        try:
            parsed = msgspec.json.decode(data, type=TokensFile)
        except (msgspec.DecodeError, RecursionError) as error:
            raise TokenFileError(f"{self.path} is not a valid tokens file: {error}") from None
        if parsed.format != FORMAT:
            raise TokenFileError(f"{self.path}: unsupported format {parsed.format!r} (expected {FORMAT!r})")
        self._records = {record.id: record for record in parsed.tokens}
        self._mtime = stat.st_mtime_ns
        return list(parsed.tokens)

    def _save(self, records: list[TokenRecord]) -> None:
        data = msgspec.json.format(msgspec.json.encode(TokensFile(FORMAT, records)), indent=2)
        replace_durably(self.path, data, mode=0o600)
        self.load()

    def add(self, user: str, scope: str, *, note: str = "") -> tuple[str, TokenRecord]:
        """Make a token for ``user`` with ``scope``; returns it (shown once) and its record."""
        records = self.load()
        token, token_id = new_token()
        record = TokenRecord(
            token_id, _digest(token), check_user(user), check_scope(scope), time.time(), note
        )
        self._save([*records, record])
        return token, record

    def revoke(self, token_id: str) -> TokenRecord:
        records = self.load()
        kept = [record for record in records if record.id != token_id]
        if len(kept) == len(records):
            raise InvalidInput(f"no token with id {token_id!r:.40}", field="id", value=token_id)
        self._save(kept)
        return next(record for record in records if record.id == token_id)

    # -- requests ---------------------------------------------------------------------

    def _refresh(self) -> None:
        now = time.monotonic()
        if now - self._checked < 1.0:
            return
        self._checked = now
        try:
            mtime: int | None = self.path.stat().st_mtime_ns
        except FileNotFoundError:
            mtime = None
        except OSError:
            return  # keep what was loaded
        if mtime != self._mtime:
            try:
                self.load()
            except TokenFileError:
                pass  # a damaged file never widens access: keep the tokens loaded before

    def authenticate(self, token: str) -> Principal | None:
        """The principal of ``token``, or ``None`` (unknown, revoked or malformed)."""
        digest = _digest(token)
        principal = self._extra.get(digest)
        if principal is not None:
            return principal
        match = _TOKEN.match(token)
        if match is None:
            return None
        self._refresh()
        record = self._records.get(match.group(1))
        if record is None or not hmac.compare_digest(record.sha256, digest):
            return None
        return Principal(record.user, record.scope, record.id)
