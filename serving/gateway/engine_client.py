"""The gateway's seam to the engine replicas: a stream of chunks per request.

Production uses :class:`ServeHandleEngineClient` (a Ray Serve DeploymentHandle, so
Serve's request router picks the replica). Unit tests pass a fake that implements
:class:`EngineClient`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from ray.exceptions import RayActorError, RayTaskError
from ray.serve.handle import DeploymentHandle

from serving.engine.protocol import GenerationChunk, GenerationRequest
from serving.errors import EngineError, ReplicaFailedError, RequestError
from serving.routing.serve_router import AVOID_REPLICA_KWARG


class EngineClient(Protocol):
    retries_elsewhere: bool
    """Whether a request whose replica died can be sent again through this client
    (False for the engine in the gateway's own process: the retry is HAProxy's)."""

    def stream(
        self, request: GenerationRequest, *, avoid_replica: str | None = None
    ) -> AsyncIterator[GenerationChunk]:
        """Chunks of one generation; closing the iterator cancels it in the engine.

        A replica that dies raises :class:`ReplicaFailedError`; ``avoid_replica`` asks the
        router not to use that replica (a retry names the one that failed).
        """
        ...


class ServeHandleEngineClient:
    """Calls the engine deployment's ``generate`` through a DeploymentHandle."""

    retries_elsewhere = True

    def __init__(self, handle: DeploymentHandle) -> None:
        self._handle = handle.options(stream=True)

    async def stream(
        self, request: GenerationRequest, *, avoid_replica: str | None = None
    ) -> AsyncIterator[GenerationChunk]:
        call = self._handle.options(session_id=request.session_id) if request.session_id else self._handle
        kwargs = {AVOID_REPLICA_KWARG: avoid_replica} if avoid_replica else {}
        response = call.generate.remote(request, **kwargs)
        finished = False
        try:
            async for chunk in response:
                yield chunk
            finished = True
        except RequestError:
            finished = True
            raise
        except (RayTaskError, RayActorError) as exc:
            finished = True
            raise engine_error(exc) from exc
        finally:
            if not finished:
                response.cancel()  # aborts the request inside the engine


def engine_error(exc: RayTaskError | RayActorError) -> RequestError:
    """The serveout error for a failed handle call: the replica's own error when it sent
    one, :class:`ReplicaFailedError` when its actor died, else :class:`EngineError`."""
    cause = exc.cause if isinstance(exc, RayTaskError) else None
    if isinstance(cause, RequestError):
        return cause
    if isinstance(exc, RayActorError) or isinstance(cause, RayActorError):
        return ReplicaFailedError(f"engine replica failed: {type(exc).__name__}", reason="actor_died")
    return EngineError(f"engine replica failed: {type(exc).__name__}")
