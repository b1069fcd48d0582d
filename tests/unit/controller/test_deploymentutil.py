"""The deployment controller's arithmetic, on Kubernetes' own test tables where it has them
(pkg/controller/deployment/util/deployment_util_test.go, sync_test.go, rolling_test.go)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from google.protobuf.struct_pb2 import Value

from controller import deploymentutil as du
from controller.util import datetime_to_ts, fnv32a, safe_encode_string
from tinykube.meta import int_or_string_value
from tinykube.v1 import deployment_pb2, replicaset_pb2

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def ios(v: int | str | None) -> Value:
    return Value() if v is None else int_or_string_value(v)


def deployment(
    replicas: int,
    max_surge: int | str = 0,
    max_unavailable: int | str = 0,
    strategy: str = du.ROLLING_UPDATE,
) -> deployment_pb2.Deployment:
    """As Kubernetes' newDeployment test helper: RollingUpdate, surge and unavailable 0."""
    d = deployment_pb2.Deployment()
    d.metadata.name = "foo"
    d.metadata.namespace = "default"
    d.metadata.generation = 1
    d.spec.replicas = replicas
    d.spec.strategy.type = strategy
    if strategy == du.ROLLING_UPDATE:
        d.spec.strategy.rollingUpdate.maxSurge.CopyFrom(ios(max_surge))
        d.spec.strategy.rollingUpdate.maxUnavailable.CopyFrom(ios(max_unavailable))
    return d


def rs(name: str, replicas: int, age: int = 0, available: int = 0) -> replicaset_pb2.ReplicaSet:
    """A ReplicaSet created `age` minutes before NOW."""
    out = replicaset_pb2.ReplicaSet()
    out.metadata.name = name
    out.metadata.uid = f"uid-{name}"
    out.metadata.creationTimestamp.CopyFrom(datetime_to_ts(NOW - timedelta(minutes=age)))
    out.spec.replicas = replicas
    out.status.availableReplicas = available
    return out


@pytest.mark.parametrize(
    ("surge", "unavailable", "desired", "expected"),
    [
        ("0%", "0%", 0, (0, 1)),
        ("39%", "39%", 10, (4, 3)),  # surge rounds up, unavailable down
        (None, "39%", 10, (0, 3)),
        ("39%", None, 10, (4, 0)),
        (None, None, 10, (0, 1)),
        (2, 3, 10, (2, 3)),
        ("25%", "25%", 1, (1, 0)),
        ("25%", "25%", 1000, (250, 250)),
    ],
)
def test_resolve_fenceposts(
    surge: str | None, unavailable: str | None, desired: int, expected: tuple[int, int]
) -> None:
    assert du.resolve_fenceposts(ios(surge), ios(unavailable), desired) == expected


@pytest.mark.parametrize(("surge", "unavailable"), [("oops", "39%"), ("55%", "urg")])
def test_resolve_fenceposts_refuses_what_is_not_a_percentage(surge: str, unavailable: str) -> None:
    with pytest.raises(ValueError, match="invalid value for IntOrString"):
        du.resolve_fenceposts(ios(surge), ios(unavailable), 10)


@pytest.mark.parametrize(
    ("d", "expected"),
    [
        (deployment(10, 1, 5), 5),
        (deployment(10, 1, 10), 10),
        (deployment(5, 1, 10), 5),  # never more than replicas
        (deployment(0, 1, 10), 0),
        (deployment(10, strategy=du.RECREATE), 0),
        (deployment(10, 1, "50%"), 5),
        (deployment(10, 1, "100%"), 10),
        (deployment(5, 1, "100%"), 5),
    ],
)
def test_max_unavailable(d: deployment_pb2.Deployment, expected: int) -> None:
    assert du.max_unavailable(d) == expected


@pytest.mark.parametrize(
    ("strategy", "dep_replicas", "new_rs_replicas", "surge", "expected"),
    [
        # kube's TestNewRSNewReplicas; the only other ReplicaSet has 5 replicas.
        (du.ROLLING_UPDATE, 1, 5, 1, 5),  # at replicas + surge already: no growth
        (du.ROLLING_UPDATE, 6, 2, 10, 6),  # grows to replicas, not to the surge
        (du.RECREATE, 3, 1, 1, 3),
    ],
)
def test_new_rs_new_replicas(
    strategy: str, dep_replicas: int, new_rs_replicas: int, surge: int, expected: int
) -> None:
    d = deployment(dep_replicas, surge, 1, strategy)
    new = rs("new", new_rs_replicas)
    assert du.new_rs_new_replicas(d, [rs("rs5", 5)], new) == expected


@pytest.mark.parametrize(
    ("replicas", "surge", "old", "new", "expected"),
    [
        # kube's TestDeploymentController_reconcileNewReplicaSet (unavailable 0)
        (10, 0, 10, 0, 0),
        (10, 2, 10, 0, 2),
        (10, 2, 5, 0, 7),
        (10, 2, 10, 2, 2),
    ],
)
def test_new_rs_growth_within_the_surge(
    replicas: int, surge: int, old: int, new: int, expected: int
) -> None:
    d = deployment(replicas, surge, 0)
    new_rs = rs("new", new)
    assert du.new_rs_new_replicas(d, [rs("old", old, age=5), new_rs], new_rs) == expected


@pytest.mark.parametrize(
    ("old", "old_pods", "expected"),
    [
        (5, 5, 7),  # 5 old pods: the new one may have 7 of the 12
        (5, 10, 2),  # scaled to 5, but its status still counts 10 pods: only 2 fit
        (5, 12, 0),  # no room until the old pods are gone
        (5, 3, 7),  # fewer pods than spec.replicas: spec.replicas counts
    ],
)
def test_new_rs_growth_counts_old_pods_until_they_are_gone(
    old: int, old_pods: int, expected: int
) -> None:
    d = deployment(10, 2, 0)
    old_rs = rs("old", old, age=5)
    old_rs.status.replicas = old_pods
    new_rs = rs("new", 0)
    assert du.new_rs_new_replicas(d, [old_rs, new_rs], new_rs) == expected


@pytest.mark.parametrize(
    ("name", "replicas", "old_replicas", "surge", "old_surge", "rss", "desired", "expected"),
    [
        # kube's TestScale: (name, size, minutes old) per ReplicaSet, newest first.
        ("normal 10 -> 12", 12, 10, 0, 0, [("v1", 10, 0)], {}, {"v1": 12}),
        ("normal 10 -> 5", 5, 10, 0, 0, [("v1", 10, 0)], {}, {"v1": 5}),
        ("proportional 5 -> 10", 10, 5, 0, 0, [("v2", 2, 0), ("v1", 3, 1)], {}, {"v2": 4, "v1": 6}),
        ("proportional 5 -> 3", 3, 5, 0, 0, [("v2", 2, 0), ("v1", 3, 1)], {}, {"v2": 1, "v1": 2}),
        ("proportional 9 -> 4", 4, 9, 0, 0, [("v2", 8, 0), ("v1", 1, 1)], {}, {"v2": 4, "v1": 0}),
        (
            "proportional 7 -> 10", 10, 7, 0, 0,
            [("v3", 2, 0), ("v2", 3, 1), ("v1", 2, 2)], {}, {"v3": 3, "v2": 4, "v1": 3},
        ),
        (
            "proportional 13 -> 8", 8, 13, 0, 0,
            [("v3", 2, 0), ("v2", 8, 1), ("v1", 3, 2)], {}, {"v3": 1, "v2": 5, "v1": 2},
        ),
        (
            "leftover 3 -> 4 goes to the newest", 4, 3, 0, 0,
            [("v3", 1, 0), ("v2", 1, 1), ("v1", 1, 2)], {}, {"v3": 2, "v2": 1, "v1": 1},
        ),
        (
            "leftover 3 -> 2 comes from the oldest", 2, 3, 0, 0,
            [("v3", 1, 0), ("v2", 1, 1), ("v1", 1, 2)], {}, {"v3": 1, "v2": 1, "v1": 0},
        ),
        (
            "6 -> 0", 0, 6, 0, 0,
            [("v3", 3, 0), ("v2", 2, 1), ("v1", 1, 2)], {}, {"v3": 0, "v2": 0, "v1": 0},
        ),
        (
            "a ReplicaSet sized for 3 while the rest were for 5", 5, 5, 0, 0,
            [("v3", 2, 0), ("v2", 1, 1), ("v1", 1, 2)], {"v2": 3}, {"v3": 2, "v2": 2, "v1": 1},
        ),
        ("with surge pods", 20, 10, 2, 2, [("v2", 6, 0), ("v1", 6, 1)], {}, {"v2": 11, "v1": 11}),
        (
            "both surge and size change", 50, 10, 6, 3,
            [("v2", 5, 0), ("v1", 8, 1)], {}, {"v2": 22, "v1": 34},
        ),
        (
            "size and template change (no new ReplicaSet)", 14, 10, 0, 0,
            [("v2", 7, 0), ("v1", 3, 1)], {}, {"v2": 10, "v1": 4},
        ),
    ],
)  # fmt: skip
def test_proportional_scaling(
    name: str,
    replicas: int,
    old_replicas: int,
    surge: int,
    old_surge: int,
    rss: list[tuple[str, int, int]],
    desired: dict[str, int],
    expected: dict[str, int],
) -> None:
    d = deployment(replicas, surge, 0)
    old = deployment(old_replicas, old_surge, 0)
    sets = [rs(n, size, age) for n, size, age in rss]
    for r in sets:
        want = desired.get(r.metadata.name, old_replicas)
        du.set_replicas_annotations(r, want, want + du.max_surge(old))
    only = du.find_active_or_latest(None, sets)
    if only is not None:
        got = {r.metadata.name: r.spec.replicas for r in sets}
        got[only.metadata.name] = replicas
    else:
        got = du.proportional_sizes(d, sets)
    assert got == expected, name


def test_saturated_new_replica_set_means_old_ones_go() -> None:
    d = deployment(3, 1, 1)
    new = rs("new", 3, available=3)
    du.set_replicas_annotations(new, 3, 4)
    assert du.is_saturated(d, new)
    new.status.availableReplicas = 2
    assert not du.is_saturated(d, new)  # a broken new ReplicaSet does not drain the old ones


@pytest.mark.parametrize(
    ("replicas", "unavailable", "old", "new", "old_ready", "new_ready", "expected_old"),
    [
        # kube's TestDeploymentController_reconcileOldReplicaSets (surge 0)
        (10, 0, 10, 0, 10, 0, 9),  # unavailable 0 with surge 0 means 1
        (10, 2, 10, 0, 10, 0, 8),
        (10, 2, 10, 0, 8, 0, 8),  # the 2 unhealthy pods go first, nothing more
        (10, 2, 10, 0, 9, 0, 8),  # 1 unhealthy, then 1 available
        (10, 2, 8, 2, 8, 0, None),  # the new ReplicaSet's unavailable pods hold it
    ],
)
def test_old_replica_sets_shrink_within_max_unavailable(
    replicas: int,
    unavailable: int,
    old: int,
    new: int,
    old_ready: int,
    new_ready: int,
    expected_old: int | None,
) -> None:
    d = deployment(replicas, 0, unavailable)
    old_rs = rs("old", old, age=5, available=old_ready)
    new_rs = rs("new", new, available=new_ready)
    min_available = replicas - du.max_unavailable(d)
    max_scaled_down = old + new - min_available - (new - new_ready)
    if max_scaled_down <= 0:
        assert expected_old is None
        return
    cleanup = du.cleanup_unhealthy_plan([old_rs], max_scaled_down)
    if "old" in cleanup:
        old_rs.spec.replicas = cleanup["old"]
    plan = du.scale_down_old_plan(d, [old_rs, new_rs], [old_rs])
    final = plan.get("old", old_rs.spec.replicas)
    if expected_old is None:
        assert final == old
    else:
        assert final == expected_old


@pytest.mark.parametrize(
    ("old", "ready", "max_cleanup", "cleaned"),
    # kube's TestDeploymentController_cleanupUnhealthyReplicas
    [(10, 8, 1, 1), (10, 8, 3, 2), (10, 8, 0, 0), (10, 10, 3, 0)],
)
def test_cleanup_unhealthy(old: int, ready: int, max_cleanup: int, cleaned: int) -> None:
    plan = du.cleanup_unhealthy_plan([rs("v2", old, available=ready)], max_cleanup)
    assert old - plan.get("v2", old) == cleaned


@pytest.mark.parametrize(
    ("replicas", "unavailable", "ready", "old", "expected"),
    # kube's TestDeploymentController_scaleDownOldReplicaSetsForRollingUpdate (surge 0)
    [
        (10, 0, 10, 10, 9),  # surge 0 and unavailable 0: one may be unavailable after all
        (10, 2, 10, 10, 8),
        (10, 2, 8, 10, None),
        (10, 2, 10, 0, None),
        (10, 2, 1, 10, None),
    ],
)
def test_scale_down_old_for_rolling_update(
    replicas: int, unavailable: int, ready: int, old: int, expected: int | None
) -> None:
    d = deployment(replicas, 0, unavailable)
    old_rs = rs("v2", old, available=ready)
    assert du.scale_down_old_plan(d, [old_rs], [old_rs]).get("v2") == expected


def _history_rs(name: str, spec: int, status: int, revision: int) -> replicaset_pb2.ReplicaSet:
    out = rs(name, spec, age=100 - revision)
    out.status.replicas = status
    out.metadata.annotations[du.REVISION_ANNOTATION] = str(revision)
    return out


@pytest.mark.parametrize(
    ("sets", "limit", "deleted"),
    [
        # kube's TestDeploymentController_cleanupDeployment: (spec, status) per revision
        ([(0, 0), (0, 0), (0, 0)], 1, ["foo-1", "foo-2"]),
        ([(0, 0), (0, 1), (1, 0), (1, 1)], 0, ["foo-1"]),  # only the empty ones go
        ([(0, 0), (0, 0)], 0, ["foo-1", "foo-2"]),
        ([(1, 1), (1, 1)], 0, []),
        ([(0, 0), (0, 0), (0, 0)], 10, []),
    ],
)
def test_history_beyond_the_limit(
    sets: list[tuple[int, int]], limit: int, deleted: list[str]
) -> None:
    old = [_history_rs(f"foo-{i}", s, st, i) for i, (s, st) in enumerate(sets, start=1)]
    assert [r.metadata.name for r in du.history_to_delete(old, limit)] == deleted


def test_history_keeps_unsynced_and_deleting_replica_sets() -> None:
    unsynced = _history_rs("foo-1", 0, 0, 1)
    unsynced.metadata.generation = 2
    unsynced.status.observedGeneration = 1
    deleting = _history_rs("foo-2", 0, 0, 2)
    deleting.metadata.deletionTimestamp.CopyFrom(datetime_to_ts(NOW))
    assert du.history_to_delete([unsynced, deleting], 0) == []


# ---- the hash ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    # Kubernetes' SafeEncodeString maps each byte modulo 27 into "bcdfghjklmnpqrstvwxz2456789".
    [("0123456789", "456789bcdf"), ("", ""), ("1", "5")],
)
def test_safe_encode_string(text: str, expected: str) -> None:
    assert safe_encode_string(text) == expected


@pytest.mark.parametrize(
    ("data", "expected"),
    # FNV-1a 32-bit test vectors
    [(b"", 0x811C9DC5), (b"a", 0xE40C292C), (b"foobar", 0xBF9CF968)],
)
def test_fnv32a(data: bytes, expected: int) -> None:
    assert fnv32a(data) == expected


def _template(image: str) -> replicaset_pb2.PodTemplateSpec:
    t = replicaset_pb2.PodTemplateSpec()
    t.metadata.labels["app"] = "web"
    t.spec.containers.add(name="c", image=image)
    return t


def test_hash_follows_the_template_and_the_collision_count() -> None:
    a, b = _template("nginx:1"), _template("nginx:2")
    ha = du.compute_hash(a, None)
    assert ha == du.compute_hash(_template("nginx:1"), None)  # deterministic
    assert ha != du.compute_hash(b, None)
    assert ha != du.compute_hash(a, 1) != du.compute_hash(a, 2)
    assert set(ha) <= set("bcdfghjklmnpqrstvwxz2456789") and 1 <= len(ha) <= 10
    # The hash label itself is not part of what makes two templates equal.
    labelled = _template("nginx:1")
    labelled.metadata.labels[du.POD_TEMPLATE_HASH_LABEL] = ha
    assert du.equal_ignore_hash(labelled, a) and not du.equal_ignore_hash(labelled, b)
    # An empty part is no part (`kubectl rollout undo` sends `resources: {}` back).
    emptied = _template("nginx:1")
    emptied.spec.containers[0].resources.SetInParent()
    assert emptied != a and du.equal_ignore_hash(emptied, a)
    assert du.compute_hash(emptied, None) == ha


def test_template_keys_follow_the_template_not_the_message() -> None:
    # The key is memoized by the template's bytes: a template changed in place gets a new key,
    # and templates equal but for the hash label and empty parts share one.
    t = _template("nginx:1")
    before = du.template_key(t)
    t.spec.containers[0].image = "nginx:2"
    assert du.template_key(t) != before and du.template_key(t) == du.template_key(
        _template("nginx:2")
    )
    t.spec.containers[0].image = "nginx:1"
    assert du.template_key(t) == before
    labelled = _template("nginx:1")
    labelled.metadata.labels[du.POD_TEMPLATE_HASH_LABEL] = "abc"
    labelled.spec.containers[0].resources.SetInParent()
    assert du.template_key(labelled) == before
    del labelled.metadata.labels["app"]
    assert du.template_key(labelled) != before


# ---- revisions and annotations ----------------------------------------------------------------


def test_rollback_moves_the_old_revision_into_the_history() -> None:
    d = deployment(3, 1, 1)
    d.metadata.annotations["team"] = "a"
    d.metadata.annotations[du.LAST_APPLIED_ANNOTATION] = "{}"
    old = rs("foo-1", 0)
    old.metadata.annotations[du.REVISION_ANNOTATION] = "1"
    assert du.set_new_rs_annotations(d, old, "3", True)
    ann = dict(old.metadata.annotations)
    assert ann == {du.REVISION_ANNOTATION: "3", du.REVISION_HISTORY_ANNOTATION: "1", "team": "a"}
    assert du.set_new_rs_annotations(d, old, "5", True)
    assert old.metadata.annotations[du.REVISION_HISTORY_ANNOTATION] == "1,3"
    assert not du.set_new_rs_annotations(d, old, "5", True)  # nothing new


def test_a_new_replica_set_gets_the_replica_annotations() -> None:
    d = deployment(10, "25%", "25%")
    new = rs("foo-2", 0)
    du.set_new_rs_annotations(d, new, "2", False)
    assert new.metadata.annotations[du.DESIRED_REPLICAS_ANNOTATION] == "10"
    assert new.metadata.annotations[du.MAX_REPLICAS_ANNOTATION] == "13"


# ---- status and conditions ---------------------------------------------------------------------


def _with_progressing(d: deployment_pb2.Deployment, reason: str, minutes_ago: int) -> None:
    cond = du.new_condition(
        du.PROGRESSING, "True", reason, "", NOW - timedelta(minutes=minutes_ago)
    )
    d.status.conditions.append(cond)


def test_status_adds_up_the_replica_sets() -> None:
    d = deployment(4, 1, 1)
    new, old = rs("new", 2, available=1), rs("old", 3, age=5, available=3)
    new.status.replicas, new.status.readyReplicas = 2, 2
    old.status.replicas, old.status.readyReplicas = 3, 3
    st = du.calculate_status([old, new], new, d, NOW, terminating=1)
    assert (st.replicas, st.updatedReplicas, st.readyReplicas, st.availableReplicas) == (5, 2, 5, 4)
    assert (st.unavailableReplicas, st.terminatingReplicas, st.observedGeneration) == (1, 1, 1)
    (cond,) = st.conditions
    assert (cond.type, cond.status, cond.reason) == (
        "Available",
        "True",
        "MinimumReplicasAvailable",
    )
    old.status.availableReplicas = 1
    (cond,) = du.calculate_status([old, new], new, d, NOW).conditions
    assert (cond.status, cond.reason, cond.message) == (
        "False",
        "MinimumReplicasUnavailable",
        "Deployment does not have minimum availability.",
    )


PROGRESSING_MSG = 'ReplicaSet "new" is progressing.'
TIMED_OUT_MSG = 'ReplicaSet "new" has timed out progressing.'


@pytest.mark.parametrize(
    ("reason", "minutes_ago", "progressed", "expected"),
    [
        (du.RS_UPDATED_REASON, 1, True, ("True", "ReplicaSetUpdated", PROGRESSING_MSG)),
        (du.RS_UPDATED_REASON, 11, False, ("False", "ProgressDeadlineExceeded", TIMED_OUT_MSG)),
        (du.RS_UPDATED_REASON, 9, False, ("True", "ReplicaSetUpdated", "")),  # within the deadline
        (du.NEW_RS_REASON, 11, True, ("True", "ReplicaSetUpdated", PROGRESSING_MSG)),
    ],
)  # fmt: skip
def test_progressing_condition(
    reason: str, minutes_ago: int, progressed: bool, expected: tuple[str, str, str]
) -> None:
    d = deployment(3, 1, 0)
    d.spec.progressDeadlineSeconds = 600
    _with_progressing(d, reason, minutes_ago)
    new, old = rs("new", 2, available=0), rs("old", 2, age=5, available=2)
    new.status.replicas, old.status.replicas = 2, 2
    # The stored status: as now, or with one updated pod fewer (then the rollout progressed).
    d.status.replicas, d.status.availableReplicas = 4, 2
    d.status.updatedReplicas = 1 if progressed else 2
    st = du.rollout_status(d, [old, new], new, NOW)
    cond = du.get_condition(st, du.PROGRESSING)
    assert cond is not None
    want_status, want_reason, want_message = expected
    assert (cond.status, cond.reason) == (want_status, want_reason)
    if want_message:
        assert cond.message == want_message


def test_complete_rollout() -> None:
    d = deployment(2, 1, 0)
    d.spec.progressDeadlineSeconds = 600
    _with_progressing(d, du.RS_UPDATED_REASON, 1)
    new = rs("new", 2, available=2)
    new.status.replicas = new.status.readyReplicas = 2
    st = du.rollout_status(d, [new], new, NOW)
    cond = du.get_condition(st, du.PROGRESSING)
    assert cond is not None
    assert (cond.status, cond.reason, cond.message) == (
        "True",
        "NewReplicaSetAvailable",
        'ReplicaSet "new" has successfully progressed.',
    )
    assert du.deployment_complete(d, st)


@pytest.mark.parametrize(
    ("old", "old_available", "new", "new_available", "expected"),
    # 10 replicas, 2 unavailable: 8 must stay available
    [
        (10, 10, 3, 3, 5),  # 13 available, 5 may go
        (9, 10, 3, 3, 5),  # scaled to 9 before; the status still counts the pod that goes
        (5, 10, 3, 3, 5),  # nothing more may go: 5 + 3 remain
        (9, 9, 3, 3, 5),
        (10, 10, 2, 3, 6),  # a shrunk new ReplicaSet keeps 2 of its 3 available pods
    ],
)
def test_scale_down_counts_available_pods_no_further_than_spec(
    old: int, old_available: int, new: int, new_available: int, expected: int
) -> None:
    d = deployment(10, 3, 2)
    old_rs = rs("v1", old, age=5, available=old_available)
    new_rs = rs("v2", new, available=new_available)
    plan = du.scale_down_old_plan(d, [old_rs, new_rs], [old_rs])
    assert plan.get("v1", old) == expected
