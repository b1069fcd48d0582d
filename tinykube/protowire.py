"""Protocol buffers' wire format, written by hand where bytes are assembled without a message
class: the watch cache's pre-encoded events and lists, Kubernetes' protobuf bodies and answers
(apiserver/rest/kubeproto.py), the OpenAPI document's gnostic form. Pure functions.

Also `each`, how hot paths loop over a repeated field of a message (upb's containers)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def each(items: Sequence[T]) -> Sequence[T]:
    """`items` (a protobuf repeated field) to loop over. upb ends a loop over a repeated field
    by raising IndexError with a formatted message, about 2,000 instructions (bench/opcost.py:
    54 such loops were 3 % of a Pod Create's instructions), and most of a pod's repeated fields
    are empty: their slice, or nothing, ends without one."""
    return items[:] if items else ()


def varint_bytes(value: int) -> bytes:
    """A base-128 varint; a negative value as its 64-bit two's complement, as protobuf writes
    a negative int64."""
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field_key(number: int, wire: int) -> bytes:
    return varint_bytes(number << 3 | wire)


def delimited(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2): a string, bytes or a nested message."""
    return field_key(number, 2) + varint_bytes(len(payload)) + payload
