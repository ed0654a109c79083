"""`python -m auditor` runs the command line (a hook event takes the fast path)."""

from .entry import main

main()
