"""Commands for live re-injection (`auditor hook ...`, `inject`, `config`)."""

from __future__ import annotations

COMMANDS: list = []
