"""signals, the event log, and verdicts.critique_of

Signals are local checks stored per checkpoint (`auditor.store.signal_rows`); events are the typed log of
what auditor did (`auditor.store.events`); `critique_of` links a second-pass verdict to the verdict it
re-examined. Event ids and `critique_of` are plain integers, not foreign keys: the log must
outlive what it refers to, and adding a foreign key to `verdicts` would make SQLite rebuild the
table under the report views.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23 10:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "signals",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("checkpoint_id", sa.Integer(), nullable=False),
        sa.Column("thread_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("score", sa.Double(), nullable=False),
        sa.Column("evidence", sa.JSON(), nullable=True),
        sa.Column("detail", sa.JSON(), nullable=True),
        sa.Column("computed_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["checkpoint_id"],
            ["checkpoints.id"],
            name=op.f("fk_signals_checkpoint_id_checkpoints"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["thread_id"],
            ["threads.id"],
            name=op.f("fk_signals_thread_id_threads"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_signals")),
    )
    with op.batch_alter_table("signals", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_signals_checkpoint_id"), ["checkpoint_id"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_signals_thread_id"), ["thread_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_signals_name"), ["name"], unique=False)

    op.create_table(
        "events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("type", sa.String(length=32), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("thread_id", sa.Integer(), nullable=True),
        sa.Column("checkpoint_id", sa.Integer(), nullable=True),
        sa.Column("verdict_id", sa.Integer(), nullable=True),
        sa.Column("subject", sa.Text(), nullable=True),
        sa.Column("data", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_events")),
    )
    with op.batch_alter_table("events", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_events_at"), ["at"], unique=False)
        batch_op.create_index(batch_op.f("ix_events_thread_id"), ["thread_id"], unique=False)
        batch_op.create_index("ix_events_type_at", ["type", "at"], unique=False)

    # A plain ADD COLUMN: no table rebuild, so the views over `verdicts` stay valid.
    op.add_column("verdicts", sa.Column("critique_of", sa.Integer(), nullable=True))
    op.create_index(op.f("ix_verdicts_critique_of"), "verdicts", ["critique_of"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_verdicts_critique_of"), table_name="verdicts")
    # A plain DROP COLUMN (SQLite 3.35+): a batch rebuild would break the views over `verdicts`.
    op.drop_column("verdicts", "critique_of")
    with op.batch_alter_table("events", schema=None) as batch_op:
        batch_op.drop_index("ix_events_type_at")
        batch_op.drop_index(batch_op.f("ix_events_thread_id"))
        batch_op.drop_index(batch_op.f("ix_events_at"))
    op.drop_table("events")
    with op.batch_alter_table("signals", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_signals_name"))
        batch_op.drop_index(batch_op.f("ix_signals_thread_id"))
        batch_op.drop_index(batch_op.f("ix_signals_checkpoint_id"))
    op.drop_table("signals")
