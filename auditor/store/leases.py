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

from sqlalchemy import Connection, Engine, delete, select, update

from . import schema as s
from .db import connection_lost, retry_lost

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
    try:  # a killed process nobody has reaped yet (a zombie) still answers kill(0)
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (OSError, IndexError):
        return False


def take(conn: Connection, key: str, checkpoint_id: int | None, owner: str, seconds: float) -> bool:
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


def hold(engine: Engine, key: str, checkpoint_id: int | None, owner: str) -> Connection | None:
    """PostgreSQL: take the lease `key` as a lock on its `claims` row, claimed with
    FOR UPDATE SKIP LOCKED, held by a connection of its own until `let_go`; None when another
    worker holds it.

    The lock lives as long as the holder's connection: a worker killed mid-call, on any
    machine, frees its leases the moment the server sees its connection close, with no
    expiry to wait for. The row is only locked, never updated while locked, so that other
    workers' inserts of the same key never wait for the call to end.
    """
    from .db import upsert

    c = s.Claim.__table__
    now = datetime.now(UTC)
    with engine.begin() as conn:  # the row to lock, committed so that every worker sees it
        stmt = upsert(conn, c).values(
            key=key, checkpoint_id=checkpoint_id, owner=owner, claimed_at=now, expires_at=now
        )
        conn.execute(stmt.on_conflict_do_nothing(index_elements=["key"]))
    conn = engine.connect()
    try:
        locked = conn.execute(
            select(c.c.id).where(c.c.key == key).with_for_update(skip_locked=True)
        ).first()
    except BaseException:
        conn.close()
        raise
    if locked is None:  # held by another worker (or let go and deleted just now)
        conn.close()
        return None
    return conn


def unheld(engine: Engine, keys: list[str]) -> tuple[set[str], set[str]]:
    """Of the leases `keys` (taken with `hold`), return (gone, free): those whose row is gone
    (given back: their work is done) and those whose row is there but no one holds (left by a
    holder that died). Two statements whatever the number of keys."""
    c = s.Claim.__table__
    with engine.connect() as conn:
        there = set(conn.execute(select(c.c.key).where(c.c.key.in_(keys))).scalars())
        free = set(
            conn.execute(
                select(c.c.key).where(c.c.key.in_(there)).with_for_update(skip_locked=True)
            ).scalars()
        )
        conn.rollback()
    return set(keys) - there, free


def taken(engine: Engine, checkpoint_ids: list[int]) -> set[int]:
    """Of `checkpoint_ids`, those with a call some worker holds right now (`hold`)."""
    c = s.Claim.__table__
    with engine.connect() as conn:
        there = set(
            conn.execute(
                select(c.c.checkpoint_id).where(c.c.checkpoint_id.in_(checkpoint_ids))
            ).scalars()
        )
        free = set(
            conn.execute(
                select(c.c.checkpoint_id)
                .where(c.c.checkpoint_id.in_(there))
                .with_for_update(skip_locked=True)
            ).scalars()
        )
        conn.rollback()
    return there - free


DONE = "done"  # the owner of a lease whose work is done


def is_done(conn: Connection, key: str, since: datetime) -> bool:
    """Whether the lease `key` (held through `conn`) was marked done by `finish` at `since` or
    later: work another worker did while this one ran, not work of an earlier run."""
    c = s.Claim.__table__
    row = conn.execute(select(c.c.owner, c.c.claimed_at).where(c.c.key == key)).first()
    if row is None or row.owner != DONE:
        return False
    done = row.claimed_at if row.claimed_at.tzinfo else row.claimed_at.replace(tzinfo=UTC)
    return done >= since


def finish(conn: Connection, key: str) -> None:
    """Give back a lease taken with `hold`, marked done now: workers running now skip its work
    (`is_done`); a run started later plans it again (and retries its errors)."""
    try:
        now = datetime.now(UTC)
        c = s.Claim.__table__
        conn.execute(
            update(c).where(c.c.key == key).values(owner=DONE, claimed_at=now, expires_at=now)
        )
        conn.commit()
    finally:
        conn.close()


def let_go(conn: Connection, key: str) -> None:
    """Give back a lease taken with `hold`: its row goes, the lock with it."""
    try:
        conn.execute(delete(s.Claim.__table__).where(s.Claim.__table__.c.key == key))
        conn.commit()
    finally:
        conn.close()


def forget_old(engine: Engine, before: datetime) -> int:
    """PostgreSQL: delete the claims rows from before `before` that no worker holds: done marks
    (`finish`) and the leases of workers that died. A lease is its row lock, so a row nobody
    has locked is no lease; a worker running now started after `before` and needs no older
    mark. Return how many went."""
    c = s.Claim.__table__
    unheld = (
        select(c.c.id)
        .where(c.c.claimed_at < before.astimezone(UTC))
        .with_for_update(skip_locked=True)
    )
    with engine.begin() as conn:
        gone = conn.execute(delete(c).where(c.c.id.in_(unheld)))
    return gone.rowcount or 0


class Leases:
    """The leases one run takes on one store as `owner` (`seconds` long where they expire):
    the functions above, each statement retried while a restarted server comes back
    (`retry_lost`), so that a worker outlives a restart of PostgreSQL without losing work or
    paying for it twice. The one place where a run's work sharing (`auditor.audit.sharing`)
    reaches the claims table."""

    def __init__(self, engine: Engine, owner: str, seconds: float):
        self.engine, self.owner, self.seconds = engine, owner, seconds

    def take(self, key: str, checkpoint_id: int | None = None) -> bool:
        """Take the expiring lease `key` in a transaction of its own (`take`)."""

        def once() -> bool:
            with self.engine.begin() as conn:
                return take(conn, key, checkpoint_id, self.owner, self.seconds)

        return retry_lost(once)

    def give_back(self, key: str) -> None:
        """Give back the expiring lease `key` (a no-op when it is no longer ours)."""

        def once() -> None:
            with self.engine.begin() as conn:
                release(conn, key, self.owner)

        retry_lost(once)

    def hold(self, key: str, checkpoint_id: int | None = None) -> Connection | None:
        """PostgreSQL: the lease `key` as a row lock (`hold`); None when another holds it."""
        return retry_lost(hold, self.engine, key, checkpoint_id, self.owner)

    def unheld(self, keys: list[str]) -> tuple[set[str], set[str]]:
        """(gone, free) of the held leases `keys` (`unheld`)."""
        return retry_lost(unheld, self.engine, keys)

    def taken(self, checkpoint_ids: list[int]) -> set[int]:
        """Of `checkpoint_ids`, those with a call some worker holds right now (`taken`)."""
        return retry_lost(taken, self.engine, checkpoint_ids)

    def finish(self, conn: Connection, key: str) -> None:
        """Give back the held lease `key`, marked done (`finish`). When the server ended its
        connection (a restart), the lock went with it: the done mark is written on a new
        connection once the server is back."""
        try:
            finish(conn, key)
        except Exception as exc:
            if not connection_lost(exc):
                raise
            retry_lost(lambda: finish(self.engine.connect(), key))

    def let_go(self, conn: Connection, key: str) -> None:
        """Give back the held lease `key` (`let_go`). When the server ended its connection,
        the lock went with it and nothing is left to give back (the row goes with
        `forget_old`)."""
        try:
            let_go(conn, key)
        except Exception as exc:
            if not connection_lost(exc):
                raise
