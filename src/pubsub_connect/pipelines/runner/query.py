"""What the stage runner supervises: a running stage, whatever runs it.

Why a protocol: most stages are Spark streaming queries, but the Pub/Sub pull loop is a set of
Python threads and the archive stage wraps its Spark query to write its open files when it ends.
The runner only needs the few members below; Spark's ``StreamingQuery`` has them all
(structurally), the other stages implement them explicitly.
"""

from __future__ import annotations

from typing import Any, Protocol


class SupervisedQuery(Protocol):
    """The members of a running stage the runner reads (Spark's ``StreamingQuery`` names).

    A Spark query also has ``status`` (``{"isTriggerActive": …}``); the runner watches for stuck
    micro-batches only on queries that have it, so it is not part of the protocol."""

    @property
    def name(self) -> str | None: ...

    @property
    def id(self) -> Any: ...

    @property
    def isActive(self) -> bool: ...

    @property
    def lastProgress(self) -> dict[str, Any] | None: ...

    @property
    def recentProgress(self) -> list[dict[str, Any]]: ...

    def awaitTermination(self, timeout: float | None = None) -> bool | None: ...

    def exception(self) -> BaseException | None: ...

    def stop(self) -> None: ...
