"""The base error of the Pub/Sub and Pub/Sub Lite I/O.

Errors raised here reach users (the CLI, a connector's ``FAILED`` trace), so each is one line
and never contains a secret: ``model.error_text.one_line`` is how an underlying client error
is quoted.
"""

from __future__ import annotations


class PubSubIOError(RuntimeError):
    """A Pub/Sub operation failed at run time. ``str(err)`` is one line, safe to print."""
