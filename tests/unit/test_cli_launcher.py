"""LocalCluster's command lines, names and ports, and `tinykube up`'s flags (no processes)."""

from __future__ import annotations

import io
import os
import sys
import threading
from pathlib import Path

import pytest
import yaml

from tinykube import launcher
from tinykube.cli import up
from tinykube.cli.common import Context
from tinykube.cli.main import build_parser, main
from tinykube.cli.up import build_cluster
from tinykube.kubeconfig import load, write_kubeconfig
from tinykube.launcher import Component, LocalCluster, log_tail
from tinykube.pdeathsig import with_parent_death_signal


def cluster(tmp_path: Path, **kwargs: object) -> LocalCluster:
    ports: dict[str, object] = {
        "apiserver_port": 6443,
        "scheduler_port": 10259,
        "controller_port": 10257,
        "kubelet_port": 10250,
        "rest_port": 8080,
        "etcd_endpoint": "127.0.0.1:2379",
    }
    ports.update(kwargs)
    return LocalCluster(tmp_path, **ports)  # type: ignore[arg-type]


def test_components_ports_and_names(tmp_path: Path) -> None:
    c = cluster(tmp_path, kubelets=["a", "b", "c"])
    assert list(c.components) == [
        "apiserver",
        "scheduler",
        "controller",
        "kubelet-a",
        "kubelet-b",
        "kubelet-c",
    ]
    assert [c.address(f"kubelet-{n}") for n in "abc"] == [
        "127.0.0.1:10250",
        "127.0.0.1:10251",
        "127.0.0.1:10252",
    ]
    assert c.api_address == "127.0.0.1:6443"
    # kubectl with no kubeconfig talks to localhost:8080: the REST API's default port.
    assert c.rest_address == "127.0.0.1:8080"
    assert c.rest_url == "https://127.0.0.1:8080"
    assert cluster(tmp_path, insecure=True).rest_url == "http://127.0.0.1:8080"
    apiserver = c.command(c.components["apiserver"])
    assert apiserver[apiserver.index("--rest-port") + 1] == "8080"
    assert c.kubeconfig == tmp_path.resolve() / "kubeconfig"
    # The bare node name is an alias of its kubelet.
    assert c.address("b") == "127.0.0.1:10251"
    assert c.log_path("b") == tmp_path.resolve() / "logs" / "kubelet-b.log"
    with pytest.raises(KeyError, match="no component 'nope'"):
        c.address("nope")


def test_optional_components_can_be_left_out(tmp_path: Path) -> None:
    c = cluster(tmp_path, scheduler=False, controller=False, kubelets=[])
    assert list(c.components) == ["apiserver"]


def test_command_lines(tmp_path: Path) -> None:
    c = cluster(
        tmp_path,
        insecure=True,
        kubelets=["n1", "n2"],
        kubelet_runtime="fake",
        extra_args={"kubelet": ["--poll-interval", "1s"], "kubelet-n2": ["--node-ip", "10.0.0.2"]},
    )
    py = sys.executable
    assert c.command(c.components["apiserver"]) == [
        py,
        "-m",
        "apiserver",
        "--etcd-servers",
        "127.0.0.1:2379",
        "--bind-address",
        "127.0.0.1:6443",
        "--rest-port",
        "8080",
        "--insecure",
    ]
    assert c.command(c.components["scheduler"]) == [
        py,
        "-m",
        "scheduler",
        "--apiserver",
        "127.0.0.1:6443",
        "--bind-address",
        "127.0.0.1",
        "--port",
        "10259",
        "--insecure",
    ]
    n1 = c.command(c.components["kubelet-n1"])
    assert n1[2:] == [
        "kubelet",
        "--apiserver",
        "127.0.0.1:6443",
        "--bind-address",
        "127.0.0.1",
        "--port",
        "10250",
        "--runtime",
        "fake",
        "--insecure",
        "--node-name",
        "n1",
        "--poll-interval",
        "1s",
    ]
    # Per-module extra args apply to every instance, per-name ones to that one only.
    n2 = c.command(c.components["kubelet-n2"])
    assert n2[-4:] == ["--poll-interval", "1s", "--node-ip", "10.0.0.2"]


def test_tls_command_lines_name_each_components_certificates(tmp_path: Path) -> None:
    c = cluster(tmp_path, kubelets=["n1"], proxies=True, etcd_endpoint="https://127.0.0.1:2379")
    pki = tmp_path.resolve() / "pki"

    def flags(name: str) -> dict[str, str]:
        cmd = c.command(c.components[name])
        return {a: cmd[i + 1] for i, a in enumerate(cmd) if a.startswith("--") and i + 1 < len(cmd)}

    api = flags("apiserver")
    assert api["--etcd-servers"] == "https://127.0.0.1:2379"
    assert (api["--tls-cert-file"], api["--client-ca-file"]) == (
        str(pki / "apiserver.crt"),
        str(pki / "ca.crt"),
    )
    assert api["--etcd-certfile"] == str(pki / "apiserver-etcd-client.crt")
    assert api["--kubelet-client-certificate"] == str(pki / "apiserver-kubelet-client.crt")
    assert api["--kubelet-certificate-authority"] == str(pki / "ca.crt")
    # one service account key pair for every apiserver (kubeadm's sa.key / sa.pub)
    assert api["--service-account-key-file"] == str(pki / "sa.pub")
    assert api["--service-account-signing-key-file"] == str(pki / "sa.key")
    cm = flags("controller")
    assert cm["--service-account-private-key-file"] == str(pki / "sa.key")
    assert cm["--root-ca-file"] == str(pki / "ca.crt")
    for name, conf, serving in (
        ("scheduler", "scheduler.conf", "scheduler-serving"),
        ("controller", "controller-manager.conf", "controller-manager-serving"),
        ("kubelet-n1", "kubelet-n1.conf", "kubelet-n1-serving"),
        ("proxy-n1", "proxy.conf", "proxy-n1-serving"),
    ):
        got = flags(name)
        assert got["--kubeconfig"] == str(tmp_path.resolve() / conf), name
        assert got["--tls-cert-file"] == str(pki / f"{serving}.crt"), name
        assert "--insecure" not in c.command(c.components[name])
    # a plaintext etcd given by the caller gets no etcd certificates
    plain = cluster(tmp_path, kubelets=[])
    assert "--etcd-cafile" not in plain.command(plain.components["apiserver"])


def test_new_instances_are_named_after_their_component(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    second = c._new_component("scheduler-2")
    assert (second.module, second.name) == ("scheduler", "scheduler-2")
    kubelet = c._new_component("kubelet-n9")
    assert (kubelet.module, kubelet.args) == ("kubelet", ["--node-name", "n9"])
    with pytest.raises(KeyError):
        c._new_component("mystery")


@pytest.mark.parametrize(
    ("kwargs", "extra"),
    [
        ({}, []),
        ({"ha": True}, ["scheduler-2", "controller-2"]),
        ({"schedulers": 3, "controllers": 1}, ["scheduler-2", "scheduler-3"]),
        ({"ha": True, "scheduler": False}, ["controller-2"]),
    ],
)
def test_standby_schedulers_and_controller_managers(
    tmp_path: Path, kwargs: dict[str, object], extra: list[str]
) -> None:
    c = cluster(tmp_path, kubelets=[], **kwargs)
    base = [n for n in ("apiserver", "scheduler", "controller") if kwargs.get(n, True)]
    base += ["apiserver-2"] if kwargs.get("ha") else []  # --ha's second apiserver
    assert sorted(c.components) == sorted([*base, *extra])
    ports = {c.components[n].port for n in c.components}
    assert len(ports) == len(c.components)
    for name in extra:
        comp = c.components[name]
        assert comp.module == name.rsplit("-", 1)[0]
        # Fixed ports: the first one's + 100 per further instance.
        first = {"scheduler": 10259, "controller": 10257}[comp.module]
        assert comp.port == first + 100 * (int(name.rsplit("-", 1)[1]) - 1)


def test_every_client_is_given_every_apiserver(tmp_path: Path) -> None:
    c = cluster(tmp_path, kubelets=["a"], proxies=True, insecure=True, ha=True)
    c.components["apiserver-2"] = Component("apiserver-2", "apiserver", 6444)
    both = "127.0.0.1:6443,127.0.0.1:6444"
    for name in ("scheduler", "scheduler-2", "controller", "controller-2", "kubelet-a", "proxy-a"):
        command = c.command(c.components[name])
        assert command[command.index("--apiserver") + 1] == both, name
    c.make_credentials()
    assert load(c.kubeconfig).grpc_servers == ("127.0.0.1:6443", "127.0.0.1:6444")


def test_stop_before_start_is_a_no_op(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    c.stop()
    assert c.processes == {}


def test_log_tail(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    assert log_tail(log) == "(no log)"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    tail = log_tail(log, lines=3)
    assert tail == "line 97\nline 98\nline 99"


def test_up_flags_map_to_the_cluster(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        ["up", "--data-dir", str(tmp_path), "--kubelets", "3", "--no-controller"]
    )
    c = build_cluster(args)
    assert c.work_dir == tmp_path.resolve()
    assert list(c.components) == [
        "apiserver",
        "scheduler",
        "kubelet-node-1",
        "proxy-node-1",
        "kubelet-node-2",
        "proxy-node-2",
        "kubelet-node-3",
        "proxy-node-3",
    ]
    assert c.api_address == "127.0.0.1:6443"
    assert c.rest_address == "127.0.0.1:8080"
    # With proxies each node has its own loopback address (pods bind $POD_IP).
    assert c.address("node-3") == "127.0.1.3:10252"
    node_3 = c.command(c.components["kubelet-node-3"])
    assert node_3[node_3.index("--node-ip") + 1] == "127.0.1.3"
    assert c.address("proxy-node-1") == "127.0.0.1:10256"
    assert c.command(c.components["proxy-node-2"])[1:3] == ["-m", "kubelet.proxy"]
    assert c.command(c.components["proxy-node-2"])[-2:] == ["--node-name", "node-2"]
    no_proxy = build_cluster(
        build_parser().parse_args(["up", "--data-dir", str(tmp_path), "--no-proxy"])
    )
    assert not any(name.startswith("proxy-") for name in no_proxy.components)
    assert no_proxy.address("node-1") == "127.0.0.1:10250"
    assert c.address("scheduler") == "127.0.0.1:10259"


def test_kubeconfig_is_what_kubectl_reads(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "sub" / "kubeconfig", "http://127.0.0.1:8080")
    doc = yaml.safe_load(path.read_text())
    assert doc["current-context"] == "tinykube"
    assert doc["clusters"] == [{"name": "tinykube", "cluster": {"server": "http://127.0.0.1:8080"}}]
    assert doc["contexts"][0]["context"] == {
        "cluster": "tinykube",
        "user": "tinykube",
        "namespace": "default",
    }
    assert path.stat().st_mode & 0o777 == 0o600


def _install(bin_dir: Path, *names: str) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in names:
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)


@pytest.mark.parametrize(
    ("where", "on_path", "expected"),
    [
        # `make up` in a checkout: the venv is not on PATH, so the relative path.
        ("repo", "", ".venv/bin/tinykube"),
        # The venv's bin on PATH (activated): the bare name works.
        ("repo", "venv", "tinykube"),
        # Another tinykube first on PATH would run another checkout's code: ours, by path.
        ("repo", "other", ".venv/bin/tinykube"),
        # `up` run from outside the checkout: the absolute path.
        ("elsewhere", "", "ABS"),
    ],
)
def test_printed_commands_run_as_printed(
    tmp_path: Path, where: str, on_path: str, expected: str
) -> None:
    repo = tmp_path / "repo"
    venv_bin = repo / ".venv" / "bin"
    _install(venv_bin, "tinykube")
    _install(tmp_path / "other", "tinykube")
    (tmp_path / "elsewhere").mkdir()
    path = {"": "/nonexistent", "venv": str(venv_bin), "other": str(tmp_path / "other")}[on_path]
    got = up.tool_command("tinykube", bin_dir=venv_bin, cwd=tmp_path / where, path=path)
    assert got == (str(venv_bin / "tinykube") if expected == "ABS" else expected)
    # A tool the venv lacks is left to PATH.
    assert up.tool_command("nothere", bin_dir=venv_bin, cwd=repo, path=path) == "nothere"


def test_up_suggests_every_tool_by_the_path_that_runs_it(tmp_path: Path) -> None:
    c = cluster(tmp_path, kubelets=[])
    lines = up.try_commands(c, lambda name: f".venv/bin/{name}")
    pki, conf = tmp_path.resolve() / "pki", tmp_path.resolve() / "kubeconfig"
    assert lines == [
        f".venv/bin/tinykube --kubeconfig {conf} get nodes",
        f".venv/bin/grpcurl -cacert {pki}/ca.crt -cert {pki}/admin.crt -key {pki}/admin.key "
        "127.0.0.1:6443 list",
        f".venv/bin/kubectl --kubeconfig {conf} get nodes",
    ]
    plain = cluster(tmp_path, kubelets=[], insecure=True)
    assert up.try_commands(plain, lambda name: f".venv/bin/{name}") == [
        ".venv/bin/tinykube --insecure get nodes",
        ".venv/bin/grpcurl -plaintext 127.0.0.1:6443 list",
        ".venv/bin/kubectl get nodes",
        f".venv/bin/kubectl --kubeconfig {tmp_path.resolve() / 'kubeconfig'} get nodes",
    ]


def test_a_second_cluster_in_the_same_directory_is_refused_before_starting(
    tmp_path: Path,
) -> None:
    first = cluster(tmp_path, kubelets=[])
    first._take_lock()
    try:
        second = cluster(tmp_path, kubelets=[], apiserver_port=7443)
        with pytest.raises(launcher.ClusterRunning) as info:
            second.start()
        assert str(info.value) == (
            f"a tinykube cluster is already running in {tmp_path.resolve()} "
            f"(pid {os.getpid()}, apiserver 127.0.0.1:6443); stop it (Ctrl-C where it runs) "
            "or use another --data-dir"
        )
        assert second.processes == {}
    finally:
        first._release_lock()
    # Released: the next owner takes it and names itself.
    second._take_lock()
    assert first.lock_path.read_text() == f"pid {os.getpid()}, apiserver 127.0.0.1:7443\n"
    second._release_lock()


def test_planned_ports_cover_every_listener(tmp_path: Path) -> None:
    c = cluster(tmp_path, kubelets=["n1"], proxies=True, proxy_port=10256, etcd_endpoint=None)
    c._etcd_port = 2379
    assert c.planned_ports() == [
        ("etcd", "127.0.0.1", 2379),
        ("apiserver", "127.0.0.1", 6443),
        ("apiserver's REST API", "127.0.0.1", 8080),
        ("scheduler", "127.0.0.1", 10259),
        ("controller", "127.0.0.1", 10257),
        ("kubelet-n1", "127.0.0.1", 10250),
        ("proxy-n1", "127.0.0.1", 10256),
    ]


def test_up_components_die_with_it(tmp_path: Path) -> None:
    args = build_parser().parse_args(["up", "--data-dir", str(tmp_path)])
    c = build_cluster(args)
    assert c.die_with_parent
    wrapped = with_parent_death_signal(["etcd", "--name", "x"], parent=42)
    assert wrapped[:4] == [sys.executable, "-I", "-S", "-c"]
    assert "prctl(1, int(signal.SIGTERM)" in wrapped[4]
    assert wrapped[5:] == ["42", "etcd", "--name", "x"]


@pytest.mark.parametrize(
    ("nodes", "cpus", "memory", "expected"),
    [
        (2, 2, 8 * 1024**3, {"cpu": "1", "memory": "4194304Ki"}),
        (3, 2, 3 * 1024**3, {"cpu": "666m", "memory": "1048576Ki"}),
        (1, 4, 1000 * 1024, {"cpu": "4", "memory": "1000Ki"}),
        # Rounded down, but never to nothing.
        (3000, 1, 1024, {"cpu": "1m", "memory": "1Ki"}),
        # Unknown amounts are left to the kubelet's default.
        (2, 0, 0, {}),
    ],
)
def test_each_node_gets_an_equal_share_of_the_machine(
    nodes: int, cpus: int, memory: int, expected: dict[str, str]
) -> None:
    assert up.machine_share(nodes, cpus=cpus, memory_bytes=memory) == expected


def capacity_flag(c: LocalCluster, node: str) -> dict[str, str]:
    cmd = c.command(c.components[f"kubelet-{node}"])
    flag = cmd[len(cmd) - 1 - cmd[::-1].index("--capacity") + 1]
    return dict(item.split("=") for item in flag.split(","))


def test_up_gives_every_kubelet_its_share_unless_told(tmp_path: Path) -> None:
    args = build_parser().parse_args(["up", "--data-dir", str(tmp_path), "--kubelets", "4"])
    share = up.machine_share(4)
    assert capacity_flag(build_cluster(args), "node-1") == share
    assert capacity_flag(build_cluster(args), "node-4") == share
    told = build_parser().parse_args(
        ["up", "--data-dir", str(tmp_path), "--kubelets", "4", "--node-capacity", "cpu=8,pods=5"]
    )
    assert capacity_flag(build_cluster(told), "node-2") == {**share, "cpu": "8", "pods": "5"}


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("cpu", "'cpu' is not RESOURCE=QUANTITY"),
        ("cpu=", "'cpu=' is not RESOURCE=QUANTITY"),
        ("cpu=two", "invalid quantity for cpu: "),
    ],
)
def test_bad_node_capacity_names_the_resource(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, message: str
) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["up", "--node-capacity", flag])
    assert f"argument --node-capacity: {message}" in capsys.readouterr().err


def test_up_ha_plans_three_etcd_members_and_two_apiservers(tmp_path: Path) -> None:
    c = build_cluster(
        build_parser().parse_args(
            ["up", "--data-dir", str(tmp_path), "--ha", "--kubelets", "1", "--no-proxy"]
        )
    )
    assert c.etcd_member_count == 3
    assert c.apiserver_names == ["apiserver", "apiserver-2"]
    assert c.api_address == "127.0.0.1:6443"
    assert c.api_addresses == ["127.0.0.1:6443", "127.0.0.1:6444"]
    assert c.rest_urls == ["https://127.0.0.1:8080", "https://127.0.0.1:8081"]
    etcd = [p for p in c.planned_ports() if p[0].startswith("etcd")]
    assert etcd == [
        ("etcd-0", "127.0.0.1", 2379),
        ("etcd-0 peer", "127.0.0.1", 2380),
        ("etcd-1", "127.0.0.1", 2381),
        ("etcd-1 peer", "127.0.0.1", 2382),
        ("etcd-2", "127.0.0.1", 2383),
        ("etcd-2 peer", "127.0.0.1", 2384),
    ]
    assert ("apiserver-2", "127.0.0.1", 6444) in c.planned_ports()
    second = c.command(c.components["apiserver-2"])
    assert second[second.index("--bind-address") + 1] == "127.0.0.1:6444"
    assert second[second.index("--rest-port") + 1] == "8081"
    # Without --ha: one etcd, one apiserver, as before.
    single = build_cluster(build_parser().parse_args(["up", "--data-dir", str(tmp_path)]))
    assert single.apiserver_names == ["apiserver"] and single.etcd_member_count == 1


def test_the_etcd_socket_is_for_a_single_etcd_the_cluster_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["up", "--data-dir", str(tmp_path), "--etcd-socket"]
    assert build_cluster(build_parser().parse_args(args)).etcd_socket
    assert not build_cluster(build_parser().parse_args(args[:-1])).etcd_socket
    with pytest.raises(ValueError, match="an etcd cluster or an external etcd"):
        LocalCluster(tmp_path, ha=True, etcd_socket=True)
    with pytest.raises(ValueError, match="an etcd cluster or an external etcd"):
        cluster(tmp_path, etcd_socket=True)
    assert main([*args, "--ha"]) == 2
    assert "--etcd-socket is for a single etcd" in capsys.readouterr().err


def test_crash_loop_backoff_is_the_kubelets() -> None:
    """10 s doubling to 300 s, back to 10 s once the component ran 10 minutes."""
    loop = launcher.CrashLoop(launcher.RestartBackoff(), started_at=0.0)
    delays = []
    now = 0.0
    for _ in range(7):
        now += 1.0  # it dies a second after each start
        delay = loop.exited(now)
        delays.append(delay)
        now += delay
        loop.started_at = now
    assert delays == [10, 20, 40, 80, 160, 300, 300]
    # Ten minutes of running since its last start: the back-off starts over.
    assert loop.exited(now + 600) == 10
    loop.started_at = now + 610
    assert loop.exited(now + 611) == 20


def test_exits_and_restarts_say_the_code_the_delay_and_the_log(tmp_path: Path) -> None:
    log_file = tmp_path / "scheduler.log"
    killed = launcher.Exited("scheduler", -9, log_file, 10.0, 0)
    assert killed.describe() == (
        f"scheduler exited with code -9 (SIGKILL); restarting it in 10s; see {log_file}"
    )
    unsupervised = launcher.Exited("scheduler", 1, log_file, None, 2)
    assert unsupervised.describe() == f"scheduler exited with code 1; see {log_file}"
    again = launcher.Restarted("scheduler", 4242, 1, log_file)
    assert again.describe() == "scheduler restarted (pid 4242, restart 1)"


class OnePass(threading.Event):
    """A stop event that lets a watch loop run exactly once, without waiting."""

    def __init__(self) -> None:
        super().__init__()
        self.passes = 0

    def wait(self, timeout: float | None = None) -> bool:
        self.passes += 1
        return self.passes > 1


def test_up_reports_exits_and_restarts(tmp_path: Path) -> None:
    c = cluster(tmp_path, kubelets=[])
    log_file = tmp_path / "logs" / "scheduler.log"
    c.events.append(launcher.Exited("scheduler", 1, log_file, 10.0, 0))
    c.events.append(launcher.Restarted("scheduler", 4242, 1, log_file))
    err = io.StringIO()
    up.watch_components(c, OnePass(), Context(server="", err=err))
    assert err.getvalue().splitlines() == [
        f"warning: scheduler exited with code 1; restarting it in 10s; see {log_file}",
        "scheduler restarted (pid 4242, restart 1)",
    ]


def test_up_supervises_unless_told_not_to(tmp_path: Path) -> None:
    parser = build_parser()
    base = ["up", "--data-dir", str(tmp_path), "--kubelets", "0"]
    assert build_cluster(parser.parse_args(base)).supervise
    assert not build_cluster(parser.parse_args([*base, "--no-restart"])).supervise
