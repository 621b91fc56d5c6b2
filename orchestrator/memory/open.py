"""Which long-term memory this project uses: PostgreSQL where the queue is kept there (so
what an attempt on one machine learned is found on another), else this project's SQLite
file. Its own module because the PostgreSQL memory builds on the SQLite one's module: the
choice sits above both."""

from __future__ import annotations

from .. import config
from .store import MemoryStore, NoteStore


def open_memory() -> NoteStore:
    """Long-term memory where the queue is: PostgreSQL (shared by every machine on the
    queue) or this project's SQLite file."""
    backend, dsn = config.store_choice()
    if backend == "postgres" and dsn:
        from ..pg.schema import shared  # psycopg only for those who use it
        from .postgres import PostgresMemoryStore

        return PostgresMemoryStore(shared(dsn))
    return MemoryStore()
