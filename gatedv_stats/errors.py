"""The one exception type for bad input: its message is the one line the user sees."""


class InputError(ValueError):
    """Bad user input (a file, row or field); the message names it in one line."""
