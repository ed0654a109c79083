"""Transcript format plugin (being written)."""
