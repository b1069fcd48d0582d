"""`<Kind>WriteResult`, the answer of a write stream: one encoder builds it for every kind
(apiserver.grpcapi.encode_write_result), so every kind's message must keep the field numbers it
writes, and what it writes must decode as the typed message clients read."""

from __future__ import annotations

import grpc
import pytest

from apiserver.grpcapi import STREAM_SUFFIX, STREAMABLE_WRITES, encode_write_result
from tinykube import kinds
from tinykube.errors import ConflictError
from tinykube.v1 import lease_pb2, pod_pb2
from tinykube.writestream import write_result_type

STREAMING = [info for info in kinds.ALL_KINDS if write_result_type(info.message) is not None]


def test_the_kinds_with_write_streams() -> None:
    assert sorted(info.kind for info in STREAMING) == ["Lease", "Node", "Pod"]


@pytest.mark.parametrize("info", STREAMING, ids=[i.kind for i in STREAMING])
def test_field_numbers_are_the_encoders(info: kinds.KindInfo) -> None:
    result = write_result_type(info.message)
    assert result is not None
    fields = {f.number: f for f in result.DESCRIPTOR.fields}
    assert {n: f.name for n, f in fields.items()} == {
        1: "code",
        2: "message",
        3: info.request_field,
        4: "warnings",
        5: "retryAfterMilliseconds",
    }
    assert fields[3].message_type is info.message.DESCRIPTOR
    assert fields[4].is_repeated
    # Every declared stream is of a write method, taking that method's request.
    service = info.message.DESCRIPTOR.file.services_by_name[info.service.rpartition(".")[2]]
    streams = [m for m in service.methods if m.name.endswith(STREAM_SUFFIX)]
    assert streams
    for method in streams:
        base = method.name.removesuffix(STREAM_SUFFIX)
        assert base in STREAMABLE_WRITES
        assert method.client_streaming and method.server_streaming
        assert method.output_type is result.DESCRIPTOR
        assert method.input_type is service.methods_by_name[base].input_type


def test_an_object_round_trips() -> None:
    pod = pod_pb2.Pod(apiVersion="v1", kind="Pod")
    pod.metadata.name, pod.metadata.namespace = "web", "default"
    pod.spec.containers.add(name="c", image="nginx")
    for obj in (pod, pod.SerializeToString()):
        decoded = pod_pb2.PodWriteResult.FromString(encode_write_result(obj, warnings=["w1", "w2"]))
        assert decoded.code == 0 and decoded.message == ""
        assert decoded.pod == pod
        assert list(decoded.warnings) == ["w1", "w2"]


def test_an_error_round_trips() -> None:
    err = ConflictError('Operation cannot be fulfilled on leases "n1": ünïcode')
    raw = encode_write_result(None, err.code.value[0], err.message, retry_after_ms=1500)
    decoded = lease_pb2.LeaseWriteResult.FromString(raw)
    assert decoded.code == grpc.StatusCode.ABORTED.value[0]
    assert decoded.message == err.message
    assert not decoded.HasField("lease")
    assert decoded.retryAfterMilliseconds == 1500
    # Large values take several varint bytes.
    big = lease_pb2.LeaseWriteResult.FromString(encode_write_result(None, 16, "x" * 300, (), 10**6))
    assert (big.code, len(big.message), big.retryAfterMilliseconds) == (16, 300, 10**6)
