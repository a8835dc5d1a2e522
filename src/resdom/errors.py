"""The one exception type for a user's mistake (bad file, bad id, bad config value, mismatched checkpoint).

The CLI prints its message on one line and exits with status 2; no traceback is shown. Raise it at the
boundary where the input is read, and name the file, line or field in the message.
"""


class ResdomError(Exception):
    """A user-facing error: the message says what is wrong and where (file:line, field name)."""
