"""``TokenStore``: the API's bearer tokens, kept hashed on the store's records
(collection ``api/tokens``, a record per token) — so every daemon of a fleet on one
database knows the same tokens, and a token added or revoked on one reaches them all.

A token is ``grt_<id>_<secret>``: the ``id`` finds its record, the SHA-256 of the whole
token is compared in constant time; the token itself is shown once, when it is made, and
stored nowhere. Each record maps to a user id and a scope:

- ``chat``: the chat endpoints, for that user's own conversations and tasks only;
- ``tasks``: the task graph (submit, list, show, cancel), the event stream and status;
- ``metrics``: ``GET /metrics`` only (a Prometheus scraper's; ``tasks`` may read it too);
- ``admin``: everything, and the only scope that may stop the daemon.

A daemon authenticates from memory and reads the tokens again every second
(:meth:`TokenStore.follow`), so ``greenroom tokens add|revoke`` takes effect without a
restart. A data dir an older greenroom kept its tokens in (``tokens.json``) has them
folded into the records the first time its tokens are read, and the file renamed
``tokens.json.folded``; a damaged one is an error naming it, never changed.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
import time
from pathlib import Path
from typing import Annotated, Literal

import anyio
import msgspec

from .._errors import DataError, InvalidInput
from ..store import Put, RecordStore

logger = logging.getLogger("greenroom.service")

COLLECTION = "api/tokens"
TOKENS_FILE = "tokens.json"
"""Where an older greenroom kept the tokens (folded into the records when found)."""
FORMAT = "greenroom.tokens/1"

Scope = Literal["chat", "tasks", "admin", "metrics"]
SCOPES: tuple[Scope, ...] = ("chat", "tasks", "admin", "metrics")
UserId = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.@:-]{1,128}$")]

_TOKEN = re.compile(r"^grt_([0-9a-f]{12})_[A-Za-z0-9_-]{20,100}$")
_ID = re.compile(r"^[0-9a-f]{12}$")


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
    """A token record, or an older greenroom's ``tokens.json``, is unreadable or invalid;
    nothing was changed."""


class Principal(msgspec.Struct, frozen=True):
    """Who a request is from: the token's user and scope (``token_id`` for the logs)."""

    user: str
    scope: Scope
    token_id: str

    def allows(self, scope: Scope) -> bool:
        """``admin`` allows everything; ``tasks`` also reads ``metrics`` (an operator's
        token scrapes what it can read through the API anyway)."""
        return self.scope == "admin" or self.scope == scope or (scope == "metrics" and self.scope == "tasks")


_decode_record = msgspec.json.Decoder(TokenRecord).decode
_encode = msgspec.json.Encoder().encode


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
    """The API's tokens on ``records`` (a :class:`~greenroom.store.RecordStore`:
    ``store.records()``; ``None``: only the ``extra`` tokens, held in memory — a daemon's
    local admin token, a test's). ``folded_from``: a data dir whose ``tokens.json`` (an
    older greenroom's) is folded into the records before the first read.

    :meth:`authenticate` reads memory only; the other calls are one transaction of the
    records each (a cancelled caller stops waiting; the write finishes whole or not at all)."""

    def __init__(
        self,
        records: RecordStore | None,
        *,
        extra: list[tuple[str, Principal]] | None = None,
        folded_from: Path | None = None,
    ) -> None:
        self.records = records
        self._records: dict[str, TokenRecord] = {}
        self._extra = {_digest(token): principal for token, principal in extra or ()}
        """Tokens held in memory only (the daemon's local admin token)."""
        self._legacy = None if folded_from is None else folded_from / TOKENS_FILE
        self._folded = False

    # -- the records ------------------------------------------------------------------

    async def load(self) -> list[TokenRecord]:
        """Every token's record, oldest first, read from the records (what
        :meth:`authenticate` knows from then on). A record that does not decode is a
        ``TokenFileError`` naming it; what was known before stays."""
        if self.records is None:
            return []
        await self._fold()
        found = await self.records.scan(COLLECTION)
        records: dict[str, TokenRecord] = {}
        for kept in found:
            try:
                records[kept.key] = _decode_record(kept.body)
            except (msgspec.DecodeError, msgspec.ValidationError) as error:
                raise TokenFileError(f"the token record {kept.key!r} is damaged: {error}") from None
        self._records = records
        return sorted(records.values(), key=lambda record: (record.created_at, record.id))

    async def add(self, user: str, scope: str, *, note: str = "") -> tuple[str, TokenRecord]:
        """Make a token for ``user`` with ``scope``; returns it (shown once) and its record.
        ``InvalidInput`` naming the field for a bad user, scope or note."""
        if not isinstance(note, str) or len(note) > 200:
            raise InvalidInput(f"note must be at most 200 characters, got {note!r:.60}", field="note")
        token, token_id = new_token()
        record = TokenRecord(
            token_id, _digest(token), check_user(user), check_scope(scope), time.time(), note
        )
        await self._fold()
        await self._writable().put(COLLECTION, [Put(token_id, _encode(record), expect=0)])
        self._records[token_id] = record
        return token, record

    async def revoke(self, token_id: str) -> TokenRecord:
        """Revoke a token by its id: its record, as it was. ``InvalidInput`` naming ``id``
        if there is none."""
        await self._fold()
        records = self._writable()
        kept = (await records.get(COLLECTION, [token_id])).get(token_id) if _ID.match(token_id) else None
        if kept is None:
            raise InvalidInput(f"no token with id {token_id!r:.40}", field="id", value=token_id)
        await records.put(COLLECTION, [Put(token_id, None, expect=kept.version)])
        self._records.pop(token_id, None)
        return _decode_record(kept.body)

    async def follow(self, every: float = 1.0) -> None:
        """Read the tokens again every ``every`` seconds until cancelled (a daemon runs it
        in its task group): a read that fails keeps the tokens known before — a damaged
        record or an unreachable store never widens access, and a revoked token stops
        working at the next read."""
        while True:
            await anyio.sleep(every)
            try:
                await self.load()
            except DataError as error:
                logger.warning("the API's tokens were not read again: %s", error)

    def _writable(self) -> RecordStore:
        if self.records is None:
            raise InvalidInput("this token store keeps no tokens (no records)", field="records")
        return self.records

    async def _fold(self) -> None:
        """Fold an older greenroom's ``tokens.json`` into the records, once."""
        if self._folded or self._legacy is None or self.records is None:
            return
        legacy = self._legacy
        parsed = await anyio.to_thread.run_sync(_read_legacy, legacy)
        if parsed is not None:
            await self.records.add(COLLECTION, [(record.id, _encode(record)) for record in parsed])
            await anyio.to_thread.run_sync(legacy.rename, legacy.with_name(TOKENS_FILE + ".folded"))
        self._folded = True

    # -- requests ---------------------------------------------------------------------

    def authenticate(self, token: str) -> Principal | None:
        """The principal of ``token``, or ``None`` (unknown, revoked or malformed), from
        what the last :meth:`load` read."""
        digest = _digest(token)
        principal = self._extra.get(digest)
        if principal is not None:
            return principal
        match = _TOKEN.match(token)
        if match is None:
            return None
        record = self._records.get(match.group(1))
        if record is None or not hmac.compare_digest(record.sha256, digest):
            return None
        return Principal(record.user, record.scope, record.id)


def _read_legacy(path: Path) -> list[TokenRecord] | None:
    """The tokens of an older greenroom's ``tokens.json`` (``None``: there is none);
    ``TokenFileError`` naming it when it cannot be read or is not a tokens file."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise TokenFileError(f"cannot read {path}: {error.strerror or error}") from None
    try:
        parsed = msgspec.json.decode(data, type=TokensFile)
    except (msgspec.DecodeError, RecursionError) as error:
        raise TokenFileError(f"{path} is not a valid tokens file: {error}") from None
    if parsed.format != FORMAT:
        raise TokenFileError(f"{path}: unsupported format {parsed.format!r} (expected {FORMAT!r})")
    return list(parsed.tokens)
