"""The one error type of configuration, and the mask that stands for a secret value.

Why a module of its own: the ``.properties`` reader, the config providers, the key definitions
and the loader all report problems as :class:`ConfigError`, and everything that prints a config
hides secrets behind :data:`MASK`; below all of them, so none imports another for it.
"""

from __future__ import annotations

MASK = "********"


class ConfigError(ValueError):
    """A user-fixable configuration problem. ``str(err)`` is the one-line message to print."""
