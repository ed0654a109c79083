"""The errors auditor raises. The CLI turns each into one line on stderr."""


class AuditorError(Exception):
    """Base class: a problem the user can fix; the message says how."""


class DatabaseError(AuditorError):
    """The database cannot be opened or is at a schema this code does not know."""


class StoreLost(DatabaseError):
    """The store's server went away mid-command and did not come back in time."""


class ObserverDown(AuditorError):
    """A run stopped calling an observer that could not be reached several times in a row."""


class StoreGone(DatabaseError):
    """The SQLite store's file was deleted while a command wrote to it."""


class FormatError(AuditorError):
    """A transcript could not be read: unknown format, or a format forced on the wrong file."""


class PluginError(AuditorError):
    """A plugin is missing, misnamed or broken."""


class AmbiguousName(AuditorError):
    """A short name given on the command line (a thread or message id prefix) fits several."""


class UnknownName(AuditorError):
    """A name given on the command line (format, observer, thread) does not exist."""

    def __init__(self, kind: str, name: str, available: list[str] | None = None):
        self.kind, self.name, self.available = kind, name, available or []
        msg = f"{name!r} is not a known {kind}."
        if self.available:
            msg += " Available: " + ", ".join(sorted(self.available))
        super().__init__(msg)
