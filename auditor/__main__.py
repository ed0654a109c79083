"""`python -m auditor` runs the command line."""

from .cli import main

main()
