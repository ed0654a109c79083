"""auditor's built-in plugins, registered through the `auditor` entry-point group like any other."""
