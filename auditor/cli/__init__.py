"""The `auditor` command line: a thin layer over the library, with its terminal rendering."""
