"""Ingest: transcript files found on disk, parsed by the format plugins, written into the store."""
