"""Hypothesis strategies and harness shared by the fuzz tests of both front ends.

Messages are generated from the protobuf descriptors (`messages(descriptor)`), so a field or a
kind added to a .proto file is fuzzed without an edit here: every scalar type gets its edge
values (0, -1, the int32/int64/uint bounds, NaN, infinities, huge and tiny floats, enum numbers
out of range), strings get hostile text (empty, very long, NUL, unicode, path separators, "..",
label-syntax edge cases), quantity maps get hostile quantities ("9"*5000, "1e64", "-1",
garbage), and fields Kubernetes gives meaning by name (selectors, continue tokens,
resourceVersions, names) get values of that shape. `mutated(seed)` changes one field, anywhere
in the tree, of a valid object, so the fuzzer also reaches the checks behind the first failing
validation. `SEEDS` holds one valid object per kind (a kind whose bare named object is valid
needs none; the fixture names a missing row).

Concurrency: `fuzz` runs a Hypothesis search (`run_fuzz`) in a worker thread while the test's
event loop serves the apiserver; each example is a coroutine submitted to that loop, one at a
time. Then `FuzzTarget.assert_sound` checks the apiserver: nothing logged at ERROR or with a
traceback (`LogWatch`), healthy, every stored object valid by the apiserver's own validation,
every kind listable over REST.

Budget and reproducibility: every search is derandomized (a fixed seed derived from the test),
so CI runs the same examples each time and a failure reproduces. `TINYKUBE_FUZZ_EXAMPLES=N`
multiplies each test's example count by N for longer local runs; `TINYKUBE_FUZZ_SEED=random`
explores other examples (a failure names the seed to pass as `TINYKUBE_FUZZ_SEED=<int>` to
run them again).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import logging
import math
import os
import random
import zlib
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from typing import Any, TypeVar, cast

import aiohttp
import grpc
from google.protobuf import json_format, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from apiserver.registry import strategy_for
from tests.integration.conftest import RunningAPIServer, make_settings, start_apiserver
from tinykube.kinds import ALL_KINDS, KindInfo
from tinykube.serving import CHANNEL_OPTIONS
from tinykube.v1 import meta_pb2

T = TypeVar("T")
Strategy = st.SearchStrategy

# ---- budget --------------------------------------------------------------------------------


def example_count(default: int) -> int:
    """`default` examples, times TINYKUBE_FUZZ_EXAMPLES for longer local runs."""
    factor = int(os.environ.get("TINYKUBE_FUZZ_EXAMPLES", "1") or "1")
    return max(1, default * factor)


def fuzz_seed(name: str) -> int | None:
    """The Hypothesis seed of the search `name`: None (derandomized: the seed follows the
    test, the same examples on every run, so a CI failure reproduces) unless
    TINYKUBE_FUZZ_SEED asks for one; `random` picks one per run, shared by every search."""
    chosen = os.environ.get("TINYKUBE_FUZZ_SEED", "")
    if not chosen:
        return None
    base = _RANDOM_SEED if chosen == "random" else int(chosen)
    return base ^ zlib.crc32(name.encode())


_RANDOM_SEED = random.randrange(2**32)


def run_fuzz(
    strategy: Strategy[T],
    check: Callable[[T], Coroutine[Any, Any, None]],
    *,
    examples: int,
    loop: asyncio.AbstractEventLoop,
    name: str,
) -> None:
    """Search `strategy` for an example on which `check` raises (call in a worker thread:
    each example runs as a coroutine on `loop`, which serves the apiserver meanwhile)."""

    def body(value: T) -> None:
        asyncio.run_coroutine_threadsafe(check(value), loop).result(timeout=120)

    body.__name__ = body.__qualname__ = f"fuzz_{name}"
    wrapped: Any = given(strategy)(body)
    number = fuzz_seed(name)
    if number is not None:
        wrapped = seed(number)(wrapped)
    wrapped = settings(
        max_examples=examples,
        deadline=None,
        derandomize=number is None,
        database=None,
        print_blob=False,
        phases=(Phase.explicit, Phase.generate, Phase.shrink),
        suppress_health_check=list(HealthCheck),
    )(wrapped)
    wrapped()


async def fuzz(
    target: FuzzTarget,
    strategy: Strategy[T],
    check: Callable[[T], Coroutine[Any, Any, None]],
    *,
    examples: int,
    name: str,
) -> None:
    """Run the search `name`, then `target.assert_sound()`; a failure of either says how to
    run the same examples again."""
    target.logs.records.clear()  # a failed test before this one leaves its records
    loop = asyncio.get_running_loop()
    try:
        await asyncio.to_thread(run_fuzz, strategy, check, examples=examples, loop=loop, name=name)
        await target.assert_sound()
    except BaseException as exc:
        if os.environ.get("TINYKUBE_FUZZ_SEED") == "random":
            exc.add_note(f"run the same examples with TINYKUBE_FUZZ_SEED={_RANDOM_SEED}")
        raise


class LogWatch(logging.Handler):
    """Collects the records at ERROR and above, and every record carrying a traceback."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR or record.exc_info:
            self.records.append(record)

    def __enter__(self) -> LogWatch:
        logging.getLogger().addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger().removeHandler(self)

    def problems(self) -> list[str]:
        return [self.format(r) for r in self.records]


# ---- scalar edge values --------------------------------------------------------------------

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
INT32_EDGES = (0, 1, -1, 2, 3, 80, 8080, 30080, 65535, 65536, 100000, INT32_MAX, INT32_MIN)
INT64_EDGES = (*INT32_EDGES, 2**32, 2**53 + 1, INT64_MAX, INT64_MIN)
UINT32_EDGES = (0, 1, 2**31, 2**32 - 1)
UINT64_EDGES = (0, 1, 2**63, 2**64 - 1)
FLOAT32_EDGES = (0.0, -0.0, 1.0, -1.0, 1e-45, 3.4e38, -3.4e38, math.inf, -math.inf, math.nan)
DOUBLE_EDGES = (
    0.0,
    -0.0,
    1.0,
    -1.0,
    80.0,
    8080.5,
    65536.0,
    5e-324,
    1e308,
    -1e308,
    2.0**63,
    1e64,
    math.inf,
    -math.inf,
    math.nan,
)
# Timestamps: the edges of the range protobuf's JSON form accepts, and past them.
TIMESTAMP_SECONDS = (0, 1, -1, 1_780_000_000, 253402300799, 253402300800, -62135596800,
                     -62135596801, INT64_MAX, INT64_MIN)  # fmt: skip
TIMESTAMP_NANOS = (0, 1, 999_999_999, 1_000_000_000, -1, INT32_MAX)


def _ints(edges: Sequence[int], lo: int, hi: int) -> Strategy[int]:
    return st.one_of(st.sampled_from(edges), st.integers(lo, hi))


INT32 = _ints(INT32_EDGES, INT32_MIN, INT32_MAX)
INT64 = _ints(INT64_EDGES, INT64_MIN, INT64_MAX)
UINT32 = _ints(UINT32_EDGES, 0, 2**32 - 1)
UINT64 = _ints(UINT64_EDGES, 0, 2**64 - 1)
FLOAT32 = st.one_of(st.sampled_from(FLOAT32_EDGES), st.floats(width=32))
DOUBLE = st.one_of(st.sampled_from(DOUBLE_EDGES), st.floats())

# ---- strings -------------------------------------------------------------------------------

EDGE_STRINGS = (
    "",
    " ",
    "a",
    "A",
    "0",
    "-",
    "_",
    ".",
    "..",
    "/",
    "a/b",
    "../../etc/passwd",
    "a..b",
    "-a",
    "a-",
    "a_b",
    "a.b",
    "a b",
    "\x00",
    "a\x00b",
    "\n",
    "a\n",
    "\t",
    "\r\n",
    "é",
    "日本語",
    "😀",
    "\u202e",
    "\ufeff",
    "\ufffd",
    "%2F",
    "%00",
    "?",
    "#",
    "*",
    ",",
    "=",
    "!",
    "()",
    "{}",
    "[]",
    '"',
    "'",
    "\\",
    "${HOME}",
    "<script>",
    "1e64",
    "-1",
    "null",
    "true",
    "x" * 63,
    "x" * 64,
    "x" * 253,
    "x" * 254,
    "x" * 4097,
)
# Rare: each one in a message makes every request carrying it expensive.
HUGE_STRINGS = ("9" * 5000, "x" * 70_000, "x" * (256 * 1024 + 1))
# Values Kubernetes gives meaning to; any string field may get one, so enums are hit.
KNOWN_WORDS = (
    "Always",
    "IfNotPresent",
    "Never",
    "OnFailure",
    "TCP",
    "UDP",
    "SCTP",
    "tcp",
    "In",
    "NotIn",
    "Exists",
    "DoesNotExist",
    "Gt",
    "Lt",
    "Equal",
    "NoSchedule",
    "PreferNoSchedule",
    "NoExecute",
    "Pending",
    "Running",
    "Succeeded",
    "Failed",
    "Unknown",
    "True",
    "False",
    "Ready",
    "PodScheduled",
    "ClusterIP",
    "NodePort",
    "LoadBalancer",
    "ExternalName",
    "None",
    "ClientIP",
    "Cluster",
    "Local",
    "Orphan",
    "Foreground",
    "Background",
    "All",
    "Normal",
    "Warning",
    "ClusterFirst",
    "Default",
    "InternalIP",
    "Hostname",
    "Update",
    "Apply",
    "FieldsV1",
    "status",
    "scale",
    "SingleStack",
    "PreferDualStack",
    "IPv4",
    "IPv6",
    "Node",
    "Pod",
    "ReplicaSet",
    "v1",
    "apps/v1",
    "tinykube",
    "default",
    "kube-system",
    "web",
    "n1",
    "kubernetes.io/hostname",
)
NAMES = (
    "web",
    "n1",
    "seed",
    "default",
    "a",
    "web-1",
    "a.b",
    "a" * 63,
    "a" * 253,
    "Web",
    "web_1",
    "-web",
    "web-",
    "web.",
    "..",
    ".",
    "a/b",
    "",
)
LABEL_KEYS = (
    "app",
    "tier",
    "a" * 63,
    "a" * 64,
    "example.com/app",
    "kubernetes.io/hostname",
    "a/b/c",
    "/app",
    "app/",
    "-app",
    "app-",
    "a.b",
    "A_b",
    "x" * 254 + "/a",
    "a" * 253 + "/b",
    "",
    "app\n",
    "ünï",
)
LABEL_VALUES = ("", "web", "a" * 63, "a" * 64, "-a", "a-", "a.b", "a b", "a/b", "A_b.c-d", "ü")
QUANTITIES = (
    "0",
    "1",
    "100m",
    "1Ki",
    "1Gi",
    "500Mi",
    "1.5",
    "0.5m",
    "1e3",
    "1E3",
    "-1",
    "+1",
    "1e64",
    "1e30",
    "99999999999999999999",
    "9223372036854775807",
    "9223372036854775808",
    "9223372036854775807m",
    "8Ei",
    "9" * 5000,
    "1" + "0" * 400,
    "0." + "0" * 400 + "1",
    "1ki",
    "1K",
    "1e",
    "e3",
    "1.2.3",
    "0x10",
    "nan",
    "inf",
    "Infinity",
    "1 Gi",
    " 1",
    "",
    "garbage",
    "\uff11",  # a fullwidth digit one
)
RESOURCE_NAMES = (
    "cpu",
    "memory",
    "pods",
    "ephemeral-storage",
    "example.com/gpu",
    "hugepages-2Mi",
    "nvidia.com/gpu",
    "CPU",
    "",
    "a/b/c",
    "x" * 300,
)
LABEL_SELECTORS = (
    "",
    "app=web",
    "app==web",
    "app!=web",
    "app in (web,db)",
    "app notin (web)",
    "app",
    "!app",
    "app,tier",
    "app in ()",
    "app in (",
    "app in (a,b",
    "a=b=c",
    "=",
    ",",
    "!",
    "a b",
    "app gt 1",
    "app>1",
    "app<1",
    "a" * 64 + "=b",
    "app=" + "a" * 64,
    "app=\x00",
    "x" * 10_000,
    "(((",
    "app in (" + ",".join(["v"] * 1000) + ")",
)
FIELD_SELECTORS = (
    "",
    "metadata.name=web",
    "metadata.namespace=default",
    "metadata.name!=web",
    "metadata.name==web",
    "spec.nodeName=n1",
    "spec.nodeName=",
    "spec.nodeName",
    "status.phase=Running",
    "status.phase!=Pending",
    "spec.schedulerName=tinykube",
    "spec.unschedulable=true",
    "involvedObject.name=web",
    "bogus=x",
    "=",
    "a=b=c",
    ",",
    "metadata.name in (a,b)",
    "x" * 10_000,
)
RESOURCE_VERSIONS = (
    "",
    "0",
    "1",
    "2",
    "-1",
    "abc",
    "1.5",
    "1e3",
    " 1",
    "00001",
    "0x10",
    "1_000",
    "١٢",
    "9" * 30,
    str(INT64_MAX),
    str(INT64_MAX + 1),
    "9" * 5000,
)
UIDS = ("", "00000000-0000-0000-0000-000000000000", "not-a-uid", "x" * 300)
IPS = (
    "10.0.0.1",
    "127.0.0.1",
    "0.0.0.0",
    "::1",
    "::",
    "fe80::1%eth0",
    "10.96.0.10",
    "10.96.0.0",
    "256.1.1.1",
    "1.2.3",
    "None",
    "",
    "a.b.c.d",
    "10.0.0.1/24",
)


def _continue_token(payload: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(payload).encode()).decode()


CONTINUE_TOKENS = (
    "",
    "garbage",
    "=",
    "e30=",
    base64.urlsafe_b64encode(b"not json").decode(),
    base64.urlsafe_b64encode(b"\xff\xfe").decode(),
    _continue_token([]),
    _continue_token({"v": 1, "rv": 1, "start": "web"}),
    _continue_token({"v": 1, "rv": 0, "start": ""}),
    _continue_token({"v": 1, "rv": -1, "start": ""}),
    _continue_token({"v": 1, "rv": 10**30, "start": ""}),
    _continue_token({"v": 1, "rv": INT64_MAX, "start": ""}),
    _continue_token({"v": 1, "rv": True, "start": ""}),
    _continue_token({"v": 1, "rv": "5", "start": ""}),
    _continue_token({"v": 1, "rv": 1.5, "start": ""}),
    _continue_token({"v": 1, "rv": 1, "start": "../../"}),
    _continue_token({"v": 1, "rv": 1, "start": "\udfff"}),
    _continue_token({"v": 1, "rv": 1, "start": 5}),
    _continue_token({"v": 2, "rv": 1, "start": ""}),
    base64.urlsafe_b64encode(b'{"v": 1, "rv": 1e400, "start": ""}').decode(),
    base64.urlsafe_b64encode(b'{"v": 1, "rv": ' + b"9" * 5000 + b', "start": ""}').decode(),
    base64.urlsafe_b64encode(b"[" * 5000).decode(),
)


def weighted(*choices: tuple[int, Strategy[Any]]) -> Strategy[Any]:
    """One of the strategies, each chosen with its weight (Hypothesis' one_of is uniform)."""
    table = [s for w, s in choices for _ in range(w)]
    return st.sampled_from(range(len(table))).flatmap(lambda i: table[i])


_TEXT = st.text(st.characters(codec="utf-8"), max_size=20)  # no lone surrogates
GENERIC_STRING: Strategy[str] = weighted(
    (6, st.sampled_from(EDGE_STRINGS)),
    (4, st.sampled_from(KNOWN_WORDS)),
    (3, st.sampled_from(NAMES)),
    (3, _TEXT),
    (1, st.sampled_from(HUGE_STRINGS)),
)


def _hinted(*pools: Sequence[str]) -> Strategy[str]:
    values = tuple(dict.fromkeys(v for pool in pools for v in pool))
    return weighted((3, st.sampled_from(values)), (1, GENERIC_STRING))


NAME = _hinted(NAMES)
# String fields by name: the values that mean something there, and generic strings besides.
STRING_HINTS: dict[str, Strategy[str]] = {
    "name": NAME,
    "generateName": _hinted(("web-", "a" * 300, "-", "")),
    "namespace": _hinted(("default", "kube-system", "kube-node-lease"), NAMES),
    "nodeName": NAME,
    "hostname": NAME,
    "nominatedNodeName": NAME,
    "schedulerName": _hinted(("tinykube", "default-scheduler"), NAMES),
    "priorityClassName": _hinted(("system-node-critical", "high"), NAMES),
    "holderIdentity": NAME,
    "labelSelector": _hinted(LABEL_SELECTORS),
    "fieldSelector": _hinted(FIELD_SELECTORS),
    "continue": _hinted(CONTINUE_TOKENS),
    "resourceVersion": _hinted(RESOURCE_VERSIONS),
    "uid": _hinted(UIDS),
    "ip": _hinted(IPS),
    "podIP": _hinted(IPS),
    "hostIP": _hinted(IPS),
    "clusterIP": _hinted(IPS),
    "address": _hinted(IPS, ("localhost", "n1")),
    "podCIDR": _hinted(("10.244.0.0/24", "10.0.0.1", "::/0", "garbage")),
    "image": _hinted(("busybox", "busybox:1.36", "nginx:latest", "a/b/c:d@sha256:x", ":")),
    "key": _hinted(LABEL_KEYS),
    "value": _hinted(LABEL_VALUES),
    "apiVersion": _hinted(("v1", "apps/v1", "coordination.k8s.io/v1", "policy/v1", "x/y/z")),
    "kind": _hinted(("Pod", "Node", "ReplicaSet", "Service", "Binding", "Eviction", "Bogus")),
}
# map<string, string> fields by name: (keys, values).
QUANTITY = _hinted(QUANTITIES)
MAP_HINTS: dict[str, tuple[Strategy[str], Strategy[str]]] = {
    "labels": (_hinted(LABEL_KEYS), _hinted(LABEL_VALUES)),
    "matchLabels": (_hinted(LABEL_KEYS), _hinted(LABEL_VALUES)),
    "nodeSelector": (_hinted(LABEL_KEYS), _hinted(LABEL_VALUES)),
    "selector": (_hinted(LABEL_KEYS), _hinted(LABEL_VALUES)),
    "annotations": (_hinted(LABEL_KEYS), GENERIC_STRING),
    "requests": (_hinted(RESOURCE_NAMES), QUANTITY),
    "limits": (_hinted(RESOURCE_NAMES), QUANTITY),
    "capacity": (_hinted(RESOURCE_NAMES), QUANTITY),
    "allocatable": (_hinted(RESOURCE_NAMES), QUANTITY),
}
# Scalar fields of one message by (message, field).
FIELD_HINTS: dict[tuple[str, str], Strategy[Any]] = {
    ("google.protobuf.Timestamp", "seconds"): _ints(TIMESTAMP_SECONDS, INT64_MIN, INT64_MAX),
    ("google.protobuf.Timestamp", "nanos"): _ints(TIMESTAMP_NANOS, INT32_MIN, INT32_MAX),
}

# ---- messages from descriptors -------------------------------------------------------------

# Deep enough for a ReplicaSet's template's affinity's match expressions' values.
MAX_DEPTH = 11
MAX_ITEMS = 3


def message_class(descriptor: Descriptor) -> type[Message]:
    return message_factory.GetMessageClass(descriptor)


def _is_map(field: FieldDescriptor) -> bool:
    mt = field.message_type
    return mt is not None and mt.GetOptions().map_entry


def scalar_values(field: FieldDescriptor) -> Strategy[Any]:
    """Edge values of one scalar field (or of a repeated field's or map value's element)."""
    parent = field.containing_type.full_name if field.containing_type else ""
    hint = FIELD_HINTS.get((parent, field.name))
    if hint is not None:
        return hint
    t = field.type
    if t == FieldDescriptor.TYPE_STRING:
        return STRING_HINTS.get(field.name, GENERIC_STRING)
    if t == FieldDescriptor.TYPE_BYTES:
        return st.one_of(st.binary(max_size=64), st.just(b"\x00" * 70_000))
    if t == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if t in (
        FieldDescriptor.TYPE_INT32,
        FieldDescriptor.TYPE_SINT32,
        FieldDescriptor.TYPE_SFIXED32,
    ):
        return INT32
    if t in (
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_SFIXED64,
    ):
        return INT64
    if t in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32):
        return UINT32
    if t in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
        return UINT64
    if t == FieldDescriptor.TYPE_FLOAT:
        return FLOAT32
    if t == FieldDescriptor.TYPE_DOUBLE:
        return DOUBLE
    if t == FieldDescriptor.TYPE_ENUM:
        assert field.enum_type is not None
        known = [v.number for v in field.enum_type.values]
        return st.one_of(st.sampled_from(known), INT32)
    raise AssertionError(f"no strategy for field type {t} of {field.full_name}")


def field_values(field: FieldDescriptor, depth: int, ancestry: tuple[str, ...]) -> Strategy[Any]:
    """What one field of a generated message holds: a value, a list or a dict."""
    if _is_map(field):
        assert field.message_type is not None
        key_field = field.message_type.fields_by_name["key"]
        value_field = field.message_type.fields_by_name["value"]
        hint = MAP_HINTS.get(field.name)
        if hint is not None and value_field.message_type is None:
            keys, values = hint
        else:
            keys = scalar_values(key_field)
            values = _single(value_field, depth, ancestry)
        return st.dictionaries(keys, values, max_size=MAX_ITEMS)
    element = _single(field, depth, ancestry)
    if field.is_repeated:
        return st.lists(element, max_size=MAX_ITEMS)
    return element


def _single(field: FieldDescriptor, depth: int, ancestry: tuple[str, ...]) -> Strategy[Any]:
    if field.message_type is not None:
        return messages(field.message_type, depth + 1, ancestry)
    return scalar_values(field)


def messages(
    descriptor: Descriptor, depth: int = 0, ancestry: tuple[str, ...] = ()
) -> Strategy[Message]:
    """Messages of `descriptor`'s type, any subset of their fields set to edge values.

    Recursive types (Struct, Value) are cut off at their second appearance in a branch."""
    cls = message_class(descriptor)
    if depth > MAX_DEPTH or ancestry.count(descriptor.full_name) >= 2:
        return st.builds(cls)
    inner = (*ancestry, descriptor.full_name)
    optional = {f.name: st.deferred(_lazy(f, depth, inner)) for f in descriptor.fields}
    return st.fixed_dictionaries({}, optional=optional).map(lambda d: build(cls, d))


def _lazy(field: FieldDescriptor, depth: int, ancestry: tuple[str, ...]) -> Callable[[], Any]:
    return lambda: field_values(field, depth, ancestry)


def build(cls: type[Message], values: Mapping[str, Any]) -> Message:
    msg = cls()
    for name, value in values.items():
        set_field(msg, cast(FieldDescriptor, msg.DESCRIPTOR.fields_by_name[name]), value)
    return msg


def set_field(msg: Message, field: FieldDescriptor, value: Any) -> None:
    """Set one field to a generated value; a value the runtime cannot hold (a closed enum's
    unknown number) leaves the field as it was: it could not be sent anyway."""
    try:
        if _is_map(field):
            target = getattr(msg, field.name)
            for k, v in value.items():
                if isinstance(v, Message):
                    target[k].CopyFrom(v)
                else:
                    target[k] = v
        elif field.is_repeated:
            msg.ClearField(field.name)
            target = getattr(msg, field.name)
            for v in value:
                if isinstance(v, Message):
                    target.add().CopyFrom(v)
                else:
                    target.append(v)
        elif field.message_type is not None:
            getattr(msg, field.name).CopyFrom(value)
        else:
            setattr(msg, field.name, value)
    except (ValueError, TypeError):
        pass


# ---- mutations of valid objects ------------------------------------------------------------

Path = tuple[FieldDescriptor, ...]


def field_paths(
    descriptor: Descriptor, depth: int = 0, ancestry: tuple[str, ...] = ()
) -> list[Path]:
    """Every field path under `descriptor` (recursive types entered once)."""
    paths: list[Path] = []
    if depth > MAX_DEPTH or descriptor.full_name in ancestry:
        return paths
    inner = (*ancestry, descriptor.full_name)
    for field in descriptor.fields:
        paths.append((field,))
        sub = field.message_type
        if sub is None:
            continue
        if _is_map(field):
            value_field = sub.fields_by_name["value"]
            if value_field.message_type is None:
                continue
            sub = value_field.message_type
        paths.extend((field, *p) for p in field_paths(sub, depth + 1, inner))
    return paths


@st.composite
def mutated(draw: st.DrawFn, seed_object: Message) -> Message:
    """`seed_object` with one field, anywhere in its tree, set to an edge value or cleared."""
    paths = _PATHS.get(seed_object.DESCRIPTOR.full_name)
    if paths is None:
        paths = field_paths(cast(Descriptor, seed_object.DESCRIPTOR))
        _PATHS[seed_object.DESCRIPTOR.full_name] = paths
    path = draw(st.sampled_from(paths))
    obj = type(seed_object)()
    obj.CopyFrom(seed_object)
    msg: Message = obj
    for field in path[:-1]:
        msg = _descend(draw, msg, field)
    leaf = path[-1]
    if draw(st.integers(0, 9)) == 0:
        msg.ClearField(leaf.name)
    else:
        set_field(msg, leaf, draw(field_values(leaf, len(path), ())))
    return obj


_PATHS: dict[str, list[Path]] = {}


def _descend(draw: st.DrawFn, msg: Message, field: FieldDescriptor) -> Message:
    """The sub-message `field` leads to: an existing element or entry, or a new one."""
    if _is_map(field):
        container = getattr(msg, field.name)
        keys = sorted(container)
        key = "k"
        if draw(st.booleans()) and keys:
            key = draw(st.sampled_from(keys))
        return container[key]  # type: ignore[no-any-return]
    if field.is_repeated:
        container = getattr(msg, field.name)
        if len(container) and draw(st.integers(0, 3)):
            return container[draw(st.integers(0, len(container) - 1))]  # type: ignore[no-any-return]
        return container.add()  # type: ignore[no-any-return]
    return getattr(msg, field.name)  # type: ignore[no-any-return]


# ---- valid objects -------------------------------------------------------------------------

_POD_SPEC: dict[str, Any] = {
    "containers": [
        {
            "name": "c",
            "image": "busybox:1.36",
            "command": ["sleep", "3600"],
            "ports": [{"name": "http", "containerPort": 80, "protocol": "TCP"}],
            "env": [{"name": "A", "value": "b"}],
            "resources": {
                "requests": {"cpu": "100m", "memory": "64Mi"},
                "limits": {"cpu": "1", "memory": "128Mi"},
            },
        }
    ],
    "initContainers": [{"name": "init", "image": "busybox:1.36"}],
    "nodeSelector": {"disk": "ssd"},
    "tolerations": [{"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}],
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                ]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 10,
                    "preference": {"matchExpressions": [{"key": "zone", "operator": "Exists"}]},
                }
            ],
        }
    },
    "restartPolicy": "Always",
    "terminationGracePeriodSeconds": 0,
}
_META: dict[str, Any] = {
    "labels": {"app": "seed"},
    "annotations": {"note": "seed"},
    "finalizers": [],
}
# Kinds whose valid names follow from their content, so no object named "seed" is valid: a
# CustomResourceDefinition is named <plural>.<group> (tests/integration/test_crds.py and
# tests/unit/test_crd.py cover its validation).
UNSEEDED = frozenset({"CustomResourceDefinition"})

# One valid object per kind, in Kubernetes JSON. A kind whose bare named object is valid needs
# no row; for the others the fixture says which row is missing.
SEEDS: dict[str, dict[str, Any]] = {
    "Pod": {"metadata": _META, "spec": _POD_SPEC},
    "Node": {
        "metadata": {"labels": {"zone": "a"}},
        "spec": {"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]},
        "status": {
            "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 1}},
        },
    },
    "ReplicaSet": {
        "metadata": _META,
        "spec": {
            "replicas": 2,
            "selector": {
                "matchLabels": {"app": "seed"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["web"]}],
            },
            "template": {
                "metadata": {"labels": {"app": "seed", "tier": "web"}},
                "spec": _POD_SPEC,
            },
        },
    },
    "Deployment": {
        "metadata": {**_META, "annotations": {"note": "seed"}},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "seed"}},
            "template": {
                "metadata": {"labels": {"app": "seed"}},
                "spec": {**_POD_SPEC, "restartPolicy": "Always"},
            },
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": "25%"},
            },
            "minReadySeconds": 1,
            "revisionHistoryLimit": 2,
            "progressDeadlineSeconds": 60,
            "paused": True,
        },
    },
    "Event": {
        "metadata": _META,
        "involvedObject": {"kind": "Pod", "namespace": "default", "name": "web"},
        "reason": "Scheduled",
        "message": "assigned",
        "source": {"component": "tinykube"},
        "count": 1,
        "type": "Normal",
    },
    "Lease": {
        "metadata": _META,
        "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 40, "leaseTransitions": 1},
    },
    "Service": {
        "metadata": _META,
        "spec": {
            "ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080}],
            "selector": {"app": "seed"},
            "type": "ClusterIP",
        },
    },
    "Endpoints": {
        "metadata": _META,
        "subsets": [
            {
                "addresses": [{"ip": "10.0.0.1", "nodeName": "n1"}],
                "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
            }
        ],
    },
}


_RULES = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
_SUBJECTS = [
    {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"},
    {"kind": "ServiceAccount", "name": "default", "namespace": "default"},
]
SEEDS.update(
    {
        "PodDisruptionBudget": {
            "metadata": _META,
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "seed"}}},
        },
        "Job": {
            "metadata": _META,
            "spec": {
                "completions": 2,
                "parallelism": 2,
                "backoffLimit": 1,
                "template": {
                    "metadata": {"labels": {"app": "seed"}},
                    "spec": {**_POD_SPEC, "restartPolicy": "Never"},
                },
            },
        },
        "Role": {"metadata": _META, "rules": _RULES},
        "ClusterRole": {"metadata": {"labels": {"app": "seed"}}, "rules": _RULES},
        "RoleBinding": {
            "metadata": _META,
            "subjects": _SUBJECTS,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "seed"},
        },
        "ClusterRoleBinding": {
            "metadata": {"labels": {"app": "seed"}},
            "subjects": _SUBJECTS,
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "seed",
            },
        },
    }
)

SEEDS.update(
    {
        "DaemonSet": {
            "metadata": _META,
            "spec": {
                "selector": {"matchLabels": {"app": "seed"}},
                "template": {"metadata": {"labels": {"app": "seed"}}, "spec": _POD_SPEC},
                "updateStrategy": {
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxUnavailable": "10%", "maxSurge": 0},
                },
                "minReadySeconds": 1,
                "revisionHistoryLimit": 3,
            },
        },
        "ControllerRevision": {
            "metadata": _META,
            "data": {"spec": {"template": {"$patch": "replace", "spec": {"containers": []}}}},
            "revision": 1,
        },
    }
)

SEEDS["EndpointSlice"] = {
    "metadata": {**_META, "labels": {"kubernetes.io/service-name": "seed"}},
    "addressType": "IPv4",
    "endpoints": [
        {
            "addresses": ["10.1.2.3"],
            "conditions": {"ready": True, "serving": True, "terminating": False},
            "nodeName": "node-1",
            "zone": "zone-a",
            "targetRef": {"kind": "Pod", "namespace": "default", "name": "seed"},
            "hints": {"forZones": [{"name": "zone-a"}]},
        }
    ],
    "ports": [{"name": "http", "protocol": "TCP", "port": 8080, "appProtocol": "http"}],
}

# A policy matching a resource nobody serves, so a fuzzed one that is stored judges nothing the
# other requests do; its binding names it.
SEEDS["ValidatingAdmissionPolicy"] = {
    "metadata": _META,
    "spec": {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": ["fuzz.example.com"],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE"],
                    "resources": ["nothings"],
                }
            ]
        },
        "validations": [{"expression": "true", "message": "never refused"}],
    },
}
SEEDS["ValidatingAdmissionPolicyBinding"] = {
    "metadata": _META,
    "spec": {"policyName": "seed", "validationActions": ["Deny"]},
}


def valid_object(info: KindInfo, name: str) -> Message:
    """A valid object of the kind, named `name` (in namespace default if namespaced)."""
    doc = json.loads(json.dumps(SEEDS.get(info.kind, {"metadata": {}})))
    doc.setdefault("metadata", {})["name"] = name
    if info.namespaced:
        doc["metadata"]["namespace"] = "default"
    obj = info.message()
    json_format.ParseDict(doc, obj)
    return obj


def request_for(info: KindInfo, obj: Message, message_type: type[Message]) -> Message:
    """The Create/Update request (`message_type`) carrying `obj`."""
    request = message_type()
    getattr(request, info.request_field).CopyFrom(obj)
    return request


# ---- the apiserver under fuzz --------------------------------------------------------------

# Answers that are the server's fault, never the request's.
SERVER_FAULTS = frozenset(
    {
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.DATA_LOSS,
        grpc.StatusCode.UNAVAILABLE,
    }
)
SEED_NAME = "seed"


def _identity(raw: bytes) -> bytes:
    return raw


@dataclasses.dataclass
class FuzzTarget:
    """One apiserver (gRPC, and REST when `base` is set) with a valid object of every kind."""

    running: RunningAPIServer
    channel: grpc.aio.Channel
    session: aiohttp.ClientSession | None = None
    base: str = ""
    logs: LogWatch = dataclasses.field(default_factory=LogWatch)

    async def unary(self, service: str, method: str, body: bytes) -> tuple[grpc.StatusCode, str]:
        """Call a unary method with raw request bytes; (code, details)."""
        call = self.channel.unary_unary(
            f"/{service}/{method}", request_serializer=_identity, response_deserializer=_identity
        )
        try:
            await call(body, timeout=20)
        except grpc.aio.AioRpcError as exc:
            return exc.code(), exc.details() or ""
        return grpc.StatusCode.OK, ""

    async def stream(
        self, service: str, method: str, body: bytes, window: float = 0.05
    ) -> tuple[grpc.StatusCode, str]:
        """Open a server stream, read what arrives within `window` seconds, cancel it.

        A request the server refuses fails at once; a stream that opens sends its initial
        events at once: the window only has to cover a round trip."""
        call = self.channel.unary_stream(
            f"/{service}/{method}", request_serializer=_identity, response_deserializer=_identity
        )(body, timeout=20)
        try:
            async with asyncio.timeout(window):
                async for _ in call:
                    pass
        except TimeoutError:
            pass
        except grpc.aio.AioRpcError as exc:
            return exc.code(), exc.details() or ""
        finally:
            call.cancel()
        return grpc.StatusCode.OK, ""

    async def ensure(self, info: KindInfo, name: str = SEED_NAME) -> Message:
        """The stored object `name` of the kind, created from its seed if it is gone."""
        stub = info.stub(self.channel)
        namespace = "default" if info.namespaced else ""
        try:
            got: Message = await stub.Get(
                meta_pb2.GetRequest(namespace=namespace, name=name), timeout=20
            )
            return got
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.NOT_FOUND:
                raise
        request = request_for(info, valid_object(info, name), info.create_request)
        try:
            created: Message = await stub.Create(request, timeout=20)
        except grpc.aio.AioRpcError as exc:
            raise AssertionError(
                f"the seed {info.kind} is not valid ({exc.details()}): a new kind needs a valid "
                "object in SEEDS (tests/integration/fuzzing.py) to mutate"
            ) from None
        return created

    async def stored(self, info: KindInfo) -> list[Message]:
        reply = await info.stub(self.channel).List(meta_pb2.ListRequest(), timeout=20)
        return list(reply.items)

    async def assert_sound(self) -> None:
        """No traceback or ERROR logged, still healthy, and every stored object valid."""
        problems = self.logs.problems()
        self.logs.records.clear()
        assert not problems, "the apiserver logged:\n" + "\n".join(problems)
        health = health_pb2_grpc.HealthStub(self.channel)
        reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=20)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        if self.session is not None:
            async with self.session.get(self.base + "/readyz?verbose") as resp:
                assert resp.status == 200, await resp.text()
            await self._readable_over_rest()
        invalid: list[str] = []
        for info in ALL_KINDS:
            for obj in await self.stored(info):
                errors = strategy_for(info).validate_create(obj)
                if errors:
                    meta = obj.metadata  # type: ignore[attr-defined]
                    shown = "; ".join(str(e) for e in errors)
                    invalid.append(f"{info.kind} {meta.namespace}/{meta.name}: {shown}")
        assert not invalid, "invalid objects stored:\n" + "\n".join(invalid)

    async def _readable_over_rest(self) -> None:
        """What one front end stored, the other can print: every kind's list, as JSON and as a
        Table, answers 200."""
        assert self.session is not None
        table = "application/json;as=Table;v=v1;g=meta.k8s.io"
        for info in ALL_KINDS:
            prefix = f"/apis/{info.group}/{info.version}" if info.group else "/api/v1"
            # A watch's events are the same bytes as the list's items (the watch cache encodes
            # each object version once), so the lists stand for the watches too.
            for accept in ("", table):
                url = f"{self.base}{prefix}/{info.plural}"
                async with self.session.get(url, headers={"Accept": accept}) as resp:
                    body = await resp.read()
                    assert resp.status == 200, f"GET {url} ({accept}): {resp.status}: {body!r}"


@contextlib.asynccontextmanager
async def fuzz_target(etcd_endpoint: str, *, rest: bool) -> AsyncIterator[FuzzTarget]:
    """An apiserver on the session etcd, a valid object of every kind stored in it."""
    settings_ = make_settings(etcd_endpoint, rest_port=0 if rest else -1)
    running = await start_apiserver(settings_)
    channel = grpc.aio.insecure_channel(running.address, options=list(CHANNEL_OPTIONS))
    session = aiohttp.ClientSession() if rest else None
    target = FuzzTarget(
        running, channel, session, f"http://{running.server.rest_address}" if rest else ""
    )
    try:
        with target.logs:
            for info in ALL_KINDS:
                if info.kind not in UNSEEDED:
                    await target.ensure(info)
            yield target
    finally:
        if session is not None:
            await session.close()
        await channel.close()
        await running.server.stop()


# ---- JSON documents and REST requests ------------------------------------------------------

# JSON values that are the wrong type, out of range or hostile almost anywhere.
HOSTILE_JSON: tuple[Any, ...] = (
    None,
    True,
    0,
    -1,
    1.5,
    2**31,
    2**63,
    2**64,
    10**30,
    1e308,
    math.nan,
    math.inf,
    "",
    "x",
    "9" * 5000,
    "2026-13-45T25:61:61Z",
    "0000-01-01T00:00:00Z",
    "9999-12-31T23:59:59.999999999Z",
    "10000-01-01T00:00:00Z",
    [],
    [None],
    [[[]]],
    {},
    {"a": 1},
    {"$patch": "delete"},
    {"$patch": "replace"},
    {"$retainKeys": ["a"]},
)
JSON_LEAF: Strategy[Any] = weighted(
    (4, st.sampled_from(HOSTILE_JSON)),
    (2, GENERIC_STRING),
    (1, INT64),
    (1, DOUBLE),
)


def json_paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path (keys and indices) into a JSON document, the root included."""
    paths = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            paths.extend(json_paths(v, (*prefix, k)))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            paths.extend(json_paths(v, (*prefix, i)))
    return paths


@st.composite
def json_mutated(draw: st.DrawFn, doc: Any) -> Any:
    """`doc` (a JSON document) with one value replaced, one key removed or one unknown key
    added, anywhere in the tree."""
    doc = json.loads(json.dumps(doc))
    path = draw(st.sampled_from(json_paths(doc)))
    if not path:
        return draw(JSON_LEAF) if draw(st.integers(0, 4)) == 0 else doc
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    last = path[-1]
    action = draw(st.sampled_from(("replace", "replace", "remove", "add")))
    if action == "remove":
        del parent[last]
    elif action == "add" and isinstance(parent, dict):
        parent[draw(st.sampled_from(("bogusField", "$patch", "status", "")))] = draw(JSON_LEAF)
    else:
        parent[last] = draw(JSON_LEAF)
    return doc


def to_json_doc(obj: Message) -> Any:
    """A generated message as Kubernetes JSON, or None where JSON cannot hold its values
    (an out-of-range timestamp)."""
    try:
        return json_format.MessageToDict(obj)
    except (ValueError, TypeError, json_format.Error):
        return None


def _yaml_bomb(levels: int) -> bytes:
    lines = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        prev, cur = chr(ord("a") + i - 1), chr(ord("a") + i)
        lines.append(f"{cur}: &{cur} [" + ", ".join([f"*{prev}"] * 9) + "]")
    body = "\n".join("      " + line for line in lines)
    return (
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: bomb\n  managedFields:\n"
        "  - manager: m\n    operation: Update\n    fieldsV1:\n" + body + "\n"
    ).encode()


# Bodies no serializer writes: truncated, deep, huge, not UTF-8, lone surrogates, YAML bombs.
HOSTILE_BODIES: tuple[bytes, ...] = (
    b"",
    b" ",
    b"{",
    b"}",
    b"null",
    b"[]",
    b'"x"',
    b"1e400",
    b"9" * 5000,
    b"NaN",
    b'{"metadata": {"name": NaN}}',
    b'{"metadata": {"name": "\\ud800"}}',
    b'{"metadata": {"name": "a\\u0000b"}}',
    b'{"a": ' * 10_000 + b"1" + b"}" * 10_000,
    b"[" * 100_000,
    b"\xff\xfe\x00",
    b"\xef\xbb\xbf{}",
    b'{"kind": "Pod", "kind": "Node"}',
    b'{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", "labels": {"a": 1e400}}}',
    b"- a\n- b\n",
    b"a: &a [*a]\n",
    b"metadata: &m {name: x, labels: *m}\n",
    b"--- a\n--- b\n",
    b"!!python/object/apply:os.system ['true']\n",
    b"a: !!binary AAAA\n",
    b"? [a, b]\n: c\n",
    b"a: 2001-12-14t21:59:43.10-05:00\n",
    _yaml_bomb(9),
)

JSON_TYPE = "application/json"
YAML_TYPE = "application/yaml"
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
CONTENT_TYPES = (
    JSON_TYPE,
    YAML_TYPE,
    JSON_PATCH,
    MERGE_PATCH,
    STRATEGIC_PATCH,
    APPLY_PATCH,
    "application/apply-patch+cbor",
    "application/cbor",
    "application/vnd.kubernetes.protobuf",
    "application/json; charset=utf-16",
    "application/json;;;",
    "APPLICATION/JSON",
    "text/plain",
    "multipart/form-data; boundary=x",
    "*/*",
    "",
    "garbage",
)
ACCEPTS = (
    "",
    "application/json",
    "application/yaml",
    "application/json;as=Table;v=v1;g=meta.k8s.io",
    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
    "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io",
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
    "application/vnd.kubernetes.protobuf",
    "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
    "*/*",
    "text/html",
    "application/json;q=abc",
    ",,,",
    "garbage",
)
INT_TEXT = ("0", "1", "-1", "5", "500", "2147483647", "2147483648", "9" * 30, "9" * 5000,
            "1e3", "1.5", "abc", "", " 1", "1_0", "٣", "0x10")  # fmt: skip
BOOL_TEXT = ("true", "false", "1", "0", "t", "F", "TRUE", "yes", "", "2")
QUERY_VALUES: dict[str, Sequence[str]] = {
    "labelSelector": LABEL_SELECTORS,
    "fieldSelector": FIELD_SELECTORS,
    "continue": CONTINUE_TOKENS,
    "resourceVersion": RESOURCE_VERSIONS,
    "resourceVersionMatch": ("NotOlderThan", "Exact", "", "bogus"),
    "limit": INT_TEXT,
    "timeoutSeconds": INT_TEXT,
    "gracePeriodSeconds": INT_TEXT,
    "tailLines": INT_TEXT,
    "limitBytes": INT_TEXT,
    "sinceSeconds": INT_TEXT,
    "watch": BOOL_TEXT,
    "allowWatchBookmarks": BOOL_TEXT,
    "sendInitialEvents": BOOL_TEXT,
    "orphanDependents": BOOL_TEXT,
    "force": BOOL_TEXT,
    "follow": BOOL_TEXT,
    "previous": BOOL_TEXT,
    "timestamps": BOOL_TEXT,
    "pretty": BOOL_TEXT,
    "dryRun": ("All", "", "bogus", "all"),
    "propagationPolicy": ("Orphan", "Foreground", "Background", "", "bogus"),
    "fieldManager": ("kubectl", "", "x" * 200, "a\x00b", "ü"),
    "fieldValidation": ("Strict", "Warn", "Ignore", "", "bogus"),
    "includeObject": ("None", "Metadata", "Object", "bogus"),
    "container": ("c", "init", "", "bogus"),
    "sinceTime": ("2026-01-01T00:00:00Z", "garbage", "9999-99-99T99:99:99Z", ""),
    "hash": ("", "abc"),
    "verbose": ("", "1"),
    "exclude": ("ping", "etcd", ""),
    "bogus": ("1",),
}
# The parameters each verb reads; the others are drawn too, less often.
QUERY_FOR: dict[str, tuple[str, ...]] = {
    "GET": ("labelSelector", "fieldSelector", "limit", "continue", "resourceVersion",
            "resourceVersionMatch", "watch", "allowWatchBookmarks", "timeoutSeconds",
            "sendInitialEvents", "includeObject", "container", "follow", "previous", "tailLines",
            "limitBytes", "sinceSeconds", "sinceTime", "timestamps"),
    "DELETE": ("gracePeriodSeconds", "propagationPolicy", "orphanDependents", "dryRun",
               "labelSelector", "fieldSelector", "limit"),
    "POST": ("dryRun", "fieldManager", "fieldValidation"),
    "PUT": ("dryRun", "fieldManager", "fieldValidation"),
    "PATCH": ("dryRun", "fieldManager", "fieldValidation", "force"),
}  # fmt: skip


def _parameter(name: str) -> Strategy[tuple[str, str]]:
    values = weighted((4, st.sampled_from(QUERY_VALUES[name])), (1, _TEXT))
    return st.tuples(st.just(name), values)


def query_for(method: str) -> Strategy[list[tuple[str, str]]]:
    """Query parameters for a request of `method`: mostly the ones it reads."""
    usual = QUERY_FOR.get(method, ())
    names = weighted(
        *([(3, st.sampled_from(usual))] if usual else []),
        (1, st.sampled_from(sorted(QUERY_VALUES))),
    )
    return st.lists(names.flatmap(_parameter), max_size=4)


JSON_PATCH_OPS: Strategy[Any] = st.lists(
    st.fixed_dictionaries(
        {
            "op": st.sampled_from(("add", "remove", "replace", "move", "copy", "test", "bogus")),
            "path": st.sampled_from(
                (
                    "/metadata/labels/a",
                    "/metadata/name",
                    "/metadata/resourceVersion",
                    "/spec/containers/0/image",
                    "/spec/containers/-",
                    "/spec/containers/99999999999999999999",
                    "/spec/containers/-1",
                    "/spec/replicas",
                    "/status/phase",
                    "/status/capacity/cpu",
                    "/spec/nodeName",
                    "/metadata/labels/a~1b",
                    "/~2",
                    "/",
                    "",
                    "a",
                )
            ),
        },
        optional={"value": JSON_LEAF, "from": st.sampled_from(("/metadata", "/spec", "/x"))},
    ),
    max_size=3,
)
