"""Objects with a TTL (Events, kube-apiserver's --event-ttl) share etcd leases as kube's etcd3
lease manager does: a lease is granted for the TTL plus a reuse window (5 % of the TTL, at most
60 s) and handed out during that window to at most 1,000 writes."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from apiserver.__main__ import parse_args
from apiserver.storage import LEASE_MAX_OBJECTS, TTLLeases, lease_not_found, map_etcd_error

TLS = ["--tls-cert-file", "c", "--tls-private-key-file", "k"]


class Grants:
    def __init__(self) -> None:
        self.ttls: list[int] = []

    async def grant(self, ttl: int) -> int:
        await asyncio.sleep(0)  # a real grant is a round trip: writes queue behind it
        self.ttls.append(ttl)
        return len(self.ttls)  # lease IDs 1, 2, ...


def leases(grants: Grants, now: list[float]) -> TTLLeases:
    return TTLLeases(grants.grant, monotonic=lambda: now[0])


async def test_a_lease_is_shared_during_its_reuse_window() -> None:
    grants, now = Grants(), [1000.0]
    ttl = leases(grants, now)
    assert TTLLeases.reuse_seconds(3600) == 60  # 5 % is 180 s: capped at 60
    assert TTLLeases.reuse_seconds(600) == 30
    first = await ttl.lease_for(3600)
    assert grants.ttls == [3660]  # granted for the TTL plus the window
    now[0] += 59
    assert await ttl.lease_for(3600) == first
    now[0] += 1.5  # past the window: a write now must still live its whole TTL
    second = await ttl.lease_for(3600)
    assert second != first
    assert grants.ttls == [3660, 3660]


async def test_another_ttl_has_its_own_lease() -> None:
    grants, now = Grants(), [0.0]
    ttl = leases(grants, now)
    a, b = await ttl.lease_for(3600), await ttl.lease_for(60)
    assert a != b
    assert grants.ttls == [3660, 63]
    assert await ttl.lease_for(60) == b


async def test_a_lease_carries_at_most_a_thousand_objects() -> None:
    grants, now = Grants(), [0.0]
    ttl = leases(grants, now)
    given = [await ttl.lease_for(3600) for _ in range(LEASE_MAX_OBJECTS + 1)]
    assert set(given[:LEASE_MAX_OBJECTS]) == {1}
    assert given[-1] == 2


async def test_writes_arriving_together_share_one_grant() -> None:
    grants, now = Grants(), [0.0]
    ttl = leases(grants, now)
    given = await asyncio.gather(*(ttl.lease_for(3600) for _ in range(20)))
    assert set(given) == {1}
    assert len(grants.ttls) == 1


async def test_a_forgotten_lease_is_granted_anew() -> None:
    grants, now = Grants(), [0.0]
    ttl = leases(grants, now)
    first = await ttl.lease_for(3600)
    ttl.forget(first)
    assert await ttl.lease_for(3600) != first


def test_lease_not_found_recognizes_etcds_refusal_only() -> None:
    def failed(code: grpc.StatusCode, details: str) -> BaseException:
        cause = grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)
        try:
            raise map_etcd_error(cause) from cause
        except Exception as exc:
            return exc

    assert lease_not_found(
        failed(grpc.StatusCode.NOT_FOUND, "etcdserver: requested lease not found")
    )
    assert not lease_not_found(failed(grpc.StatusCode.INVALID_ARGUMENT, "etcdserver: bad"))


@pytest.mark.parametrize(
    ("flags", "seconds"),
    [
        ([], 3600),
        (["--event-ttl", "2h"], 7200),
        (["--event-ttl", "90s"], 90),
        (["--event-ttl", "0"], 0),
    ],
)
def test_event_ttl_flag(flags: list[str], seconds: int) -> None:
    settings, _ = parse_args([*TLS, *flags])
    assert settings.event_ttl_seconds == seconds


def test_a_bad_event_ttl_is_a_flag_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args([*TLS, "--event-ttl", "1x"])
    assert "--event-ttl: invalid duration '1x'" in capsys.readouterr().err
