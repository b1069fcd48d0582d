"""Which client calls are retried, and how a retry recognises its own earlier success.

A fake Pods stub (no I/O) applies each request to an in-memory store, as the apiserver would,
and then loses the answer of the first `lost` calls (DEADLINE_EXCEEDED or a reset stream): the
request landed, the caller does not know it.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from tinykube import errors
from tinykube.client import BindItem, Client
from tinykube.retry import Attempts, is_unsent, may_have_landed
from tinykube.v1 import pod_pb2

# What grpc.aio reported against a real server (see tinykube/retry.py): never started or
# stopped before the call, SIGKILLed mid-call, GOAWAY from server.stop(0) mid-call.
REFUSED = (
    "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:9: "
    "Failed to connect to remote host: Connection refused"
)
RESET = "Stream removed (Socket closed)"
GOAWAY = "Cancelling all calls"


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


@pytest.mark.parametrize(
    ("code", "details", "unsent"),
    [
        (grpc.StatusCode.UNAVAILABLE, REFUSED, True),
        (grpc.StatusCode.UNAVAILABLE, "DNS resolution failed for nowhere:1: C-ares", True),
        (grpc.StatusCode.UNAVAILABLE, RESET, False),
        (grpc.StatusCode.UNAVAILABLE, GOAWAY, False),
        (grpc.StatusCode.UNAVAILABLE, "etcd is unavailable", False),
        (grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded", False),
        (grpc.StatusCode.ALREADY_EXISTS, REFUSED, False),
    ],
)
def test_is_unsent_only_for_a_call_that_found_no_connection(
    code: grpc.StatusCode, details: str, unsent: bool
) -> None:
    raw = rpc_error(code, details)
    assert is_unsent(raw) is unsent
    assert is_unsent(errors.from_rpc_error(raw)) is unsent


@pytest.mark.parametrize(
    ("code", "details", "landed"),
    [
        (grpc.StatusCode.UNAVAILABLE, REFUSED, False),  # never left
        (grpc.StatusCode.UNAVAILABLE, RESET, True),
        (grpc.StatusCode.UNAVAILABLE, GOAWAY, True),
        (grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded", True),
        (grpc.StatusCode.CANCELLED, "the apiserver stopped", True),  # the server's cancel
        (grpc.StatusCode.ABORTED, "the object has been modified", False),  # its answer
        (grpc.StatusCode.ALREADY_EXISTS, "exists", False),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, "Too many requests", False),  # refused unrun
    ],
)
def test_may_have_landed_and_an_ambiguous_attempt_are_one_rule(
    code: grpc.StatusCode, details: str, landed: bool
) -> None:
    raw = rpc_error(code, details)
    for exc in (raw, errors.from_rpc_error(raw)):
        assert may_have_landed(exc) is landed
        attempts = Attempts()
        attempts.failed(exc)
        assert attempts.ambiguous is landed
    assert may_have_landed(ValueError("not a call's")) is False


def make_pod(name: str = "web", *, generate: str = "", label: str = "web") -> pod_pb2.Pod:
    p = pod_pb2.Pod()
    p.metadata.name = name
    p.metadata.generateName = generate
    p.metadata.namespace = "default"
    p.metadata.labels["app"] = label
    p.spec.containers.add(name="c", image="pause")
    return p


class FakePods:
    """Pods/Create, Get, Update, Bind, BindBatch over a dict; the first `lost` calls are applied
    and then fail with `loss` (their answer never reaches the client)."""

    def __init__(self, lost: int = 0, loss: str = "deadline") -> None:
        self.store: dict[str, pod_pb2.Pod] = {}
        self.lost = lost
        self.loss = loss
        self.calls: list[str] = []
        self.rv = 10
        self.serial = 0

    def _answer(self, method: str, response: Any) -> Any:
        self.calls.append(method)
        if len(self.calls) <= self.lost:
            if self.loss == "deadline":
                raise rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
            raise rpc_error(grpc.StatusCode.UNAVAILABLE, RESET)
        if isinstance(response, grpc.aio.AioRpcError):
            raise response
        return response

    def _bump(self, p: pod_pb2.Pod) -> None:
        self.rv += 1
        p.metadata.resourceVersion = str(self.rv)

    async def Create(self, request: Any, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        p = pod_pb2.Pod()
        p.CopyFrom(request.pod)
        if not p.metadata.name:
            self.serial += 1
            p.metadata.name = f"{p.metadata.generateName}x{self.serial}"
        if p.metadata.name in self.store:
            msg = f'pods "{p.metadata.name}" already exists'
            return self._answer("Create", rpc_error(grpc.StatusCode.ALREADY_EXISTS, msg))
        # What the apiserver adds: uid, resourceVersion, defaults in fields the caller left unset.
        p.metadata.uid = f"uid-{p.metadata.name}"
        p.spec.schedulerName = p.spec.schedulerName or "tinykube"
        p.spec.containers[0].imagePullPolicy = "IfNotPresent"
        self._bump(p)
        self.store[p.metadata.name] = p
        return self._answer("Create", p)

    async def Get(self, request: Any, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        self.calls.append("Get")
        if request.name not in self.store:
            raise rpc_error(grpc.StatusCode.NOT_FOUND, f'pods "{request.name}" not found')
        return self.store[request.name]

    async def Update(self, request: Any, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        p = pod_pb2.Pod()
        p.CopyFrom(request.pod)
        self._bump(p)
        self.store[p.metadata.name] = p
        return self._answer("Update", p)

    def _bind(self, binding: pod_pb2.Binding) -> tuple[grpc.StatusCode | None, str]:
        p = self.store[binding.metadata.name]
        if p.spec.nodeName:
            msg = f"pod default/{p.metadata.name} is already assigned to node {p.spec.nodeName}"
            return grpc.StatusCode.ALREADY_EXISTS, msg
        p.spec.nodeName = binding.target.name
        self._bump(p)
        return None, p.metadata.resourceVersion

    async def Bind(self, request: Any, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        code, text = self._bind(request.binding)
        if code is not None:
            return self._answer("Bind", rpc_error(code, text))
        return self._answer("Bind", pod_pb2.BindResponse(resourceVersion=text))

    async def BindBatch(self, request: Any, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        response = pod_pb2.BindBatchResponse()
        for b in request.bindings:
            code, text = self._bind(b)
            if code is None:
                response.results.add(resourceVersion=text)
            else:
                response.results.add(code=code.value[0], message=text)
        return self._answer("BindBatch", response)


@pytest.fixture
async def client() -> AsyncIterator[Client]:
    # The channel never connects: the stub is replaced before any RPC.
    async with Client(
        "127.0.0.1:9", timeout=7.5, retries=3, backoff_initial=0.001, backoff_max=0.001
    ) as c:
        yield c


@pytest.mark.parametrize("loss", ["deadline", "reset"])
async def test_a_named_create_whose_answer_was_lost_returns_the_object_it_created(
    client: Client, loss: str
) -> None:
    fake = FakePods(lost=1, loss=loss)
    client.pods._stub = fake
    created = await client.pods.create(make_pod())
    assert created.metadata.uid == "uid-web"
    assert created.spec.schedulerName == "tinykube"  # the stored object, defaults and all
    assert fake.calls == ["Create", "Create", "Get"]


@pytest.mark.parametrize(
    ("their_label", "my_image"),
    [("other", "pause"), ("web", "nginx")],
    ids=["label-differs", "image-differs"],
)
async def test_a_retried_create_does_not_adopt_someone_elses_object(
    client: Client, their_label: str, my_image: str
) -> None:
    fake = FakePods(lost=1)
    client.pods._stub = fake
    # Another writer's object holds the name: our first attempt failed ALREADY_EXISTS but its
    # answer was lost, so the retry's ALREADY_EXISTS must not be taken for our own success.
    fake.store["web"] = make_pod(label=their_label)
    mine = make_pod()
    mine.spec.containers[0].image = my_image
    with pytest.raises(errors.AlreadyExistsError):
        await client.pods.create(mine)
    assert fake.calls == ["Create", "Create", "Get"]


async def test_a_create_that_fails_already_exists_at_once_is_not_looked_up(
    client: Client,
) -> None:
    fake = FakePods()
    client.pods._stub = fake
    fake.store["web"] = make_pod()
    with pytest.raises(errors.AlreadyExistsError):
        await client.pods.create(make_pod())
    assert fake.calls == ["Create"]


@pytest.mark.parametrize(
    ("first_failure", "landed"),
    [
        (rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"), True),
        (rpc_error(grpc.StatusCode.UNAVAILABLE, RESET), True),
        (rpc_error(grpc.StatusCode.UNAVAILABLE, REFUSED), False),
    ],
    ids=["deadline", "reset", "refused"],
)
async def test_a_generate_name_create_is_named_by_the_client_and_resent_once(
    client: Client, first_failure: grpc.aio.AioRpcError, landed: bool
) -> None:
    fake = FakePods()
    client.pods._stub = fake
    create = fake.Create
    names: list[str] = []

    async def flaky(request: Any, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        names.append(request.pod.metadata.name)
        if len(names) == 1:
            if landed:
                await create(request)
            raise first_failure
        return await create(request)

    fake.Create = flaky  # type: ignore[method-assign]
    pod = make_pod(name="", generate="web-")
    made = await client.pods.create(pod)
    # One name, chosen before the first attempt and kept by the resend, so the resend either
    # makes the pod or recognises the first attempt's (ALREADY_EXISTS, then the stored pod).
    assert len(names) == 2 and names[0] == names[1] == made.metadata.name
    assert re.fullmatch(r"web-[bcdfghjklmnpqrstvwxz2456789]{5}", made.metadata.name)
    assert fake.calls == ["Create", "Create", "Get"] if landed else ["Create", "Create"]
    assert list(fake.store) == [made.metadata.name]  # never two pods for one create
    assert pod.metadata.name == ""  # the caller's object is not changed


async def test_a_generated_name_someone_else_holds_is_replaced_by_another(client: Client) -> None:
    fake = FakePods()
    client.pods._stub = fake
    create = fake.Create
    names: list[str] = []

    async def taken_once(request: Any, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        names.append(request.pod.metadata.name)
        if len(names) == 1:
            other = make_pod(request.pod.metadata.name, label="other")
            fake.store[other.metadata.name] = other
        return await create(request)

    fake.Create = taken_once  # type: ignore[method-assign]
    made = await client.pods.create(make_pod(name="", generate="web-"))
    assert len(names) == 2 and names[0] != names[1] == made.metadata.name
    assert fake.calls == ["Create", "Create"]


@pytest.mark.parametrize(("rv", "calls"), [("", 1), ("5", 4)], ids=["unconditional", "rv"])
async def test_an_update_is_retried_after_it_may_have_landed_only_with_a_precondition(
    client: Client, rv: str, calls: int
) -> None:
    fake = FakePods(lost=1000)
    client.pods._stub = fake
    pod = make_pod()
    pod.metadata.resourceVersion = rv
    with pytest.raises(errors.DeadlineExceededError):
        await client.pods.update(pod)
    assert fake.calls == ["Update"] * calls


@pytest.mark.parametrize(
    ("node", "recognised"), [("n1", True), ("n2", False)], ids=["same-node", "other-node"]
)
async def test_a_bind_whose_answer_was_lost_succeeds_if_bound_to_our_node(
    client: Client, node: str, recognised: bool
) -> None:
    fake = FakePods(lost=1)
    client.pods._stub = fake
    fake.store["web"] = make_pod()
    fake.store["web"].metadata.uid = "u1"
    if not recognised:
        fake.store["web"].spec.nodeName = "n1"  # someone else bound it before us
    if recognised:
        rv = await client.bind("default", "web", node, uid="u1")
        assert rv == fake.store["web"].metadata.resourceVersion
    else:
        with pytest.raises(errors.AlreadyExistsError, match="already assigned to node n1"):
            await client.bind("default", "web", node, uid="u1")
    assert fake.calls == ["Bind", "Bind", "Get"]


async def test_a_bind_already_assigned_without_a_lost_answer_is_an_error(client: Client) -> None:
    fake = FakePods()
    client.pods._stub = fake
    fake.store["web"] = make_pod()
    fake.store["web"].spec.nodeName = "n1"
    with pytest.raises(errors.AlreadyExistsError):
        await client.bind("default", "web", "n1")
    assert fake.calls == ["Bind"]


async def test_a_bind_batch_retry_reports_its_own_landed_binds_as_success(
    client: Client,
) -> None:
    fake = FakePods(lost=1)
    client.pods._stub = fake
    for name in ("a", "b", "c"):
        fake.store[name] = make_pod(name)
    fake.store["c"].spec.nodeName = "n9"  # bound elsewhere before our batch: a real conflict
    out = await client.bind_batch(
        [
            BindItem("default", "a", "n1"),
            BindItem("default", "b", "n2"),
            BindItem("default", "c", "n1"),
        ]
    )
    assert out[:2] == [
        fake.store["a"].metadata.resourceVersion,
        fake.store["b"].metadata.resourceVersion,
    ]
    assert isinstance(out[2], errors.AlreadyExistsError)
    assert fake.store["a"].spec.nodeName == "n1" and fake.store["b"].spec.nodeName == "n2"
    assert fake.calls == ["BindBatch", "BindBatch", "Get", "Get", "Get"]


async def test_a_bind_batch_without_a_lost_answer_looks_nothing_up(client: Client) -> None:
    fake = FakePods()
    client.pods._stub = fake
    fake.store["a"] = make_pod("a")
    fake.store["a"].spec.nodeName = "n1"
    out = await client.bind_batch([BindItem("default", "a", "n1")])
    assert isinstance(out[0], errors.AlreadyExistsError)
    assert fake.calls == ["BindBatch"]
