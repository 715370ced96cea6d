"""Errors a user can fix: the CLI prints them as one ``Error: ...`` line and exits 1."""


class UserError(Exception):
    """A problem with the user's input or environment, with a message that names the fix."""
