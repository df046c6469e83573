"""The Publish RPC as the connector sends it: the official publisher client, with one override.

Why a subclass reaching into private parts of google's client: the connector needs three things
the Python ``PublisherClient`` has no option for, and the one place where all three can be done
once per batch (never per message) is its private ``_gapic_publish``:

1. gzip compression of Publish requests of at least ``compression_bytes_threshold`` bytes
   (``enableCompression``), applied per call like the Java and Go clients do; the Python client
   has no such option. Sending a compressed call needs the
   transport's wrapped ``publish`` method (``_transport._wrapped_methods``).
2. A bounded retry even with message ordering. The client switches ordered publishes to an
   unbounded deadline (2**32 s). A connector task would then hang for ever on an outage instead
   of failing the micro-batch so that Spark retries it.
3. Message attributes whose names collide with ``publish()`` parameters: they travel under a
   private alias (:func:`alias_reserved_attributes`) and get their names back here.

Everything that depends on the client's private attributes is in this module, so an upgrade of
``google-cloud-pubsub`` is checked here (the integration tests cover all three behaviours).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

#: Attribute names that collide with parameters of ``PublisherClient.publish(topic, data,
#: ordering_key, retry, timeout, **attrs)``. A message attribute with one of these names cannot
#: be passed as a keyword. It would either raise TypeError or, worse, silently become the
#: retry/timeout. Such attributes travel under a private alias and are renamed back right
#: before the RPC (see ``_gapic_publish`` below).
RESERVED_ATTRIBUTE_NAMES = frozenset({"self", "topic", "data", "ordering_key", "retry", "timeout"})
_ALIAS_PREFIX = "\x00pubsub-connect-attr\x00"


def alias_reserved_attributes(attributes: dict[str, str]) -> dict[str, str]:
    """``attributes`` with reserved names under their private alias, safe as ``publish()`` keywords.
    The client must have ``aliased_attributes`` set so that it renames them back."""
    reserved = RESERVED_ATTRIBUTE_NAMES
    return {(_ALIAS_PREFIX + k if k in reserved else k): v for k, v in attributes.items()}


@functools.lru_cache(maxsize=1)
def connector_publisher_class() -> type:
    """The publisher client subclass, created on first use (keeps the import lazy)."""
    import grpc
    from google.api_core import gapic_v1
    from google.cloud import pubsub_v1
    from google.pubsub_v1 import types as gapic_types

    class _ConnectorPublisherClient(pubsub_v1.PublisherClient):  # type: ignore[misc]
        """The official publisher plus the three things of the module docstring, all done in
        ``_gapic_publish``, once per batch and never per message."""

        def __init__(self, *args: Any, connector_retry: Any, connector_timeout: Any,
                     compression_threshold: int | None, **kwargs: Any):
            super().__init__(*args, **kwargs)
            self._connector_retry = connector_retry
            self._connector_timeout = connector_timeout
            self._compression_threshold = compression_threshold
            self.aliased_attributes = False  # set once a message had a reserved attribute name
            self.compressed_requests = 0  # gzip'd Publish calls, by either path (publisher.publish_batches)

        def _gapic_publish(self, *args: Any, **kwargs: Any) -> Any:
            kwargs["retry"] = self._connector_retry
            kwargs["timeout"] = self._connector_timeout
            if self.aliased_attributes:
                kwargs["messages"] = _restore_aliased_attributes(kwargs.get("messages") or ())
            if self._compression_threshold is None:
                return super()._gapic_publish(*args, **kwargs)
            request = gapic_types.PublishRequest(topic=kwargs["topic"], messages=kwargs["messages"])
            if gapic_types.PublishRequest.pb(request).ByteSize() < self._compression_threshold:
                return super()._gapic_publish(request=request, retry=kwargs["retry"],
                                              timeout=kwargs["timeout"])
            # Same steps as the generated PublisherClient.publish, plus compression.
            rpc = self._transport._wrapped_methods[self._transport.publish]
            metadata = (gapic_v1.routing_header.to_grpc_metadata((("topic", request.topic),)),)
            validate = getattr(self, "_validate_universe_domain", None)
            if validate is not None:
                validate()
            self.compressed_requests += 1
            return rpc(request, retry=kwargs["retry"], timeout=kwargs["timeout"], metadata=metadata,
                       compression=grpc.Compression.Gzip)

    return _ConnectorPublisherClient


def _restore_aliased_attributes(messages: Iterable[Any]) -> list[Any]:
    """The messages to send, with aliased attribute names restored on *copies*.

    The originals must stay as they are: the client's flow controller releases each message
    by its byte size. Renaming in place would shrink the size it subtracts, and the byte
    counter would creep up until publishing blocks for ever.
    """
    out = []
    for message in messages:
        raw = type(message).pb(message)
        if not any(k.startswith(_ALIAS_PREFIX) for k in raw.attributes):
            out.append(message)
            continue
        fixed = type(raw)()
        fixed.CopyFrom(raw)
        for key in [k for k in fixed.attributes if k.startswith(_ALIAS_PREFIX)]:
            value = fixed.attributes[key]
            del fixed.attributes[key]
            fixed.attributes[key[len(_ALIAS_PREFIX):]] = value
        out.append(type(message).wrap(fixed))
    return out
