"""X-Request-Id: accepted when safe, generated otherwise, returned on every response."""

import asyncio

import httpx
import pytest
from fastapi import FastAPI, Request

from serving.api.request_id import RequestIdMiddleware, request_id_from


@pytest.mark.parametrize("value", ["abc-123", "0f" * 16, "trace:1/2@x"])
def test_a_safe_client_id_is_kept(value):
    assert request_id_from(value) == value


@pytest.mark.parametrize("value", [None, "", "a" * 129, "evil\nlog line", "{json}", "sp ace"])
def test_a_missing_or_unsafe_id_is_replaced(value):
    new = request_id_from(value)
    assert new != value and len(new) == 32


def app_echoing_the_id() -> FastAPI:
    app = FastAPI()
    app.add_middleware(RequestIdMiddleware)

    @app.get("/echo")
    async def echo(request: Request):
        return {"seen": request.state.request_id}

    return app


def test_the_id_reaches_the_handler_and_the_response():
    async def calls():
        transport = httpx.ASGITransport(app=app_echoing_the_id())
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return (await client.get("/echo", headers={"X-Request-Id": "req-42"}), await client.get("/echo"),
                    await client.get("/nowhere", headers={"X-Request-Id": "req-43"}))

    given, made, missing = asyncio.run(calls())
    assert given.headers["x-request-id"] == given.json()["seen"] == "req-42"
    assert made.headers["x-request-id"] == made.json()["seen"] and len(made.json()["seen"]) == 32
    assert missing.status_code == 404 and missing.headers["x-request-id"] == "req-43"


def test_behind_a_proxy_that_echoes_the_id_it_is_not_added_twice():
    app = FastAPI()
    app.add_middleware(RequestIdMiddleware, echo=False)

    @app.get("/echo")
    async def echo(request: Request):
        return {"seen": request.state.request_id}

    async def call():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return await client.get("/echo", headers={"X-Request-Id": "req-44"})

    response = asyncio.run(call())
    assert response.json()["seen"] == "req-44" and "x-request-id" not in response.headers
