"""Stored responses (`store: true`, the default): a SQLite database in the data folder, so that a
conversation continues through `previous_response_id` across server restarts.

Each response keeps its object as answered, its input items (item references resolved) and its
output items; the items of a chain, oldest first, are the conversation a later turn continues.
`instructions` are not part of it (OpenAI carries them over to no later response). The calls
are blocking: callers run them off the event loop (`asyncio.to_thread`).
"""

from __future__ import annotations

import functools
import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from app.settings.locations import data_dir

DB_FILE = "responses.sqlite3"
SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    previous_id TEXT,
    created_at INTEGER NOT NULL,
    body TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS items (
    response_id TEXT NOT NULL REFERENCES responses(id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    is_input INTEGER NOT NULL,
    item_id TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (response_id, is_input, position)
);
CREATE INDEX IF NOT EXISTS items_by_id ON items(item_id);
"""
# The rows of a response's chain, newest first (depth 0 is the response itself).
CHAIN = """
WITH RECURSIVE chain(id, previous_id, depth) AS (
    SELECT id, previous_id, 0 FROM responses WHERE id = ?
    UNION ALL
    SELECT r.id, r.previous_id, c.depth + 1 FROM responses r JOIN chain c ON r.id = c.previous_id
)
SELECT items.body FROM chain JOIN items ON items.response_id = chain.id
ORDER BY chain.depth DESC, items.is_input DESC, items.position
"""


class ResponseStore:
    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()  # one connection, used from worker threads one at a time
        self._db: sqlite3.Connection | None = None

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._db is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA foreign_keys=ON")
                db.executescript(SCHEMA)
                self._db = db
            yield self._db

    def save(self, response: dict[str, Any], inputs: list[dict[str, Any]]) -> None:
        """Keep a finished response with its input items (a response saved again replaces itself)."""
        rows = [(response["id"], i, 1, item["id"], json.dumps(item)) for i, item in enumerate(inputs)]
        rows += [(response["id"], i, 0, item["id"], json.dumps(item)) for i, item in enumerate(response["output"])]
        with self._connection() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute("DELETE FROM responses WHERE id = ?", (response["id"],))
                db.execute("INSERT INTO responses VALUES (?, ?, ?, ?)",
                           (response["id"], response.get("previous_response_id"),
                            response.get("created_at") or int(time.time()), json.dumps(response)))
                db.executemany("INSERT INTO items VALUES (?, ?, ?, ?, ?)", rows)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def get(self, response_id: str) -> dict[str, Any] | None:
        with self._connection() as db:
            row = db.execute("SELECT body FROM responses WHERE id = ?", (response_id,)).fetchone()
        return json.loads(row[0]) if row else None

    def delete(self, response_id: str) -> bool:
        with self._connection() as db:
            return db.execute("DELETE FROM responses WHERE id = ?", (response_id,)).rowcount > 0

    def conversation(self, response_id: str) -> list[dict[str, Any]] | None:
        """The items of the chain that ends with this response, oldest first (None: not stored)."""
        with self._connection() as db:
            if db.execute("SELECT 1 FROM responses WHERE id = ?", (response_id,)).fetchone() is None:
                return None
            return [json.loads(body) for (body,) in db.execute(CHAIN, (response_id,))]

    def input_items(self, response_id: str) -> list[dict[str, Any]] | None:
        with self._connection() as db:
            if db.execute("SELECT 1 FROM responses WHERE id = ?", (response_id,)).fetchone() is None:
                return None
            rows = db.execute("SELECT body FROM items WHERE response_id = ? AND is_input = 1 ORDER BY position",
                              (response_id,))
            return [json.loads(body) for (body,) in rows]

    def items(self, item_ids: list[str]) -> dict[str, dict[str, Any]]:
        """Stored items by id (the latest kept where several share one)."""
        found: dict[str, dict[str, Any]] = {}
        with self._connection() as db:
            for item_id in item_ids:
                row = db.execute("SELECT items.body FROM items JOIN responses ON responses.id = items.response_id "
                                 "WHERE item_id = ? ORDER BY responses.created_at DESC LIMIT 1", (item_id,)).fetchone()
                if row is not None:
                    found[item_id] = json.loads(row[0])
        return found


@functools.cache
def _store_at(path: Path) -> ResponseStore:
    return ResponseStore(path)


def response_store() -> ResponseStore:
    """The store in the data folder (`FIRESIDE_DATA_DIR`), opened on first use."""
    return _store_at(data_dir() / DB_FILE)
