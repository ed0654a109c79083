"""auditor: audit coding-agent transcripts with an observer model from another vendor."""

__version__ = "0.1.0"
