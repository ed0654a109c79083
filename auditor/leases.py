"""Leases on units of work (an observer call, a delivery), kept in the `claims` table.

Two processes over one database (two `auditor run`s, a scheduled tick overlapping a slow run,
two `auditor inject`s) each take the lease before doing the work and give it back after. A
lease expires, so the claims of a run that crashed are released: at once when the owner was a
process of this machine that no longer exists, else when `expires_at` passes.
"""

from __future__ import annotations

import os
import socket
import uuid
from datetime import UTC, datetime, timedelta

from sqlalchemy import Connection, delete, select, update

from . import schema as s

HOST = socket.gethostname()


def new_owner() -> str:
    """Return an owner name unique to this process and call: host, pid, random suffix."""
    return f"{HOST}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def dead(owner: str) -> bool:
    """True when `owner` names a process of this machine that has exited."""
    parts = owner.rsplit(":", 2)
    if len(parts) != 3 or parts[0] != HOST or not parts[1].isdigit():
        return False
    pid = int(parts[1])
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # it exists but belongs to someone else
        return False
    return False


def take(conn: Connection, key: str, checkpoint_id: int, owner: str, seconds: float) -> bool:
    """Take the lease `key` for `owner` in the caller's transaction; False if someone else holds it."""
    from .db import upsert

    now = datetime.now(UTC)
    c = s.Claim.__table__
    values = {"owner": owner, "claimed_at": now, "expires_at": now + timedelta(seconds=seconds)}
    stmt = upsert(conn, c).values(key=key, checkpoint_id=checkpoint_id, **values)
    stmt = stmt.on_conflict_do_update(
        index_elements=["key"],
        set_={k: stmt.excluded[k] for k in values},
        where=c.c.expires_at < now,
    )
    conn.execute(stmt)
    holder = conn.execute(select(c.c.owner).where(c.c.key == key)).scalar()
    if holder == owner:
        return True
    if holder is not None and dead(holder):
        conn.execute(update(c).where(c.c.key == key, c.c.owner == holder).values(**values))
        return True
    return False


def release(conn: Connection, key: str, owner: str) -> None:
    """Give the lease back (a no-op when it is no longer ours)."""
    c = s.Claim.__table__
    conn.execute(delete(c).where(c.c.key == key, c.c.owner == owner))
