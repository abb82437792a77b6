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
from serving.errors import EngineError, RequestError


class EngineClient(Protocol):
    def stream(self, request: GenerationRequest) -> AsyncIterator[GenerationChunk]:
        """Chunks of one generation; closing the iterator cancels it in the engine."""
        ...


class ServeHandleEngineClient:
    """Calls the engine deployment's ``generate`` through a DeploymentHandle."""

    def __init__(self, handle: DeploymentHandle) -> None:
        self._handle = handle.options(stream=True)

    async def stream(self, request: GenerationRequest) -> AsyncIterator[GenerationChunk]:
        call = self._handle.options(session_id=request.session_id) if request.session_id else self._handle
        response = call.generate.remote(request)
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
            cause = exc.cause if isinstance(exc, RayTaskError) else None
            if isinstance(cause, RequestError):
                raise cause from None
            raise EngineError(f"engine replica failed: {type(exc).__name__}") from exc
        finally:
            if not finished:
                response.cancel()  # aborts the request inside the engine
