"""The store: its tables, the one door to the database, and what is read back out of it.

Nothing here calls a model or a plugin: the layers above (ingest, audit, live, reports) write
and read through these modules.
"""
