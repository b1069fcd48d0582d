"""Controller-manager flags and their Kubernetes defaults."""

from __future__ import annotations

import pytest

from controller.settings import Settings as ControllerSettings


def test_controller_manager_flags() -> None:
    s = ControllerSettings.from_args([])
    assert (s.lease_duration, s.renew_deadline, s.retry_period) == (15.0, 10.0, 2.0)
    assert (s.lease_namespace, s.lease_name) == ("kube-system", "tinykube-controller-manager")
    assert s.node_monitor_grace_period == 40.0
    assert s.default_unreachable_toleration_seconds == 300.0
    assert s.bind_address == "127.0.0.1:10257"
    s = ControllerSettings.from_args(
        ["--node-monitor-grace-period", "5s", "--controllers", "replicaset",
         "--leader-elect", "false"]
    )  # fmt: skip
    assert (s.node_monitor_grace_period, s.controllers, s.leader_elect) == (
        5.0,
        ("replicaset",),
        False,
    )
    with pytest.raises(SystemExit):
        ControllerSettings.from_args(["--controllers", "replicaset,nope"])


def test_node_eviction_flags(capsys: pytest.CaptureFixture[str]) -> None:
    s = ControllerSettings.from_args([])
    assert (
        s.node_eviction_rate,
        s.secondary_node_eviction_rate,
        s.large_cluster_size_threshold,
        s.unhealthy_zone_threshold,
    ) == (0.1, 0.01, 50, 0.55)
    s = ControllerSettings.from_args(
        ["--node-eviction-rate", "2", "--secondary-node-eviction-rate", "0",
         "--large-cluster-size-threshold", "10", "--unhealthy-zone-threshold", "1"]
    )  # fmt: skip
    assert (s.node_eviction_rate, s.secondary_node_eviction_rate) == (2.0, 0.0)
    assert (s.large_cluster_size_threshold, s.unhealthy_zone_threshold) == (10, 1.0)
    for argv, message in [
        (["--node-eviction-rate", "-1"], "--node-eviction-rate must be 0 or more, not -1.0"),
        (["--secondary-node-eviction-rate", "nan"], "--secondary-node-eviction-rate must be"),
        (["--large-cluster-size-threshold", "-3"], "--large-cluster-size-threshold must be"),
        (["--unhealthy-zone-threshold", "0"], "--unhealthy-zone-threshold must be above 0"),
        (["--unhealthy-zone-threshold", "1.5"], "and at most 1, not 1.5"),
    ]:
        with pytest.raises(SystemExit):
            ControllerSettings.from_args(argv)
        assert message in capsys.readouterr().err, argv
