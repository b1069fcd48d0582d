"""Controller expectations, as in client-go's ControllerExpectations (UID-tracking flavour).

After a ReplicaSet sync creates or deletes pods it records how many creations and which pod
deletions it expects to see through the watch. Until the informer has observed them, the next
sync does not act again (it only recomputes status), so a slow watch cannot make the controller
create extra pods. Expectations expire after `timeout` seconds so a lost event cannot wedge a
ReplicaSet forever. Single event loop: no locking needed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tinykube.clock import Clock

EXPECTATIONS_TIMEOUT = 5 * 60.0


@dataclass
class _Expectation:
    add: int = 0
    delete: int = 0
    deleting: set[str] = field(default_factory=set)
    timestamp: float = 0.0

    def fulfilled(self) -> bool:
        return self.add <= 0 and self.delete <= 0


class Expectations:
    def __init__(self, clock: Clock | None = None, timeout: float = EXPECTATIONS_TIMEOUT) -> None:
        self._clock = clock or Clock()
        self._timeout = timeout
        self._by_key: dict[str, _Expectation] = {}

    def satisfied(self, key: str) -> bool:
        """True when the controller may act on `key` again."""
        exp = self._by_key.get(key)
        if exp is None:
            return True  # never synced, or expectations deleted with the owner
        if exp.fulfilled():
            return True
        return self._clock.monotonic() - exp.timestamp > self._timeout

    def expect_creations(self, key: str, count: int) -> None:
        self._by_key[key] = _Expectation(add=count, timestamp=self._clock.monotonic())

    def expect_deletions(self, key: str, pod_keys: list[str]) -> None:
        self._by_key[key] = _Expectation(
            delete=len(pod_keys), deleting=set(pod_keys), timestamp=self._clock.monotonic()
        )

    def creation_observed(self, key: str) -> None:
        exp = self._by_key.get(key)
        if exp is not None:
            exp.add -= 1

    def deletion_observed(self, key: str, pod_key: str) -> None:
        """Counts each pod once, although a pod is seen both terminating and deleted."""
        exp = self._by_key.get(key)
        if exp is not None and pod_key in exp.deleting:
            exp.deleting.discard(pod_key)
            exp.delete -= 1

    def delete(self, key: str) -> None:
        self._by_key.pop(key, None)

    def pending(self, key: str) -> tuple[int, int]:
        """(creations, deletions) still expected; for logs and tests."""
        exp = self._by_key.get(key)
        return (exp.add, exp.delete) if exp is not None else (0, 0)

    def expect(self, key: str, creations: int, pod_keys: list[str]) -> None:
        """Both at once, as kube's SetExpectations (a DaemonSet sync creates and deletes)."""
        self._by_key[key] = _Expectation(
            add=creations,
            delete=len(pod_keys),
            deleting=set(pod_keys),
            timestamp=self._clock.monotonic(),
        )
