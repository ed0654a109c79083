"""The tables of the store, as SQLAlchemy 2.x typed models.

The Alembic migrations in `migrations/versions` create exactly these; a test checks that
they match. Large or variable-shape data (content blocks, tool inputs) is kept as JSON text so
that other tools (`sqlite3`, Datasette) can read it.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
    true,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    if TYPE_CHECKING:  # a Table, not any FromClause: `Model.__table__.insert()` type-checks
        __table__: ClassVar[Table]


class SourceFile(Base):
    """A transcript file on disk and how far it has been read.

    `source` names the machine it was read on (`auditor ingest --source`, by default the host
    name): the same path on two machines sharing a store is two files.
    """

    __tablename__ = "source_files"
    __table_args__ = (UniqueConstraint("source", "path"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    source: Mapped[str] = mapped_column(String(255), default="", server_default="")
    path: Mapped[str] = mapped_column(Text)
    format: Mapped[str | None] = mapped_column(String(64))
    size: Mapped[int] = mapped_column(BigInteger, default=0)
    mtime_ns: Mapped[int] = mapped_column(BigInteger, default=0)
    # How far the file was consumed (bytes, lines), and fingerprints of what was read, so that
    # a grown file can be told from one rewritten in place without re-reading it all.
    offset: Mapped[int] = mapped_column(BigInteger, default=0)
    lines: Mapped[int] = mapped_column(Integer, default=0)
    head_hash: Mapped[str | None] = mapped_column(String(64))
    tail_hash: Mapped[str | None] = mapped_column(String(64))
    parser_state: Mapped[dict | None] = mapped_column(JSON)
    ingested_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    error_count: Mapped[int] = mapped_column(Integer, default=0)


class Thread(Base):
    """One agent conversation (a session, a rollout, an Amp thread, a subagent run)."""

    __tablename__ = "threads"
    __table_args__ = (
        UniqueConstraint("agent", "native_id"),
        # The few threads whose usage changed, found without reading every thread.
        Index(
            "ix_threads_rollup_dirty",
            "id",
            sqlite_where=text("rollup_dirty"),
            postgresql_where=text("rollup_dirty"),
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    agent: Mapped[str] = mapped_column(String(32))
    native_id: Mapped[str] = mapped_column(String(255))
    parent_id: Mapped[int | None] = mapped_column(
        ForeignKey("threads.id", ondelete="SET NULL"), index=True
    )
    parent_native_id: Mapped[str | None] = mapped_column(String(255))
    parent_tool_use_id: Mapped[str | None] = mapped_column(String(255))
    is_sidechain: Mapped[bool] = mapped_column(Boolean, default=False)
    agent_type: Mapped[str | None] = mapped_column(String(64))
    title: Mapped[str | None] = mapped_column(Text)
    cwd: Mapped[str | None] = mapped_column(Text)
    git_branch: Mapped[str | None] = mapped_column(String(255))
    version: Mapped[str | None] = mapped_column(String(64))
    guidance: Mapped[dict | None] = mapped_column(JSON)
    meta: Mapped[dict | None] = mapped_column(JSON)
    source_file_id: Mapped[int | None] = mapped_column(
        ForeignKey("source_files.id", ondelete="SET NULL")
    )
    # Aggregates refreshed after each ingest of the thread, so listings stay cheap.
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    message_count: Mapped[int] = mapped_column(Integer, default=0)
    tool_call_count: Mapped[int] = mapped_column(Integer, default=0)
    file_edit_count: Mapped[int] = mapped_column(Integer, default=0)
    models: Mapped[str | None] = mapped_column(Text)
    # Set when the thread's token usage changed, until `usage_rollup` is brought up to date.
    rollup_dirty: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())


class Message(Base):
    """One message; its content blocks are JSON (see `auditor.model.Block.as_json`)."""

    __tablename__ = "messages"
    __table_args__ = (
        UniqueConstraint("thread_id", "native_id"),
        Index("ix_messages_thread_id_seq", "thread_id", "seq"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    thread_id: Mapped[int] = mapped_column(ForeignKey("threads.id", ondelete="CASCADE"))
    source_file_id: Mapped[int | None] = mapped_column(
        ForeignKey("source_files.id", ondelete="SET NULL"), index=True
    )
    native_id: Mapped[str] = mapped_column(String(255))
    parent_native_id: Mapped[str | None] = mapped_column(String(255))
    seq: Mapped[int] = mapped_column(BigInteger)
    line: Mapped[int | None] = mapped_column(Integer)
    role: Mapped[str] = mapped_column(String(16))
    source_type: Mapped[str | None] = mapped_column(String(32))
    timestamp: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    model: Mapped[str | None] = mapped_column(String(128))
    usage_key: Mapped[str | None] = mapped_column(String(255))
    stop_reason: Mapped[str | None] = mapped_column(String(64))
    is_sidechain: Mapped[bool] = mapped_column(Boolean, default=False)
    tool_use_count: Mapped[int] = mapped_column(Integer, default=0)
    file_edit_count: Mapped[int] = mapped_column(Integer, default=0)
    blocks: Mapped[list | None] = mapped_column(JSON)


class ToolCall(Base):
    """A tool call paired with its result (filled in when the result is read)."""

    __tablename__ = "tool_calls"
    __table_args__ = (
        UniqueConstraint("thread_id", "call_id"),
        # A thread's file edits counted from the index alone (`refresh_threads`, at each
        # live event), not by reading each of its calls' rows.
        Index("ix_tool_calls_thread_id_is_file_edit", "thread_id", "is_file_edit"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    thread_id: Mapped[int] = mapped_column(ForeignKey("threads.id", ondelete="CASCADE"))
    call_id: Mapped[str] = mapped_column(String(255))
    source_file_id: Mapped[int | None] = mapped_column(
        ForeignKey("source_files.id", ondelete="SET NULL"), index=True
    )
    name: Mapped[str | None] = mapped_column(String(255))
    call_message_id: Mapped[str | None] = mapped_column(String(255))
    result_message_id: Mapped[str | None] = mapped_column(String(255))
    is_error: Mapped[bool | None] = mapped_column(Boolean)
    is_file_edit: Mapped[bool] = mapped_column(Boolean, default=False)
    edited_paths: Mapped[list | None] = mapped_column(JSON)


class GuidanceFile(Base):
    """An instruction file the agent was given (CLAUDE.md, AGENTS.md...), as read once.

    `origin` says where the text came from: `disk` (read by auditor from the thread's working
    directory, its parents up to the repository root, or the user's own file), `git` (a file
    the repository tracks, as committed when the session started) or `read` (the agent read it
    with a tool call; `message_native_id` is the result's message). A file whose text changed
    gets a row per version; `read_at` is when each version was first read (`git`: committed).
    """

    __tablename__ = "guidance_files"
    __table_args__ = (UniqueConstraint("thread_id", "path", "sha256"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    thread_id: Mapped[int] = mapped_column(ForeignKey("threads.id", ondelete="CASCADE"))
    path: Mapped[str] = mapped_column(Text)
    origin: Mapped[str] = mapped_column(String(16))
    sha256: Mapped[str] = mapped_column(String(64))
    text: Mapped[str] = mapped_column(Text)
    read_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    message_native_id: Mapped[str | None] = mapped_column(String(255))


class TokenUsage(Base):
    """Tokens billed for one model call of an agent; one row per billing key."""

    __tablename__ = "token_usage"
    __table_args__ = (
        UniqueConstraint("thread_id", "key"),
        # A thread's models found one index seek each (`refresh_threads`), however many
        # calls it billed.
        Index("ix_token_usage_thread_id_model", "thread_id", "model"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    thread_id: Mapped[int] = mapped_column(ForeignKey("threads.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(255))
    source_file_id: Mapped[int | None] = mapped_column(
        ForeignKey("source_files.id", ondelete="SET NULL"), index=True
    )
    model: Mapped[str | None] = mapped_column(String(128))
    timestamp: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), index=True)
    input_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    output_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    cache_read_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    cache_write_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    reasoning_tokens: Mapped[int] = mapped_column(BigInteger, default=0)


class UsageRollup(Base):
    """Agents' token usage summed per thread, day, model and price band, for cost reports.

    Rebuilt by the reports for the threads marked `rollup_dirty` (ingest marks them), so a
    report over millions of usage rows reads a few rows per thread and day. Calls a forked
    subagent logged again (same key and counts as in its parent) are left out. `day` is the
    UTC date; `band` the prompt-size band of the price table's thresholds (`usage_rollup_state`).
    """

    __tablename__ = "usage_rollup"
    __table_args__ = (Index("ix_usage_rollup_thread_id", "thread_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    thread_id: Mapped[int] = mapped_column(ForeignKey("threads.id", ondelete="CASCADE"))
    day: Mapped[str | None] = mapped_column(String(10))
    model: Mapped[str | None] = mapped_column(String(128))
    band: Mapped[int] = mapped_column(Integer)
    calls: Mapped[int] = mapped_column(Integer)
    input_tokens: Mapped[int] = mapped_column(BigInteger)
    output_tokens: Mapped[int] = mapped_column(BigInteger)
    cache_read_tokens: Mapped[int] = mapped_column(BigInteger)
    cache_write_tokens: Mapped[int] = mapped_column(BigInteger)


class UsageDaily(Base):
    """`usage_rollup` summed per day, model and band over all threads, for the reports that do
    not group by thread: a few rows a day however many threads there are. Kept by triggers on
    `usage_rollup` (SQLite); a day or model that is NULL there is '' here."""

    __tablename__ = "usage_daily"

    day: Mapped[str] = mapped_column(String(10), primary_key=True)
    model: Mapped[str] = mapped_column(String(128), primary_key=True)
    band: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    calls: Mapped[int] = mapped_column(Integer)
    input_tokens: Mapped[int] = mapped_column(BigInteger)
    output_tokens: Mapped[int] = mapped_column(BigInteger)
    cache_read_tokens: Mapped[int] = mapped_column(BigInteger)
    cache_write_tokens: Mapped[int] = mapped_column(BigInteger)


class VerdictDaily(Base):
    """Observer calls summed per UTC day (of `created_at`), observer, model and run (0: none),
    kept by triggers on `verdicts` (SQLite), for cost reports that do not group by thread.
    `priced` counts the calls with a `cost_usd`; `cost_usd` and `credits` sum those."""

    __tablename__ = "verdict_daily"

    day: Mapped[str] = mapped_column(String(10), primary_key=True)
    observer: Mapped[str] = mapped_column(String(64), primary_key=True)
    model: Mapped[str] = mapped_column(String(128), primary_key=True)
    run_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    calls: Mapped[int] = mapped_column(Integer)
    invalid: Mapped[int] = mapped_column(Integer)
    errors: Mapped[int] = mapped_column(Integer)
    input_tokens: Mapped[int] = mapped_column(BigInteger)
    cached_tokens: Mapped[int] = mapped_column(BigInteger)
    output_tokens: Mapped[int] = mapped_column(BigInteger)
    thinking_tokens: Mapped[int] = mapped_column(BigInteger)
    cost_usd: Mapped[float] = mapped_column()
    credits: Mapped[float] = mapped_column()
    priced: Mapped[int] = mapped_column(Integer)


class UsageRollupState(Base):
    """The price-band thresholds `usage_rollup` was built with (one row)."""

    __tablename__ = "usage_rollup_state"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    thresholds: Mapped[str] = mapped_column(Text)


class PriceState(Base):
    """What the stored price data was worked out from (one row; see `auditor.pricing.stored_prices`):
    `key` names the price sources, `thresholds` the prompt sizes where some price changes,
    `next_change` the first future day (ISO) a dated price starts, when the data is redone."""

    __tablename__ = "price_state"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(Text)
    thresholds: Mapped[str] = mapped_column(Text)
    next_change: Mapped[str | None] = mapped_column(String(10))


class PriceRate(Base):
    """USD per token of a model in a price band, as decimal text (all NULL: a model the price
    table does not know). `provider` is the observer or agent name it was priced for, or ''."""

    __tablename__ = "price_rates"

    model: Mapped[str] = mapped_column(String(128), primary_key=True)
    provider: Mapped[str] = mapped_column(String(64), primary_key=True)
    band: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    input: Mapped[str | None] = mapped_column(Text)
    output: Mapped[str | None] = mapped_column(Text)
    cache_read: Mapped[str | None] = mapped_column(Text)
    cache_write: Mapped[str | None] = mapped_column(Text)


class ForgottenThread(Base):
    """A thread `auditor forget` removed: ingest leaves its records out from then on, unless
    `ingest --include-forgotten`, which reads `files` (source_files ids it came from) again."""

    __tablename__ = "forgotten_threads"
    __table_args__ = (UniqueConstraint("agent", "native_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    agent: Mapped[str] = mapped_column(String(32))
    native_id: Mapped[str] = mapped_column(String(255))
    files: Mapped[list | None] = mapped_column(JSON)
    forgotten_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class SearchText(Base):
    """A message's searchable text (its text blocks and tool results), for `auditor search` on
    PostgreSQL, whose full-text index (a GIN index on its tsvector) needs the text in a column.

    A SQLite store has no such table: its FTS5 index keeps no text, which stays in the blocks
    (see `auditor.store.search`). Both indexes are made by the migrations, not declared here.
    """

    __tablename__ = "search_texts"

    message_id: Mapped[int] = mapped_column(
        ForeignKey("messages.id", ondelete="CASCADE"), primary_key=True, autoincrement=False
    )
    body: Mapped[str] = mapped_column(Text)


class IngestError(Base):
    """Something that could not be read, with where it was."""

    __tablename__ = "ingest_errors"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    path: Mapped[str] = mapped_column(Text)
    line: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Run(Base):
    """One `auditor run`: its configuration, observer and totals."""

    __tablename__ = "runs"
    __table_args__ = (
        # The runs still running, looked at each time a run starts (`mark_interrupted`):
        # a live worker starts one per audit, and the table grows with every audit.
        Index(
            "ix_runs_running",
            "id",
            sqlite_where=text("status = 'running'"),
            postgresql_where=text("status = 'running'"),
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    status: Mapped[str] = mapped_column(String(16))  # running | done | interrupted | failed
    # Who runs it (a lease owner: host:pid:suffix) and when it last showed life (auditor.store.run_rows).
    owner: Mapped[str | None] = mapped_column(String(255))
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    observer: Mapped[str] = mapped_column(String(64))
    model: Mapped[str] = mapped_column(String(128))
    prompt_version: Mapped[str | None] = mapped_column(String(64))
    prompt_hash: Mapped[str | None] = mapped_column(String(64))
    dry_run: Mapped[bool] = mapped_column(Boolean, default=False)
    config: Mapped[dict | None] = mapped_column(JSON)
    checkpoints: Mapped[int] = mapped_column(Integer, default=0)
    gated_in: Mapped[int] = mapped_column(Integer, default=0)
    audited: Mapped[int] = mapped_column(Integer, default=0)
    reused: Mapped[int] = mapped_column(Integer, default=0)
    corrections: Mapped[int] = mapped_column(Integer, default=0)
    invalid: Mapped[int] = mapped_column(Integer, default=0)
    errors: Mapped[int] = mapped_column(Integer, default=0)
    cost_usd: Mapped[float] = mapped_column(default=0.0)
    error: Mapped[str | None] = mapped_column(Text)


class Checkpoint(Base):
    """A point of a thread where an observer could step in, with the latest gate decision."""

    __tablename__ = "checkpoints"
    __table_args__ = (UniqueConstraint("thread_id", "message_native_id", "kind"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    thread_id: Mapped[int] = mapped_column(ForeignKey("threads.id", ondelete="CASCADE"))
    message_native_id: Mapped[str] = mapped_column(String(255))
    kind: Mapped[str] = mapped_column(String(16))
    tool_calls: Mapped[int] = mapped_column(Integer, default=0)
    file_edits: Mapped[int] = mapped_column(Integer, default=0)
    gate_audit: Mapped[bool] = mapped_column(Boolean, default=False)
    gate_reason: Mapped[str] = mapped_column(String(128))
    # The reason without its particulars (GateDecision.code), what reports count decisions by.
    gate_code: Mapped[str | None] = mapped_column(String(128), nullable=True)
    gated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    run_id: Mapped[int | None] = mapped_column(
        ForeignKey("runs.id", ondelete="SET NULL"), index=True
    )


class Verdict(Base):
    """One observer call at a checkpoint: its answer, raw response, tokens and cost.

    A correction is a verdict with `needs_correction` true and a message; it waits there for
    injection. `status` is ok, invalid (the answer broke the tool contract; `problem` says
    how) or error (the call failed; retried by a later run).
    """

    __tablename__ = "verdicts"
    __table_args__ = (
        Index(
            "ix_verdicts_lookup", "checkpoint_id", "observer", "model", "prompt_hash", "input_hash"
        ),
        # Calls recorded without a price, which cost reports price now (see `verdict_daily`).
        Index(
            "ix_verdicts_unpriced",
            "created_at",
            sqlite_where=text("cost_usd IS NULL"),
            postgresql_where=text("cost_usd IS NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    checkpoint_id: Mapped[int] = mapped_column(ForeignKey("checkpoints.id", ondelete="CASCADE"))
    run_id: Mapped[int | None] = mapped_column(
        ForeignKey("runs.id", ondelete="SET NULL"), index=True
    )
    thread_id: Mapped[int] = mapped_column(ForeignKey("threads.id", ondelete="CASCADE"), index=True)
    observer: Mapped[str] = mapped_column(String(64))
    model: Mapped[str] = mapped_column(String(128))
    prompt_version: Mapped[str | None] = mapped_column(String(64))
    prompt_hash: Mapped[str] = mapped_column(String(64))
    input_hash: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16))
    needs_correction: Mapped[bool | None] = mapped_column(Boolean)
    message: Mapped[str | None] = mapped_column(Text)
    problem: Mapped[str | None] = mapped_column(Text)
    raw: Mapped[dict | None] = mapped_column(JSON)  # capped: see auditor.store.raw_answers
    raw_bytes: Mapped[int | None] = mapped_column(Integer)  # the whole answer's size as JSON
    latency_ms: Mapped[int | None] = mapped_column(Integer)
    input_tokens: Mapped[int] = mapped_column(Integer, default=0)
    output_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cached_tokens: Mapped[int] = mapped_column(Integer, default=0)
    thinking_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cache_write_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cost_usd: Mapped[float | None] = mapped_column()
    credits: Mapped[float | None] = mapped_column()
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # A second, more critical pass (`auditor run --critique`) names the verdict it re-examined.
    critique_of: Mapped[int | None] = mapped_column(Integer, index=True)
    # The provider batch that answered it (`auditor run --batch`): billed at the batch price.
    batch_id: Mapped[int | None] = mapped_column(Integer, index=True)
    # The observer's model came from the agent's own vendor (allowed with --allow-same-vendor
    # when no other was ready; see auditor.audit.observer_choice). NULL: recorded before it was kept.
    same_vendor: Mapped[bool | None] = mapped_column(Boolean)


class Batch(Base):
    """Observer calls sent together through a provider's batch API (`auditor run --batch`).

    `state`: submitting (recorded before the provider was asked, so a run killed meanwhile
    can find it again by `label`), pending (the provider has it: `provider_id`), collected
    (every answer recorded), failed (the provider refused it, or it could not be found) or
    dropped (`auditor batch drop`: no longer waited for). `error`: the provider's latest refusal.
    """

    __tablename__ = "batches"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    observer: Mapped[str] = mapped_column(String(64))
    model: Mapped[str] = mapped_column(String(128))
    label: Mapped[str] = mapped_column(String(64), unique=True)
    provider_id: Mapped[str | None] = mapped_column(String(255))
    state: Mapped[str] = mapped_column(String(16), index=True)
    provider_state: Mapped[str | None] = mapped_column(String(64))
    requests: Mapped[int] = mapped_column(Integer, default=0)
    est_usd: Mapped[float | None] = mapped_column()  # worst case at the batch price
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))
    submitted_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    polled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    collected_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    error: Mapped[str | None] = mapped_column(Text)


class BatchRequest(Base):
    """One checkpoint's call inside a batch; `verdict_id` is set once its answer is recorded."""

    __tablename__ = "batch_requests"
    __table_args__ = (UniqueConstraint("batch_id", "custom_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    batch_id: Mapped[int] = mapped_column(ForeignKey("batches.id", ondelete="CASCADE"))
    position: Mapped[int] = mapped_column(Integer)
    custom_id: Mapped[str] = mapped_column(String(64))
    checkpoint_id: Mapped[int] = mapped_column(
        ForeignKey("checkpoints.id", ondelete="CASCADE"), index=True
    )
    thread_id: Mapped[int] = mapped_column(Integer)
    message_native_id: Mapped[str] = mapped_column(String(255))
    prompt_hash: Mapped[str] = mapped_column(String(64))
    input_hash: Mapped[str] = mapped_column(String(64))
    verdict_id: Mapped[int | None] = mapped_column(Integer)


class Signal(Base):
    """A local signal that fired at a checkpoint (see `auditor.store.signal_rows`); excerpts are redacted."""

    __tablename__ = "signals"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    checkpoint_id: Mapped[int] = mapped_column(
        ForeignKey("checkpoints.id", ondelete="CASCADE"), index=True
    )
    thread_id: Mapped[int] = mapped_column(ForeignKey("threads.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(64), index=True)
    score: Mapped[float] = mapped_column()
    evidence: Mapped[list | None] = mapped_column(JSON)
    detail: Mapped[dict | None] = mapped_column(JSON)
    computed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Event(Base):
    """One entry of the event log (see `auditor.store.events`): what happened, when, to what."""

    __tablename__ = "events"
    __table_args__ = (Index("ix_events_type_at", "type", "at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    type: Mapped[str] = mapped_column(String(32))
    run_id: Mapped[int | None] = mapped_column(Integer)
    thread_id: Mapped[int | None] = mapped_column(Integer, index=True)
    checkpoint_id: Mapped[int | None] = mapped_column(Integer)
    verdict_id: Mapped[int | None] = mapped_column(Integer)
    subject: Mapped[str | None] = mapped_column(Text)
    data: Mapped[dict | None] = mapped_column(JSON)


class Injection(Base):
    """One attempt to deliver a correction (a verdict's message) to the agent.

    `status` is delivered, failed (the injector raised; `error` says why; a later attempt may
    succeed) or skipped (a loop guard held it back; `error` names the guard). A verdict with a
    delivered or skipped row is no longer pending. `turn_key` is the native id of the last
    typed user message before the checkpoint, so corrections in a row can be counted;
    `message_hash` lets the same text never be sent twice to a thread.
    """

    __tablename__ = "injections"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    verdict_id: Mapped[int] = mapped_column(
        ForeignKey("verdicts.id", ondelete="CASCADE"), index=True
    )
    thread_id: Mapped[int] = mapped_column(ForeignKey("threads.id", ondelete="CASCADE"), index=True)
    injector: Mapped[str] = mapped_column(String(64))
    target: Mapped[str | None] = mapped_column(Text)
    turn_key: Mapped[str | None] = mapped_column(String(255))
    message_hash: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16))
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Claim(Base):
    """A lease on one observer call, so that concurrent runs never make the same call twice.

    `key` names the call (checkpoint, observer, model and input hash). A claim whose
    `expires_at` has passed belongs to a run that died and may be taken over.
    """

    __tablename__ = "claims"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(64), unique=True)
    # None for a claim on a whole thread (PostgreSQL workers sharing a run: auditor.audit.run).
    checkpoint_id: Mapped[int | None] = mapped_column(
        ForeignKey("checkpoints.id", ondelete="CASCADE"), index=True
    )
    owner: Mapped[str] = mapped_column(String(255))
    claimed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class SpendReservation(Base):
    """The most an observer call in flight may cost, counted against `budget_per_day` by every
    run until the call's verdict is recorded (auditor.audit.budget.DayCap). A reservation whose
    `expires_at` has passed, or whose owner process is gone, belonged to a run that died."""

    __tablename__ = "spend_reservations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    owner: Mapped[str] = mapped_column(String(255))
    usd: Mapped[float] = mapped_column()
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Label(Base):
    """A person's word on a checkpoint: did it need a course correction? Marked on `auditor
    serve`'s review page (a correction judged right or wrong); `auditor eval` scores observers
    against these labels and `report verdicts` counts the corrections judged each way.

    One label per checkpoint (the thread and the message it ends at, as in a labels file);
    marking it again replaces it. `verdict_id` is the correction that was reviewed.
    """

    __tablename__ = "labels"
    __table_args__ = (UniqueConstraint("thread_id", "message_native_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    thread_id: Mapped[int] = mapped_column(ForeignKey("threads.id", ondelete="CASCADE"))
    message_native_id: Mapped[str] = mapped_column(String(255))
    needs_correction: Mapped[bool] = mapped_column(Boolean)
    verdict_id: Mapped[int | None] = mapped_column(
        ForeignKey("verdicts.id", ondelete="SET NULL"), index=True
    )
    labelled_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
