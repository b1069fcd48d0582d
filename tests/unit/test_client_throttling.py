"""The client's back-off on the apiserver's in-flight limit: a RESOURCE_EXHAUSTED carrying a
retry hint (refused before it ran) is sent again after the hint, for any method, within the
call's deadline; one without the hint (it ran: an eviction refused by a disruption budget) is
the caller's answer. A fake stub stands in for the apiserver; time is a fake clock."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from tinykube import errors
from tinykube.client import Client
from tinykube.retry import THROTTLE_JITTER, retry_throttled
from tinykube.v1 import pod_pb2

TOO_MANY = "Too many requests, please try again later."
PDB = "Cannot evict pod as it would violate the pod's disruption budget."


def refusal(pushback: str | None, message: str = TOO_MANY) -> grpc.aio.AioRpcError:
    trailing = grpc.aio.Metadata()
    if pushback is not None:
        trailing.add(errors.RETRY_PUSHBACK_KEY, pushback)
    return grpc.aio.AioRpcError(
        grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.aio.Metadata(), trailing, message
    )


@pytest.mark.parametrize(
    ("pushback", "throttled", "retry_after"),
    [
        ("1000", True, 1.0),
        ("250", True, 0.25),
        ("0", True, 0.0),
        (None, False, None),  # no hint: a RESOURCE_EXHAUSTED that ran
        ("-5", False, None),  # gRFC A6: not a non-negative integer means do not retry
        ("soon", False, None),
        ("1" * 20, False, None),
    ],
)
def test_from_rpc_error_tells_a_limiter_refusal_by_its_pushback(
    pushback: str | None, throttled: bool, retry_after: float | None
) -> None:
    err = errors.from_rpc_error(refusal(pushback))
    assert isinstance(err, errors.ResourceExhaustedError)
    assert isinstance(err, errors.TooManyRequestsError) is throttled
    assert err.message == TOO_MANY
    if retry_after is not None:
        assert isinstance(err, errors.TooManyRequestsError)
        assert err.retry_after == retry_after
    assert not errors.is_retryable(err)  # the tenacity policy never sees it as transient


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.mark.parametrize(
    ("refusals", "budget", "hint", "outcome", "sleeps"),
    [
        (0, 10.0, 1.0, "ok", 0),
        (3, 10.0, 1.0, "ok", 3),
        # Waiting past the deadline is not done: the last refusal is the answer.
        (3, 2.0, 1.0, "throttled", 1),
        (1, 0.5, 1.0, "throttled", 0),
    ],
)
async def test_retry_throttled_waits_the_hint_within_the_budget(
    refusals: int, budget: float, hint: float, outcome: str, sleeps: int
) -> None:
    clock = FakeTime()
    deadlines: list[float] = []

    async def attempt(seconds_left: float) -> str:
        deadlines.append(seconds_left)
        if len(deadlines) <= refusals:
            raise errors.TooManyRequestsError(TOO_MANY, hint)
        return "ok"

    if outcome == "ok":
        result = await retry_throttled(
            attempt, budget=budget, monotonic=clock.monotonic, sleep=clock.sleep
        )
        assert result == "ok"
    else:
        with pytest.raises(errors.TooManyRequestsError):
            await retry_throttled(
                attempt, budget=budget, monotonic=clock.monotonic, sleep=clock.sleep
            )
    assert len(clock.sleeps) == sleeps
    for slept in clock.sleeps:
        assert hint <= slept <= hint * (1 + THROTTLE_JITTER)
    # Each attempt's own deadline is what is left of the budget.
    assert deadlines[0] == budget
    for k, left in enumerate(deadlines[1:]):
        assert left == pytest.approx(budget - sum(clock.sleeps[: k + 1]))


async def test_retry_throttled_does_not_retry_other_errors() -> None:
    clock = FakeTime()
    calls = 0

    async def attempt(seconds_left: float) -> str:
        nonlocal calls
        calls += 1
        raise errors.ResourceExhaustedError(PDB)

    with pytest.raises(errors.ResourceExhaustedError):
        await retry_throttled(attempt, budget=10.0, monotonic=clock.monotonic, sleep=clock.sleep)
    assert calls == 1 and clock.sleeps == []


class RefusingPods:
    """Refuses the first `refusals` calls of any method as the limiter does (pushback 0 ms, so
    no test sleeps), or answers RESOURCE_EXHAUSTED without pushback if `ran`."""

    def __init__(self, refusals: int, *, pushback: str | None = "0") -> None:
        self.refusals = refusals
        self.pushback = pushback
        self.calls: list[tuple[str, float | None]] = []

    def _answer(self, method: str, timeout: float | None, response: Any) -> Any:
        self.calls.append((method, timeout))
        if len(self.calls) <= self.refusals:
            raise refusal(self.pushback, TOO_MANY if self.pushback is not None else PDB)
        return response

    async def Create(self, request: Any, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        return self._answer("Create", timeout, request.pod)

    async def Get(self, request: Any, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        return self._answer("Get", timeout, pod_pb2.Pod())

    async def Update(self, request: Any, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        return self._answer("Update", timeout, request.pod)

    async def Bind(self, request: Any, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        return self._answer("Bind", timeout, pod_pb2.BindResponse(resourceVersion="7"))

    async def Evict(self, request: Any, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        return self._answer("Evict", timeout, pod_pb2.EvictResponse())


@pytest.fixture
async def client() -> AsyncIterator[Client]:
    # The channel never connects: the stub is replaced before any RPC.
    async with Client("127.0.0.1:9", timeout=7.5, retries=0) as c:
        yield c


def _pod(generate: bool = False) -> pod_pb2.Pod:
    p = pod_pb2.Pod()
    if generate:
        p.metadata.generateName = "web-"
    else:
        p.metadata.name = "web"
    p.metadata.namespace = "default"
    return p


async def _call(client: Client, method: str) -> Any:
    if method == "create":
        return await client.pods.create(_pod())
    if method == "create-generate-name":
        return await client.pods.create(_pod(generate=True))
    if method == "update-unconditional":  # no resourceVersion: never retried on a timeout
        return await client.pods.update(_pod())
    if method == "get":
        return await client.pods.get("web", "default")
    if method == "bind":
        return await client.bind("default", "web", "n1")
    raise AssertionError(method)


@pytest.mark.parametrize(
    "method", ["create", "create-generate-name", "update-unconditional", "get", "bind"]
)
async def test_every_method_is_sent_again_after_a_limiter_refusal(
    client: Client, method: str
) -> None:
    fake = RefusingPods(refusals=2)
    client.pods._stub = fake
    await _call(client, method)
    # retries=0: the tenacity policy retries nothing, the throttling loop does.
    assert len(fake.calls) == 3
    # Each attempt's deadline is what is left of the call's.
    assert fake.calls[0][1] == 7.5
    assert all(t is not None and 0 < t <= 7.5 for _, t in fake.calls)


async def test_a_resource_exhausted_that_ran_is_not_retried(client: Client) -> None:
    fake = RefusingPods(refusals=1, pushback=None)
    client.pods._stub = fake
    with pytest.raises(errors.ResourceExhaustedError) as raised:
        await _call(client, "create")
    assert not isinstance(raised.value, errors.TooManyRequestsError)
    assert raised.value.message == PDB
    assert len(fake.calls) == 1


async def test_refusals_past_the_deadline_reach_the_caller(client: Client) -> None:
    # A hint longer than the call's deadline: no second attempt.
    fake = RefusingPods(refusals=5, pushback="60000")
    client.pods._stub = fake
    with pytest.raises(errors.TooManyRequestsError) as raised:
        await _call(client, "get")
    assert raised.value.retry_after == 60.0
    assert len(fake.calls) == 1
