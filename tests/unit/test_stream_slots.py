"""The bound on a connection's write-stream messages (apiserver/flowcontrol.py `ConnectionSlots`,
`MessageGate`) and the stream reader that honours it (apiserver/grpcapi.py
`serve_write_stream`): at most `limit` messages of one connection are handed to handlers at
once, over all its streams; the others wait first come first served, a stream reads nothing
more while its message waits, and a message that waits past its deadline is answered without
running. Slots are never leaked (expiry, cancellation, a slot handed over as its waiter left),
and one connection's full slots hold up no other connection. At the server's graceful stop
(`OpenWriteStreams.end`) every stream stops reading and ends once what it read is answered.

Time is fake (tests/unit/test_flowcontrol_queues.py's `FakeTime`: timers fired by hand); the
waiters and streams are real tasks on the test's event loop, run by yielding to it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from apiserver.flowcontrol import ConnectionSlots, Limiter, MessageGate, QueueLimits
from apiserver.grpcapi import (
    MetricsInterceptor,
    OpenWriteStreams,
    WriteStream,
    _guarded,
    serve_write_stream,
)
from apiserver.metrics import Metrics
from tests.unit.test_flowcontrol_queues import FakeTime
from tinykube.v1 import meta_pb2, pod_pb2
from tinykube.writestream import MESSAGE_TIMEOUT_KEY

DEADLINE_EXCEEDED = grpc.StatusCode.DEADLINE_EXCEEDED.value[0]


async def settle() -> None:
    """Let every runnable task run until it blocks again."""
    for _ in range(20):
        await asyncio.sleep(0)


def _slots(limit: int) -> tuple[ConnectionSlots, FakeTime]:
    time = FakeTime()
    gate = MessageGate(limit, call_later=time.call_later, monotonic=time.monotonic)
    return gate.open("ipv4:127.0.0.1:5000"), time


async def test_take_up_to_the_limit_then_wait_first_come_first_served() -> None:
    slots, time = _slots(2)
    assert slots.take() and slots.take()
    assert not slots.take()
    waiters = [asyncio.ensure_future(slots.wait(10.0)) for _ in range(3)]
    await settle()
    assert slots.waiting == 3 and not any(w.done() for w in waiters)
    slots.release()  # handed straight to the oldest: nothing becomes free
    await settle()
    assert [w.done() for w in waiters] == [True, False, False]
    assert waiters[0].result() is True
    assert slots.running == 2 and slots.waiting == 2
    assert not slots.take()  # a freed slot never jumps the queue
    slots.release()
    slots.release()
    await settle()
    assert [w.result() for w in waiters] == [True, True, True]
    assert slots.running == 2 and slots.waiting == 0
    assert time.pending() == 0  # every waiter's timer was cancelled
    slots.release()
    slots.release()
    assert slots.running == 0


async def test_a_message_waiting_past_its_deadline_is_refused_and_skipped() -> None:
    slots, time = _slots(1)
    assert slots.take()
    early = asyncio.ensure_future(slots.wait(1.0))
    late = asyncio.ensure_future(slots.wait(5.0))
    await settle()
    time.advance(1.0)
    await settle()
    assert early.done() and early.result() is False
    assert slots.waiting == 1 and slots.running == 1
    slots.release()  # skips the expired one, hands the slot to the live one
    await settle()
    assert late.result() is True
    assert slots.running == 1 and slots.waiting == 0
    slots.release()
    assert slots.running == 0
    # no time left: refused at once, never queued
    assert slots.take()
    assert await slots.wait(0.0) is False
    assert slots.waiting == 0 and not slots.waiters


async def test_a_waiter_that_leaves_gives_its_place_and_any_slot_handed_to_it_back() -> None:
    slots, time = _slots(1)
    assert slots.take()
    gone = asyncio.ensure_future(slots.wait(10.0))
    stays = asyncio.ensure_future(slots.wait(10.0))
    await settle()
    gone.cancel()  # the stream ended while its message waited
    await settle()
    assert slots.waiting == 1
    slots.release()
    await settle()
    assert stays.result() is True and slots.running == 1
    # handed a slot in the same turn as it is cancelled: the slot is passed on, not leaked
    third = asyncio.ensure_future(slots.wait(10.0))
    fourth = asyncio.ensure_future(slots.wait(10.0))
    await settle()
    slots.release()  # resolves `third`, whose task has not run yet...
    third.cancel()  # ...and leaves
    await settle()
    assert fourth.result() is True
    assert slots.running == 1 and slots.waiting == 0
    assert time.pending() == 0
    slots.release()
    assert slots.running == 0


async def test_connections_are_bounded_apart_and_forgotten_with_their_last_stream() -> None:
    time = FakeTime()
    gate = MessageGate(1, call_later=time.call_later)
    a1, a2 = gate.open("ipv4:10.0.0.1:1"), gate.open("ipv4:10.0.0.1:1")
    assert a1 is a2  # one connection's streams share its slots
    b = gate.open("ipv4:10.0.0.2:1")
    assert a1.take()
    stuck = [asyncio.ensure_future(a1.wait(3.0)) for _ in range(5)]
    await settle()
    # A connection whose slots are all taken (its waiters expiring) holds nobody else up.
    assert b.take()
    time.advance(3.0)
    await settle()
    assert [s.result() for s in stuck] == [False] * 5
    b.release()
    a1.release()
    assert a1.running == 0 and b.running == 0
    gate.close(a1)
    assert "ipv4:10.0.0.1:1" in gate.connections
    gate.close(a2)
    gate.close(b)
    assert gate.connections == {}
    assert not MessageGate(0).enabled


class FakeStream:
    """A write stream's servicer context: `read` takes the requests `send` queues (EOF after
    `close`), `write` collects the answers; `reads` counts the reads that returned."""

    def __init__(self) -> None:
        self.inbox: asyncio.Queue[Any] = asyncio.Queue()
        self.written: list[bytes] = []
        self.reads = 0

    def send(self, *requests: Any) -> None:
        for request in requests:
            self.inbox.put_nowait(request)

    def close(self) -> None:
        self.inbox.put_nowait(grpc.aio.EOF)

    async def read(self) -> Any:
        request = await self.inbox.get()
        self.reads += 1
        return request

    async def write(self, data: bytes) -> None:
        self.written.append(data)


class Handlers:
    """`answer` for serve_write_stream: each admitted request runs until `finish(name)`."""

    def __init__(self) -> None:
        self.running: set[str] = set()
        self.most = 0
        self.done: dict[str, asyncio.Event] = {}

    async def answer(self, request: str, deadline: float | None, admitted: bool) -> bytes:
        if not admitted:
            return f"{request}:expired".encode()
        self.running.add(request)
        self.most = max(self.most, len(self.running))
        event = self.done.setdefault(request, asyncio.Event())
        try:
            await event.wait()
        finally:
            self.running.discard(request)
        return f"{request}:ok".encode()

    def finish(self, *names: str) -> None:
        for name in names:
            self.done.setdefault(name, asyncio.Event()).set()


async def test_streams_of_one_connection_share_its_slots_and_stop_reading_while_waiting() -> None:
    slots, time = _slots(2)
    handlers = Handlers()
    one, two = FakeStream(), FakeStream()
    serving = [
        asyncio.ensure_future(serve_write_stream(s, handlers.answer, slots, 30.0))
        for s in (one, two)
    ]
    one.send("a1", "a2", "a3", "a4")
    two.send("b1", "b2")
    await settle()
    # Two run (a1, a2); a3 waits for a slot, so stream one has read a3 and nothing after it;
    # b1 waits behind a3, stream two read nothing after b1.
    assert handlers.running == {"a1", "a2"}
    assert one.reads == 3 and two.reads == 1
    assert slots.waiting == 2
    handlers.finish("a1")
    await settle()
    assert handlers.running == {"a2", "a3"}  # the oldest waiter first
    handlers.finish("a2")
    await settle()
    assert handlers.running == {"a3", "b1"}  # then the other stream's, before a4
    handlers.finish("a3", "b1", "a4", "b2")
    one.close()
    two.close()
    await asyncio.gather(*serving)
    assert handlers.most == 2
    assert one.written == [b"a1:ok", b"a2:ok", b"a3:ok", b"a4:ok"]  # in order
    assert two.written == [b"b1:ok", b"b2:ok"]
    assert slots.running == 0 and slots.waiting == 0
    assert time.pending() == 0


async def test_a_message_that_waits_past_its_deadline_is_answered_in_order_unrun() -> None:
    slots, time = _slots(1)
    handlers = Handlers()
    stream = FakeStream()
    serving = asyncio.ensure_future(serve_write_stream(stream, handlers.answer, slots, 2.0))
    stream.send("slow", "late", "next")
    await settle()
    assert handlers.running == {"slow"} and stream.reads == 2
    time.advance(2.0)  # "late" waited its whole deadline for the slot "slow" holds
    await settle()
    assert stream.reads == 3  # the stream reads on
    handlers.finish("slow")
    await settle()
    stream.send("after")  # read when nothing is unanswered: its own deadline, it runs
    await settle()
    handlers.finish("after")
    stream.close()
    await serving
    # "next" was unread behind "late" all along: its deadline is no later than "late"'s.
    assert stream.written == [b"slow:ok", b"late:expired", b"next:expired", b"after:ok"]
    assert "late" not in handlers.done and "next" not in handlers.done  # never ran
    assert slots.running == 0
    assert time.pending() == 0


async def test_a_request_sent_after_its_predecessor_answer_keeps_its_whole_time() -> None:
    """One request at a time (a kubelet's Lease renewals): the next is sent after the answer,
    so the wait its predecessor had for a slot is not counted against it."""
    slots, time = _slots(1)
    handlers = Handlers()
    hog, stream = FakeStream(), FakeStream()
    serving = [
        asyncio.ensure_future(serve_write_stream(s, handlers.answer, slots, 2.0))
        for s in (hog, stream)
    ]
    hog.send("hog")
    await settle()
    stream.send("r1")
    await settle()
    assert slots.waiting == 1
    time.advance(1.5)  # r1 waits 1.5 of its 2 s for the slot
    handlers.finish("hog")
    await settle()
    assert handlers.running == {"r1"}
    handlers.finish("r1")
    await settle()
    assert stream.written == [b"r1:ok"]
    time.advance(1.0)  # past r1's deadline: r2 is the client's next request, sent now
    stream.send("r2")
    await settle()
    assert handlers.running == {"r2"}
    handlers.finish("r2")
    hog.close()
    stream.close()
    await asyncio.gather(*serving)
    assert stream.written == [b"r1:ok", b"r2:ok"]
    assert slots.running == 0 and time.pending() == 0


async def test_a_cancelled_stream_gives_back_every_slot() -> None:
    slots, time = _slots(2)
    handlers = Handlers()
    stream = FakeStream()
    serving = asyncio.ensure_future(serve_write_stream(stream, handlers.answer, slots, 30.0))
    stream.send("x1", "x2", "x3")
    await settle()
    assert slots.running == 2 and slots.waiting == 1
    serving.cancel()
    await asyncio.gather(serving, return_exceptions=True)
    await settle()
    assert slots.running == 0 and slots.waiting == 0
    assert time.pending() == 0


async def test_ending_the_streams_stops_their_reading_and_answers_what_they_read() -> None:
    handlers = Handlers()
    streams = OpenWriteStreams()
    busy, idle = FakeStream(), FakeStream()
    serving = [
        asyncio.ensure_future(serve_write_stream(s, handlers.answer, None, 30.0, streams))
        for s in (busy, idle)
    ]
    busy.send("a1")
    await settle()
    assert handlers.running == {"a1"}
    streams.end()
    busy.send("a2")  # its client wrote it after: never read
    await settle()
    assert serving[1].done() and idle.written == []  # the idle stream ended at once
    assert not serving[0].done()  # a1's answer is still to come
    handlers.finish("a1")
    await asyncio.gather(*serving)  # both ended as their clients' half-close would end them
    assert busy.written == [b"a1:ok"] and busy.reads == 1
    assert streams.reading == set()
    # A stream opened afterwards (before the server stops accepting any) reads nothing.
    late = FakeStream()
    late.send("b1")
    await serve_write_stream(late, handlers.answer, None, 30.0, streams)
    assert late.reads == 0 and late.written == []


async def test_a_stream_cancelled_otherwise_is_cancelled_also_with_the_streams_kept() -> None:
    handlers = Handlers()
    streams = OpenWriteStreams()
    stream = FakeStream()
    serving = asyncio.ensure_future(
        serve_write_stream(stream, handlers.answer, None, 30.0, streams)
    )
    await settle()
    assert streams.reading == {serving}
    serving.cancel()  # (gRPC's: the client went away)
    results = await asyncio.gather(serving, return_exceptions=True)
    assert isinstance(results[0], asyncio.CancelledError)
    assert streams.reading == set()


class FakeContext(FakeStream):
    """A servicer context of one connection (`peer`), for streams and unary calls alike."""

    def __init__(self, peer: str) -> None:
        super().__init__()
        self._peer = peer

    def peer(self) -> str:
        return self._peer

    def time_remaining(self) -> float | None:
        return None

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return ()


def _create(name: str) -> pod_pb2.CreatePodRequest:
    return pod_pb2.CreatePodRequest(
        pod=pod_pb2.Pod(metadata=meta_pb2.ObjectMeta(name=name, namespace="default"))
    )


async def test_stream_messages_and_unary_calls_take_turns_at_the_in_flight_limit() -> None:
    """A connection bursting on write streams and another making a unary call meet in the
    in-flight limit as two flows: the call waits behind one of the burst's messages, not all."""
    time = FakeTime()
    limiter = Limiter(
        1,
        1,
        queues=QueueLimits(per_flow=50, per_level=1000, max_wait=3.0),
        call_later=time.call_later,
        monotonic=time.monotonic,
    )
    gate = MessageGate(3, call_later=time.call_later)
    order: list[str] = []
    finish: dict[str, asyncio.Event] = {}

    async def handle(request: Any, context: Any, identity: Any = None, sink: Any = None) -> Any:
        name = request.pod.metadata.name
        order.append(name)
        await finish.setdefault(name, asyncio.Event()).wait()
        return request.pod

    interceptor = MetricsInterceptor(Metrics(), limiter, None, gate=gate)
    serve: Any = interceptor._write_stream(
        "Pods/CreateStream", WriteStream("/tinykube.v1.Pods/Create", handle)
    )
    unary: Any = _guarded(handle, "/tinykube.v1.Pods/Create", None, limiter)
    burst = FakeContext("ipv4:10.0.0.1:1")
    serving = asyncio.ensure_future(serve(None, burst))
    burst.send(*(_create(f"s{k}") for k in range(6)))
    await settle()
    # s0 runs (the one mutating seat), s1 and s2 wait for it in their connection's flow, s3
    # waits for its connection's slot (3), unread behind it: s4, s5.
    assert order == ["s0"] and burst.reads == 4
    assert waiting_gauge(interceptor) == 1.0
    call = asyncio.ensure_future(unary(_create("u0"), FakeContext("ipv4:10.0.0.2:1")))
    await settle()
    for name in ("s0", "s1", "u0", "s2", "s3", "s4"):
        finish.setdefault(name, asyncio.Event()).set()
        await settle()
    assert order[:5] == ["s0", "s1", "u0", "s2", "s3"]
    assert (await call).metadata.name == "u0"
    finish.setdefault("s5", asyncio.Event()).set()
    burst.close()
    await serving
    assert len(burst.written) == 6
    assert limiter.executing == [0, 0] and gate.connections == {}
    assert waiting_gauge(interceptor) == 0.0


def waiting_gauge(interceptor: MetricsInterceptor) -> float | None:
    registry = interceptor.metrics.registry
    return registry.get_sample_value("apiserver_write_stream_messages_waiting")


class TimedContext(FakeContext):
    """A stream whose client waits `seconds` for each answer (MESSAGE_TIMEOUT_KEY)."""

    def __init__(self, peer: str, seconds: float) -> None:
        super().__init__(peer)
        self.seconds = seconds

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return ((MESSAGE_TIMEOUT_KEY, str(round(self.seconds * 1000))),)


async def test_messages_that_expire_waiting_are_counted_and_never_run() -> None:
    time = FakeTime()
    # (The deadlines on the loop's clock, as the handlers' asyncio.timeout_at needs: only the
    # slot waits' timers are fake.)
    gate = MessageGate(1, call_later=time.call_later)
    ran: list[str] = []
    hold = asyncio.Event()

    async def handle(request: Any, context: Any, identity: Any = None, sink: Any = None) -> Any:
        ran.append(request.pod.metadata.name)
        await hold.wait()
        return request.pod

    interceptor = MetricsInterceptor(Metrics(), None, None, gate=gate)
    serve: Any = interceptor._write_stream(
        "Pods/CreateStream", WriteStream("/tinykube.v1.Pods/Create", handle)
    )
    stream = TimedContext("ipv4:10.0.0.1:1", 2.0)
    serving = asyncio.ensure_future(serve(None, stream))
    stream.send(*(_create(name) for name in ("slow", "late", "stale")))
    await settle()
    assert ran == ["slow"] and stream.reads == 2 and waiting_gauge(interceptor) == 1.0
    time.advance(2.0)  # "late" waited its whole deadline for the slot
    await settle()
    assert stream.reads == 3 and waiting_gauge(interceptor) == 1.0  # "stale" waits now
    time.advance(2.0)
    await settle()
    hold.set()
    stream.close()
    await serving
    assert ran == ["slow"]
    codes = [pod_pb2.PodWriteResult.FromString(data).code for data in stream.written]
    assert codes == [0, DEADLINE_EXCEEDED, DEADLINE_EXCEEDED]
    registry = interceptor.metrics.registry
    expired = "apiserver_write_stream_messages_expired_total"
    assert registry.get_sample_value(expired, {"method": "Pods/CreateStream"}) == 2.0
    assert waiting_gauge(interceptor) == 0.0
