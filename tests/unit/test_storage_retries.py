"""Storage's retries over a scripted etcd KV stub: reads are retried, guarded writes are sent
again, and a resend that fails its compare because an earlier attempt of the same write was
applied is reported as the success it was (and only then)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import pytest
from aetcd import rpc

from apiserver.metrics import Metrics
from apiserver.storage import Storage, cluster_target
from tinykube.errors import InternalError, UnavailableError

KEY = b"/registry/pods/default/web"
OURS = b"our bytes"


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


def failed(value: bytes | None, mod_revision: int, revision: int = 20) -> Any:
    """A TxnResponse whose compare failed, its failure read showing `value` (None: absent)."""
    kv = rpc.KeyValue(key=KEY, value=value, mod_revision=mod_revision, create_revision=mod_revision)
    kvs = [kv] if value else []
    return rpc.TxnResponse(
        header=rpc.ResponseHeader(revision=revision),
        succeeded=False,
        responses=[rpc.ResponseOp(response_range=rpc.RangeResponse(kvs=kvs))],
    )


def succeeded(revision: int) -> Any:
    return rpc.TxnResponse(header=rpc.ResponseHeader(revision=revision), succeeded=True)


class ScriptedKV:
    """Answers each call with the next scripted step: an exception to raise or a response."""

    def __init__(self, script: list[Any]) -> None:
        self.script = list(script)
        self.calls = 0

    async def _next(self, *args: object, **kwargs: object) -> Any:
        self.calls += 1
        step = self.script.pop(0)
        if isinstance(step, BaseException):
            raise step
        return step

    Txn = _next
    Range = _next


async def no_sleep(seconds: float) -> None:
    pass


def storage(script: list[Any]) -> tuple[Storage, ScriptedKV]:
    s = Storage(
        ["10.0.0.1:2379", "10.0.0.2:2379", "10.0.0.3:2379"],
        timeout=5.0,
        metrics=Metrics(),
        batch_writes=False,
    )
    kv = ScriptedKV(script)
    s._kv = kv
    s.sleep = no_sleep
    return s, kv


LOST = rpc_error(grpc.StatusCode.UNAVAILABLE, "Stream removed")
TIMED_OUT = rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
UNKNOWN = rpc_error(grpc.StatusCode.UNKNOWN, "raft proposal dropped")
CREATE = ("create", lambda s: s.create(KEY, OURS))
UPDATE = ("update", lambda s: s.update(KEY, OURS, 10))
DELETE = ("delete", lambda s: s.delete(KEY, 10))

Write = tuple[str, Callable[[Storage], Any]]


@pytest.mark.parametrize(
    ("write", "script", "ok", "revision"),
    [
        # The first attempt was applied, its answer lost: the resend finds our bytes.
        (CREATE, [LOST, failed(OURS, 15)], True, 15),
        (UPDATE, [TIMED_OUT, failed(OURS, 15)], True, 15),
        (UPDATE, [UNKNOWN, failed(OURS, 15)], True, 15),
        (DELETE, [LOST, failed(None, 0, revision=16)], True, 16),
        # The first attempt was not applied: the resend does the write.
        (CREATE, [LOST, succeeded(17)], True, 17),
        (UPDATE, [LOST, LOST, succeeded(18)], True, 18),
        # Someone else's write won: a conflict, retried or not.
        (UPDATE, [LOST, failed(b"theirs", 15)], False, 20),
        (CREATE, [failed(b"theirs", 15)], False, 20),
        # Without a failed attempt, even our own bytes are someone else's write (two
        # identical updates from one base: the second is a conflict, as etcd said).
        (UPDATE, [failed(OURS, 15)], False, 20),
        # Our bytes at the revision the update was based on: the update did not happen
        # (a required key was missing, say).
        (UPDATE, [LOST, failed(OURS, 10)], False, 20),
        (DELETE, [failed(None, 0)], False, 20),
    ],
)
async def test_a_resent_write_knows_its_own_earlier_attempt(
    write: Write, script: list[Any], ok: bool, revision: int
) -> None:
    s, kv = storage(script)
    result = await write[1](s)
    assert (result.succeeded, result.revision) == (ok, revision)
    assert kv.script == []
    assert s.retries.get(write[0], 0) == sum(isinstance(x, BaseException) for x in script)


async def test_a_failure_after_a_failed_attempt_says_it_may_be_its_own() -> None:
    # Our create landed, then someone changed the object, then the resend arrived: storage
    # cannot tell by the bytes, so it says so and the caller looks at the object.
    s, _ = storage([LOST, failed(b"bound since", 16)])
    result = await s.create(KEY, OURS)
    assert not result.succeeded and result.maybe_applied
    s, _ = storage([failed(b"theirs", 16)])
    assert not (await s.create(KEY, OURS)).maybe_applied


async def test_a_refused_write_is_not_sent_again() -> None:
    too_many = rpc_error(grpc.StatusCode.INVALID_ARGUMENT, "etcdserver: too many operations")
    s, kv = storage([too_many, succeeded(1)])
    with pytest.raises(InternalError):
        await s.update(KEY, OURS, 10)
    assert kv.calls == 1


async def test_reads_are_retried_until_the_timeout_is_spent() -> None:
    answer = rpc.RangeResponse(header=rpc.ResponseHeader(revision=7))
    s, kv = storage([LOST, rpc_error(grpc.StatusCode.UNAVAILABLE, "etcdserver: no leader"), answer])
    assert await s.current_revision() == 7
    assert s.retries == {"revision": 2}
    # A health probe asks once.
    s, kv = storage([LOST, answer])
    with pytest.raises(UnavailableError):
        await s.current_revision(retry=False)
    assert kv.calls == 1


@pytest.mark.parametrize(
    ("endpoints", "target"),
    [
        (["127.0.0.1:2379", "127.0.0.1:2381"], "ipv4:127.0.0.1:2379,127.0.0.1:2381"),
        # Names (a compose file's members) are resolved once: gRPC has no list-of-names resolver.
        (["localhost:2379", "10.0.0.2:2379"], "ipv4:127.0.0.1:2379,10.0.0.2:2379"),
    ],
)
def test_the_target_of_several_members(endpoints: list[str], target: str) -> None:
    assert cluster_target(endpoints) == target


def test_a_member_that_is_not_host_port_is_refused() -> None:
    with pytest.raises(ValueError, match="not host:port"):
        cluster_target(["127.0.0.1", "127.0.0.1:2379"])
