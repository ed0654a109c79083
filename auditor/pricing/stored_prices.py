"""What reports need from the price table, kept in the store: thresholds and per-token rates.

Working out the price bands means reading genai-prices' whole data snapshot (a fifth of a
second to import, more to walk), and every (model, band) rate is probed through it. Reports
keep both in `price_state` and `price_rates`, under a key naming what the prices came from:
the genai-prices data file installed, the user's override file (its content) and this
module's pricing logic. When the key changes (another genai-prices version, an edited
override file), or a dated price in the table has started since, the stored rates are
dropped and worked out again on the next report; otherwise a report imports nothing of
genai-prices.
"""

from __future__ import annotations

import hashlib
import os
from datetime import UTC, datetime
from decimal import Decimal
from importlib.util import find_spec
from pathlib import Path

from ..errors import AuditorError
from ..store import sql_text
from .model_prices import PRICES_ENV, Pricer, overrides_path, scan_price_table

# Bump when the way rates are probed or bands are made changes, so stored rates are redone.
LOGIC_VERSION = 1


def sources_key() -> str:
    """Name the price sources in force: genai-prices' data file (path, size, mtime), a hash of
    the override file's content, and LOGIC_VERSION. Reads no price data."""
    parts = [f"logic {LOGIC_VERSION}"]
    spec = find_spec("genai_prices")
    if spec is None or not spec.origin:
        parts.append("genai-prices absent")
    else:
        package = Path(spec.origin).parent
        for name in ("data.py", "__init__.py"):
            try:
                st = (package / name).stat()
            except OSError:
                continue
            parts.append(f"{package / name} {st.st_size} {st.st_mtime_ns}")
    path = overrides_path()
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        if os.environ.get(PRICES_ENV):
            raise AuditorError(f"{PRICES_ENV} points at {path}, which does not exist.") from None
        parts.append("no overrides")
    except OSError as exc:
        raise AuditorError(f"Cannot read the price overrides {path}: {exc.strerror}") from None
    else:
        parts.append(f"{path} {hashlib.sha256(data).hexdigest()}")
    return "\n".join(parts)


def _today() -> str:
    return datetime.now(UTC).date().isoformat()


def load(conn) -> Pricer:
    """A `Pricer` with the thresholds and rates stored for the current price sources.

    When the sources changed (or a dated price has started), the thresholds are worked out
    again from the price table, stored, and the stored rates dropped. Call `save` after pricing
    to keep the rates looked up meanwhile.
    """
    conn = sql_text.wrap(conn)
    key = sources_key()
    row = conn.execute("SELECT key, thresholds, next_change FROM price_state WHERE id = 1").first()
    if row is not None and row[0] == key and (row[2] is None or _today() < row[2]):
        bounds = tuple(int(t) for t in row[1].split(",")) if row[1] else ()
        rates = {}
        for model, provider, band, *values in conn.execute(
            "SELECT model, provider, band, input, output, cache_read, cache_write FROM price_rates"
        ):
            rates[(model, band, provider or None)] = (
                None if values[0] is None else tuple(Decimal(v) for v in values)
            )
        pricer = Pricer(bounds, rates)
    else:
        bounds, next_change = scan_price_table()
        conn.execute("DELETE FROM price_rates")
        conn.execute("DELETE FROM price_state")
        conn.execute(
            "INSERT INTO price_state (id, key, thresholds, next_change) "
            "VALUES (1, :key, :thresholds, :next_change)",
            {"key": key, "thresholds": ",".join(map(str, bounds)), "next_change": next_change},
        )
        conn.commit()
        pricer = Pricer(bounds)
    pricer.sources_key = key
    return pricer


def save(conn, pricer: Pricer) -> None:
    """Store the rates `pricer` looked up in the price table, if the sources are still those
    it was loaded with (another process may have seen them change meanwhile)."""
    if not pricer.probed:
        return
    conn = sql_text.wrap(conn)
    rows = [
        {
            "model": model,
            "provider": provider or "",
            "band": band,
            "key": pricer.sources_key,
            **dict(
                zip(
                    ("input", "output", "cache_read", "cache_write"),
                    (None,) * 4 if r is None else (str(v) for v in r),
                )
            ),
        }
        for (model, band, provider), r in pricer.probed.items()
    ]
    conn.execute(
        "INSERT INTO price_rates (model, provider, band, input, output, cache_read, cache_write) "
        "SELECT :model, :provider, :band, :input, :output, :cache_read, :cache_write "
        "WHERE EXISTS (SELECT 1 FROM price_state WHERE id = 1 AND key = :key) "
        "ON CONFLICT (model, provider, band) DO NOTHING",
        rows,
    )
    conn.commit()
    pricer.probed.clear()
