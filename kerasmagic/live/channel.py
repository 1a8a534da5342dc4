"""Placeholder until the sidebar channel lands: registering is a no-op."""


def register(shell) -> None:
    return None


def unregister(shell) -> None:
    return None
