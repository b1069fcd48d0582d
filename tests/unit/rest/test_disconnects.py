"""A client that goes away mid-response is normal life (issue 22): the REST front end logs it at
DEBUG and answers nobody, where it logged `ERROR REST GET /api/v1/pods failed` with a
ClientConnectionResetError traceback. A connection error while the client is still there is
still a failure, logged with its traceback and answered 500."""

from __future__ import annotations

import logging
from unittest import mock

import pytest
from aiohttp import web
from aiohttp.client_exceptions import ClientConnectionResetError
from aiohttp.test_utils import make_mocked_request

from apiserver.metrics import Metrics
from apiserver.rest.app import RestServer
from apiserver.settings import Settings
from tinykube.clock import Clock


def _server() -> RestServer:
    return RestServer({}, settings=Settings(), clock=Clock(), metrics=Metrics(), health=dict)


def _request(closing: bool) -> web.Request:
    transport = mock.Mock()
    transport.is_closing.return_value = closing
    return make_mocked_request("GET", "/api/v1/pods?watch=true", transport=transport)


async def _gone(request: web.Request) -> web.StreamResponse:
    raise ClientConnectionResetError("Cannot write to closing transport")


async def test_a_client_gone_mid_response_is_logged_at_debug_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.DEBUG, logger="apiserver.rest.app"):
        response = await _server()._errors(_request(closing=True), _gone)
    assert response.status == 499
    assert [r.levelno for r in caplog.records] == [logging.DEBUG]
    assert not any(r.exc_info for r in caplog.records)
    assert "client went away" in caplog.records[0].getMessage()


async def test_a_connection_error_with_the_client_still_there_is_a_500(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.DEBUG, logger="apiserver.rest.app"):
        response = await _server()._errors(_request(closing=False), _gone)
    assert response.status == 500
    assert [r.levelno for r in caplog.records] == [logging.ERROR]
