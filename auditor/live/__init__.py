"""Live re-injection: the agents' hooks (the fast path, the session worker, the synchronous
hook), delivering corrections to running agents, and installing the hooks.
"""
