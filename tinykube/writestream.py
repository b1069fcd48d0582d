"""The client end of a write stream: requests of one unary write method pipelined on one stream.

A kind's service may declare `<Method>Stream` (Pods/CreateStream, Leases/UpdateStream, ...;
docs/api.md): a stream-stream method whose every message is one request of `<Method>`, run by
the apiserver exactly as that unary call (authorization, in-flight limit, admission,
validation, storage) and answered by one `<Kind>WriteResult`, in order. One call costs both
ends of a grpc.aio connection a few hundred microseconds of CPU before any handler work, a
message on an open stream a fraction of that (bench/callcost.py), and a node's Lease renewal
or a pod's status write is one small request each.

`WriteStream.send(request, timeout)` writes the request and waits for its answer: the object,
or raises the TinykubeError the unary call would have raised (`TooManyRequestsError` with the
retry hint when the in-flight limit refused it). The stream opens on the first send and again
after it broke. When the stream itself fails, every request on it that has no answer fails
with UNAVAILABLE (`UnavailableError`, "may have been applied" as a reset unary call is; the
caller's retry policy decides), except that a stream the apiserver does not serve
(UNIMPLEMENTED: an apiserver older than the method) raises `StreamUnsupported` for every
request, unanswered and unapplied, and `supported` turns False: the caller sends them as unary
calls from then on (tinykube/client.py does). A request whose deadline passes raises
DEADLINE_EXCEEDED; its answer, when it comes, is dropped.

Concurrency: one event loop; any number of tasks may `send` at once (writes are serialized by a
lock so the answers' order is the writes' order); a reader task resolves the answers.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf.message import Message

from tinykube.errors import (
    DeadlineExceededError,
    TinykubeError,
    TooManyRequestsError,
    UnavailableError,
    from_rpc_error,
    from_status,
)

log = logging.getLogger(__name__)

_STATUS_BY_NUMBER: dict[int, grpc.StatusCode] = {c.value[0]: c for c in grpc.StatusCode}

# Stream failures that are the caller's own answer, not the transport's: the stream was refused
# as a whole (who the caller is), so every request on it is refused the same way.
_STREAM_REFUSALS = frozenset((grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED))


# Metadata of a write stream: how long the client waits for each answer (milliseconds); the
# apiserver stops a request past it, as a unary call's deadline stops it
# (apiserver/grpcapi.py reads it under the same name).
MESSAGE_TIMEOUT_KEY = "tinykube-message-timeout-ms"


class StreamUnsupported(Exception):
    """The apiserver does not serve this write stream (UNIMPLEMENTED): the request was not
    applied; send it as the unary call."""


def write_result_type(message: type[Message]) -> type[Message] | None:
    """The `<Kind>WriteResult` message class of a kind's object message, if its .proto has one."""
    import sys

    module = sys.modules.get(message.__module__)
    return getattr(module, f"{message.DESCRIPTOR.name}WriteResult", None)


def declared_methods(message: type[Message], service: str) -> frozenset[str]:
    """The method names `service` (its full name) declares in the .proto of the kind's object
    `message`; none where that module has no file descriptor (a custom kind)."""
    import sys

    from google.protobuf.descriptor import FileDescriptor

    file = getattr(sys.modules.get(message.__module__), "DESCRIPTOR", None)
    if not isinstance(file, FileDescriptor):
        return frozenset()
    found = file.services_by_name.get(service.rpartition(".")[2])
    return frozenset(m.name for m in found.methods) if found is not None else frozenset()


class WriteStream:
    """One `<Service>/<Method>Stream` on one channel (`open_call()` makes the call)."""

    def __init__(
        self,
        open_call: Callable[[], Any],
        result_type: type[Message],
        field: str,
        what: str,
    ) -> None:
        self._open_call = open_call
        self._result_type = result_type
        self._field = field
        self.what = what  # "tinykube.v1.Leases/UpdateStream", for messages
        self._call: Any = None
        # The answers awaited on the current stream, in order (each stream has its own: a
        # stream given up fails only its own requests, never its successor's).
        self._pending: collections.deque[asyncio.Future[Any]] = collections.deque()
        self._lock = asyncio.Lock()
        self._reader: asyncio.Task[None] | None = None
        # Set once the current stream answered (or ended): the apiserver serves it.
        self._served = asyncio.Event()
        self.supported = True
        self.opened = 0  # streams opened so far (tests, metrics)

    async def send(self, request: Message, timeout: float) -> Any:  # noqa: ASYNC109
        """The object the request wrote; raises its error (module docstring). `timeout` covers
        the whole request: its turn to write, the write (which waits while HTTP/2 flow control
        holds the stream: the apiserver reads nothing while its connection's slots are taken)
        and the answer."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        written = False
        try:
            async with asyncio.timeout(timeout):
                async with self._lock:
                    call = await self._writable(loop)
                    # Queued before the write: the answer may be read before write() returns.
                    pending = self._pending
                    pending.append(future)
                    written = True  # (from here on the request may reach the apiserver)
                    await self._write(call, pending, request, future)
                result = await future
        except TimeoutError:
            if future.done() and not future.cancelled():
                future.exception()  # (its stream failed as it timed out: nobody else reads it)
            if not written:
                raise DeadlineExceededError(
                    f"{self.what}: not sent within {timeout:g}s (waiting for its turn to write)"
                ) from None
            raise DeadlineExceededError(
                f"{self.what}: no answer within {timeout:g}s (the write may have been applied)"
            ) from None
        code = result.code
        if code == 0:
            return getattr(result, self._field)
        status = _STATUS_BY_NUMBER.get(code, grpc.StatusCode.UNKNOWN)
        if status == grpc.StatusCode.RESOURCE_EXHAUSTED and result.retryAfterMilliseconds > 0:
            raise TooManyRequestsError(result.message, result.retryAfterMilliseconds / 1000.0)
        raise from_status(status, result.message)

    async def _writable(self, loop: asyncio.AbstractEventLoop) -> Any:
        """The stream to write on (opened if need be); under the lock."""
        while True:
            if not self.supported:
                raise StreamUnsupported(self.what)
            call = self._call
            if call is None:
                call = self._call = self._open_call()
                self.opened += 1
                self._served = asyncio.Event()
                self._pending = collections.deque()
                self._reader = loop.create_task(
                    self._read(call, self._pending), name=f"read {self.what}"
                )
                return call
            if self._served.is_set():
                return call
            # A new stream carries one request until its answer shows the apiserver serves
            # the method: a second write to a call the server ended (UNIMPLEMENTED) makes
            # grpc.aio end it locally as INTERNAL instead, hiding why.
            await self._served.wait()

    async def _write(
        self,
        call: Any,
        pending: collections.deque[asyncio.Future[Any]],
        request: Message,
        future: asyncio.Future[Any],
    ) -> None:
        """Write `request`, whose answer `future` (queued in `call`'s `pending`) waits for;
        under the lock."""
        try:
            await call.write(request)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                # Cancelled (or timed out) under the write: whether the message left is
                # unknown, so which answer is whose is too: this stream is done (its other
                # requests fail UNAVAILABLE).
                self._fail(call, pending, UnavailableError(f"{self.what}: a write was cancelled"))
                raise
            # The reader closed the stream under the write.
            if not future.done():
                future.set_exception(UnavailableError(f"{self.what}: the stream was closed"))
        except Exception as exc:  # the stream ended under the write (RpcError, UsageError)
            # The reader fails it with the stream's own status (the write's error is often
            # core's "Internal error" for a call that ended, UNIMPLEMENTED among them), unless
            # it is gone already.
            reader = self._reader
            if (reader is None or reader.done()) and not future.done():
                future.set_exception(self._stream_error(exc))

    async def _read(self, call: Any, pending: collections.deque[asyncio.Future[Any]]) -> None:
        served = self._served
        try:
            while True:
                result = await call.read()
                if result is grpc.aio.EOF:
                    raise UnavailableError(f"{self.what}: the apiserver ended the stream")
                served.set()
                future = pending.popleft()
                if not future.done():  # (its sender gave up: timed out or cancelled)
                    future.set_result(result)
        except asyncio.CancelledError:
            self._fail(call, pending, UnavailableError(f"{self.what}: the stream was closed"))
            raise
        except grpc.RpcError as exc:
            self._fail(call, pending, exc)
        except Exception as exc:
            self._fail(call, pending, exc)

    def _stream_error(self, exc: BaseException) -> BaseException:
        """What a request that got no answer on a failed stream raises."""
        if not isinstance(exc, grpc.RpcError):
            return exc
        code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
        details = (exc.details() if hasattr(exc, "details") else "") or ""
        if code == grpc.StatusCode.UNIMPLEMENTED:
            return StreamUnsupported(self.what)
        err: TinykubeError
        if code in _STREAM_REFUSALS or code == grpc.StatusCode.UNAVAILABLE:
            # The transport's own words stay (a connection that never came up proves the
            # request unsent: tinykube.retry.is_unsent).
            err = from_rpc_error(exc)
        else:
            # CANCELLED (the apiserver stopped) or anything else: the stream is gone, the
            # request may or may not have been applied; retried as a reset unary call is.
            err = UnavailableError(f"{self.what}: stream ended with {code.name}: {details}")
        err.__cause__ = exc  # (the client explains a TLS mismatch from it)
        return err

    def _fail(
        self, call: Any, pending: collections.deque[asyncio.Future[Any]], exc: BaseException
    ) -> None:
        """The stream `call` is over: fail its unanswered requests (`pending`), forget it."""
        unimplemented = grpc.StatusCode.UNIMPLEMENTED
        if isinstance(exc, grpc.RpcError) and getattr(exc, "code", lambda: None)() == unimplemented:
            if self.supported:
                log.info("apiserver does not serve %s; unary calls instead", self.what)
            self.supported = False
        if self._call is call:
            self._call = None
            self._reader = None
            self._served.set()  # senders waiting on this stream look again
        while pending:
            future = pending.popleft()
            if not future.done():
                future.set_exception(self._stream_error(exc))
        call.cancel()

    async def close(self) -> None:
        """Cancel the stream (unanswered requests fail UNAVAILABLE)."""
        reader, self._reader = self._reader, None
        call, self._call = self._call, None
        if call is not None:
            call.cancel()
        if reader is not None:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
