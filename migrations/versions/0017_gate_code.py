"""checkpoints.gate_code: the gate's reason without its particulars, what reports count by

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-27 03:50:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("checkpoints", sa.Column("gate_code", sa.String(length=128), nullable=True))
    # Decisions recorded before the gate gave a code: the built-in gate's reasons carry their
    # particulars after " (" ("too-few-tool-calls (3 < 5)"), so the code is the text before.
    if op.get_bind().dialect.name == "postgresql":
        code = "split_part(gate_reason, ' (', 1)"
    else:
        code = (
            "CASE WHEN instr(gate_reason, ' (') > 0 "
            "THEN substr(gate_reason, 1, instr(gate_reason, ' (') - 1) ELSE gate_reason END"
        )
    op.execute(f"UPDATE checkpoints SET gate_code = {code}")


def downgrade() -> None:
    with op.batch_alter_table("checkpoints", schema=None) as batch_op:
        batch_op.drop_column("gate_code")
