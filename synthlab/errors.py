"""Errors the command line turns into exit codes."""


class UsageError(ValueError):
    """Bad input from the user: the CLI prints the message on one line and exits with 2.

    Every validation in synthlab raises ValueError (this class or a plain one); the CLI maps
    ValueError to exit code 2, anything else to exit code 1.
    """
