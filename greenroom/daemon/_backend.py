"""The one place the backend is chosen.

A PostgreSQL URL — from ``--store``, else ``$GREENROOM_STORE`` (the flag's default), else
the config's ``[store] url`` — means :class:`~greenroom.postgres.PostgresStore` (the data
dir still holds this daemon's own files: its node name, tokens, API address); none means
:class:`~greenroom.embedded.EmbeddedStore` on the data dir. Everything else asks the
:class:`~greenroom.store.Store` it is handed for what it needs.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..store import Store

STORE_ENV = "GREENROOM_STORE"


def choose_store(
    url: str | None,
    data_dir: str | os.PathLike[str] | None,
    *,
    pool_size: int = 16,
    create: bool = True,
    notify: str = "commit",
    node_file: str | None = None,
) -> Store:
    """The backend for ``url`` (``None``: the data dir's files). ``create``: make a
    missing data dir (``False`` for commands that only read). ``node_file``: on PostgreSQL,
    the data dir's file naming this process's node (default ``node.id``). Not opened yet: use
    ``async with``. Raises ``InvalidInput`` for a URL that is not ``postgresql://``."""
    if url is None:  # each backend imported only when chosen: a read on the files stays quick
        from ..embedded import EmbeddedStore

        return EmbeddedStore(data_dir, create=create)
    from ..postgres import PostgresStore, check_url

    named = {} if node_file is None else {"node_file": node_file}
    return PostgresStore(check_url(url), data_dir=data_dir, pool_size=pool_size, notify=notify, **named)  # type: ignore[arg-type]
