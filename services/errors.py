"""Errors a user can cause (bad file, no server, busy port...).

``services.cli.main`` prints ``str(error)`` as one line on stderr and exits non-zero, with
no traceback. Anything else is a bug and keeps its traceback.
"""


class UserError(Exception):
    """One line that says what is wrong and what to do about it."""

    exit_code = 1
