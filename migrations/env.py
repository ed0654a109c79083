"""Alembic environment, configured in code by `auditor.db` (no alembic.ini needed)."""

from alembic import context
from sqlalchemy import engine_from_config, pool

from auditor.store.schema import Base

config = context.config
target_metadata = Base.metadata


def _legacy_alter_table(connection) -> None:
    if connection.dialect.name == "sqlite":
        # Batch migrations rebuild tables by rename; the report views must keep pointing at
        # the table names, not follow the renamed copies.
        connection.exec_driver_sql("PRAGMA legacy_alter_table=ON")


def _configure(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _legacy_alter_table(connection)
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = engine_from_config(
        config.get_section(config.config_ini_section, {}),
        prefix="sqlalchemy.",
        poolclass=pool.NullPool,
    )
    with engine.connect() as conn:
        _legacy_alter_table(conn)
        conn.commit()  # the pragma must not leave a transaction open for Alembic's own
        _configure(conn)
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=target_metadata,
        literal_binds=True,
    )
    with context.begin_transaction():
        context.run_migrations()
else:
    run_migrations_online()
