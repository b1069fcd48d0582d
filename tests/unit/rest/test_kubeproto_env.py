"""A container's env valueFrom and envFrom in a Kubernetes-protobuf body (k8s.io/api core/v1
generated.proto numbering: EnvVar.valueFrom 3, Container.envFrom 19, the selectors' embedded
LocalObjectReference 1, a Quantity's string 1), read as the JSON the manifest would be."""

from __future__ import annotations

from typing import Any

from apiserver.rest import kubeproto


def varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes([*out, n])


def field(number: int, payload: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def text(number: int, value: str) -> bytes:
    return field(number, value.encode())


def flag(number: int, value: bool) -> bytes:
    return bytes([number << 3, int(value)])


def job_with(container_fields: bytes) -> bytes:
    container = text(1, "c") + text(2, "busybox") + container_fields
    template = field(2, field(2, container) + text(3, "Never"))
    raw = field(1, text(1, "j")) + field(2, field(6, template))
    type_meta = text(1, "batch/v1") + text(2, "Job")
    return kubeproto.MAGIC + field(1, type_meta) + field(2, raw)


def container_of(body: bytes) -> dict[str, object]:
    decoded = kubeproto.decode(body)
    (container,) = decoded["spec"]["template"]["spec"]["containers"]
    return container  # type: ignore[no-any-return]


def test_value_from_every_source_and_env_from() -> None:
    cm_ref = field(1, text(1, "cfg")) + text(2, "color") + flag(3, True)
    secret_ref = field(1, text(1, "creds")) + text(2, "pass")
    field_ref = text(1, "v1") + text(2, "metadata.annotations['a']")
    resource_ref = text(1, "c") + text(2, "limits.memory") + field(3, text(1, "1Mi"))
    env = (
        field(7, text(1, "PLAIN") + text(2, "x"))
        + field(7, text(1, "IDX") + field(3, field(1, field_ref)))
        + field(7, text(1, "MEM") + field(3, field(2, resource_ref)))
        + field(7, text(1, "COLOR") + field(3, field(3, cm_ref)))
        + field(7, text(1, "PASS") + field(3, field(4, secret_ref)))
    )
    env_from = field(19, text(1, "CFG_") + field(2, field(1, text(1, "cfg")) + flag(2, False)))
    env_from += field(19, field(3, field(1, text(1, "creds"))))
    assert container_of(job_with(env + env_from)) == {
        "name": "c",
        "image": "busybox",
        "env": [
            {"name": "PLAIN", "value": "x"},
            {
                "name": "IDX",
                "valueFrom": {
                    "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.annotations['a']"}
                },
            },
            {
                "name": "MEM",
                "valueFrom": {
                    "resourceFieldRef": {
                        "containerName": "c",
                        "resource": "limits.memory",
                        "divisor": "1Mi",
                    }
                },
            },
            {
                "name": "COLOR",
                "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "color", "optional": True}},
            },
            {"name": "PASS", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "pass"}}},
        ],
        "envFrom": [
            {"prefix": "CFG_", "configMapRef": {"name": "cfg", "optional": False}},
            {"secretRef": {"name": "creds"}},
        ],
    }


def test_an_unset_divisor_reads_as_go_writes_it() -> None:
    """Go's protobuf writes a non-pointer Quantity even when unset, as "0"."""
    ref = text(2, "requests.cpu") + field(3, text(1, "0"))
    env = field(7, text(1, "CPU") + field(3, field(2, ref)))
    envs: Any = container_of(job_with(env))["env"]
    (var,) = envs
    assert var["valueFrom"] == {"resourceFieldRef": {"resource": "requests.cpu", "divisor": "0"}}


def test_file_key_ref_reads_too() -> None:
    """fileKeyRef (EnvVarSource field 5, the EnvFiles gate) is in Kubernetes' table: read as
    JSON, so the JSON path's rules (an unknown field to tinykube) apply to it."""
    env = field(7, text(1, "F") + field(3, field(5, text(1, "vol"))))
    envs: Any = container_of(job_with(env))["env"]
    assert envs == [{"name": "F", "valueFrom": {"fileKeyRef": {"volumeName": "vol"}}}]
