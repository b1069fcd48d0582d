"""Property-based fuzzing of every gRPC method of every kind's service, against a real apiserver.

Each method (read from the services' descriptors, so a new method or kind is fuzzed without an
edit) gets requests generated from its input message's descriptor, raw bytes that are not a
valid message, and, for the writes, a valid object with one field mutated. Passes only if no
answer is a server fault (INTERNAL, UNKNOWN, UNIMPLEMENTED, DATA_LOSS, UNAVAILABLE, or a unary
call outliving its deadline), the apiserver logged no traceback or ERROR, it is still healthy,
every object it stored passes its own validation, and every kind still lists (as JSON and
as a Table) over REST: what gRPC stored, JSON can print.

Deterministic (a fixed seed per test) and bounded: about 25 examples per method. For a longer
local run: `TINYKUBE_FUZZ_EXAMPLES=20 pytest tests/integration/test_fuzz_grpc.py` (20 times as
many), `TINYKUBE_FUZZ_SEED=random` for examples CI never ran (a failure names its seed).
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from typing import cast

import grpc
import pytest
from google.protobuf.descriptor import MethodDescriptor
from hypothesis import strategies as st

from tests.integration.fuzzing import (
    SEED_NAME,
    SERVER_FAULTS,
    UNSEEDED,
    FuzzTarget,
    example_count,
    fuzz,
    fuzz_target,
    messages,
    mutated,
    request_for,
    valid_object,
    weighted,
)
from tinykube.kinds import ALL_KINDS, KindInfo
from tinykube.localetcd import EtcdServer

pytestmark = pytest.mark.integration

EXAMPLES = 25
WRITES = ("Create", "Update", "UpdateStatus")


def _methods() -> list[tuple[KindInfo, MethodDescriptor]]:
    found: list[tuple[KindInfo, MethodDescriptor]] = []
    for info in ALL_KINDS:
        if info.kind in UNSEEDED:
            continue
        service = info.message.DESCRIPTOR.file.pool.FindServiceByName(info.service)
        found.extend((info, cast(MethodDescriptor, m)) for m in service.methods)
    return found


METHODS = _methods()
_names = itertools.count()


@pytest.fixture(scope="module")
async def target(etcd_server: EtcdServer) -> AsyncIterator[FuzzTarget]:
    async with fuzz_target(etcd_server.endpoint, rest=True) as t:
        yield t


def _requests(info: KindInfo, method: MethodDescriptor) -> st.SearchStrategy[tuple[str, bytes]]:
    """(source, body): a generated request, raw bytes, or (writes) a mutated valid object."""
    generated = messages(method.input_type).map(lambda m: ("generated", m.SerializeToString()))
    raw = st.binary(max_size=256).map(lambda b: ("raw", b))
    choices = [(4, generated), (1, raw)]
    if method.name in WRITES:
        seed = valid_object(info, SEED_NAME)
        choices.append((5, mutated(seed).map(lambda m: ("mutated", m.SerializeToString()))))
    return weighted(*choices)


async def _send(
    target: FuzzTarget, info: KindInfo, method: MethodDescriptor, source: str, body: bytes
) -> tuple[grpc.StatusCode, str]:
    if source == "mutated":
        # Creates get a fresh name (else every one after the first is AlreadyExists); updates
        # target the stored seed, recreated if a fuzzed Delete removed it.
        obj = info.message.FromString(body)
        if method.name == "Create":
            if obj.metadata.name == SEED_NAME:  # type: ignore[attr-defined]
                obj.metadata.name = f"m{next(_names)}"  # type: ignore[attr-defined]
            body = request_for(info, obj, info.create_request).SerializeToString()
        else:
            await target.ensure(info)
            body = request_for(info, obj, info.update_request).SerializeToString()
    if method.server_streaming:
        return await target.stream(info.service, method.name, body)
    return await target.unary(info.service, method.name, body)


@pytest.mark.parametrize(
    ("info", "method"), METHODS, ids=[f"{i.service.split('.')[-1]}.{m.name}" for i, m in METHODS]
)
async def test_grpc_method_answers_fuzzed_requests_without_server_faults(
    target: FuzzTarget, info: KindInfo, method: MethodDescriptor
) -> None:

    async def check(example: tuple[str, bytes]) -> None:
        source, body = example
        code, details = await _send(target, info, method, source, body)
        assert code not in SERVER_FAULTS, f"{method.full_name} ({source}): {code.name}: {details}"
        if not method.server_streaming:
            assert code != grpc.StatusCode.DEADLINE_EXCEEDED, f"{method.full_name} hung"

    await fuzz(
        target,
        _requests(info, method),
        check,
        examples=example_count(EXAMPLES),
        name=f"grpc_{info.kind}_{method.name}",
    )
