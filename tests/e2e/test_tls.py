"""A TLS cluster from the outside: its kubeconfigs, a plaintext client refused in one clear line,
a component refusing to start without credentials, and the `--insecure` development mode."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.e2e.conftest import READY_LINE, UpCluster, tinykube_command, venv_bin
from tests.e2e.waiting import eventually
from tinykube.client import Client
from tinykube.kubeconfig import load
from tinykube.launcher import LocalCluster
from tinykube.tls import INSECURE_WARNING, PLAINTEXT, Credentials, TransportSecurityError

pytestmark = pytest.mark.e2e


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*tinykube_command(), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def test_up_writes_a_kubeconfig_per_component_as_kubeadm(tinykube_up: UpCluster) -> None:
    data = tinykube_up.data_dir
    for name, user in (
        ("kubeconfig", "kubernetes-admin"),
        ("scheduler.conf", "system:kube-scheduler"),
        ("controller-manager.conf", "system:kube-controller-manager"),
        ("proxy.conf", "system:kube-proxy"),
        ("kubelet-node-1.conf", "system:node:node-1"),
    ):
        path = data / name
        assert path.stat().st_mode & 0o777 == 0o600, name
        doc = yaml.safe_load(path.read_text())
        assert doc["users"][0]["name"] == user, name
        assert set(doc["users"][0]["user"]) == {"client-certificate-data", "client-key-data"}
        cluster = doc["clusters"][0]["cluster"]
        assert cluster["server"] == tinykube_up.rest_url and cluster["server"].startswith("https")
        assert "certificate-authority-data" in cluster


def test_kubectl_and_the_cli_use_the_kubeconfig(tinykube_up: UpCluster) -> None:
    got = tinykube_up.kubectl("get", "nodes", "-o", "name")
    assert got.code == 0 and "node/node-1" in got.out.split(), got.err
    # the CLI with only the kubeconfig (its gRPC address is in the kubeconfig's extension)
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "TINYKUBE_SERVER")}
    done = subprocess.run(
        [*tinykube_command(), "--kubeconfig", str(tinykube_up.kubeconfig), "get", "nodes"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0 and "node-1" in done.stdout, done.stderr


def test_a_plaintext_client_is_refused_with_one_clear_line(tinykube_up: UpCluster) -> None:
    done = _run("--insecure", "--server", tinykube_up.api, "get", "nodes")
    assert done.returncode == 1
    assert done.stderr == (
        f"Unable to connect to the server: the server at {tinykube_up.api} requires TLS, and "
        "this client connects in plaintext (--insecure): use the cluster's kubeconfig "
        "(--kubeconfig or $KUBECONFIG)\n"
    )
    # kubectl over plain HTTP against the TLS REST port gets Go's 400 (Client sent an HTTP
    # request to an HTTPS server) and says what it says against kube-apiserver
    plain = tinykube_up.rest_url.replace("https://", "http://")
    got = subprocess.run(
        [str(venv_bin() / "kubectl"), "--server", plain, "--kubeconfig", "/dev/null", "get", "ns"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert got.returncode != 0
    assert "the server rejected our request for an unknown reason" in got.stderr, got.stderr


def test_a_component_without_credentials_refuses_to_start(tinykube_up: UpCluster) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "scheduler", "--apiserver", tinykube_up.api, "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "TINYKUBE_KUBECONFIG"},
    )
    assert done.returncode != 0
    assert (
        "scheduler: error: --kubeconfig and --tls-cert-file and --tls-private-key-file required"
        in done.stderr
    ), done.stderr


def test_insecure_cluster_works_and_warns(tmp_path: Path) -> None:
    cluster = LocalCluster(
        tmp_path, kubelets=["n1"], kubelet_runtime="fake", proxies=True, insecure=True
    )
    with cluster:
        for name in ("apiserver", "scheduler", "controller", "kubelet-n1", "proxy-n1"):
            assert INSECURE_WARNING in cluster.log_path(name).read_text(), name
        assert not (tmp_path / "pki").exists()
        assert cluster.rest_url.startswith("http://")

        async def talk() -> None:
            async with Client(cluster.api_address, credentials=PLAINTEXT) as client:
                assert [n.metadata.name for n in (await client.nodes.list()).items] == ["n1"]
            # a TLS client against the plaintext port is told so, not retried
            admin = _session_admin()
            async with Client(cluster.api_address, credentials=admin, retries=0) as client:
                with pytest.raises(TransportSecurityError, match="does not speak TLS"):
                    await client.nodes.list()

        asyncio.run(talk())
        done = _run("--insecure", "--server", cluster.api_address, "get", "nodes")
        assert done.returncode == 0 and "n1" in done.stdout, done.stderr
        got = subprocess.run(
            [str(venv_bin() / "kubectl"), "--kubeconfig", str(cluster.kubeconfig), "get", "nodes"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert got.returncode == 0 and "n1" in got.stdout, got.stderr


def _session_admin() -> Credentials:
    """$KUBECONFIG's credentials: the session's admin (tests/e2e/conftest.py)."""
    return load().credentials


def test_up_insecure_warns(tmp_path: Path) -> None:
    args = ["up", "--free-ports", "--data-dir", str(tmp_path), "--insecure", "--kubelets", "1"]
    process = subprocess.Popen(
        [*tinykube_command(), *args, "--kubelet-runtime", "fake", "--no-proxy"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    assert process.stdout is not None
    output = []
    try:
        for line in process.stdout:
            output.append(line)
            if line.rstrip("\n") == READY_LINE:
                break
        else:
            pytest.fail(f"tinykube up exited with {process.wait()}:\n{''.join(output)}")
        api = json.loads((tmp_path / "endpoints.json").read_text())["apiserver"]
        done = _run("--insecure", "--server", api, "get", "nodes")
        assert done.returncode == 0 and "node-1" in done.stdout, done.stderr
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=60)
    assert f"warning: {INSECURE_WARNING}\n" in output
    assert any("grpcurl -plaintext" in line for line in output)


def test_kubectl_cannot_bind_cluster_admin_as_a_namespace_admin(tinykube_up: UpCluster) -> None:
    """RBAC's escalation check through the real kubectl: a namespace admin (the admin acting as
    `nadia` with --as) may bind what they hold, and is refused cluster-admin with kube's
    message."""
    up = tinykube_up
    for args in (
        ("create", "namespace", "rbac-e2e"),
        ("create", "rolebinding", "nadia-admin", "--clusterrole=admin", "--user=nadia"),
    ):
        done = up.kubectl(*args, *(("-n", "rbac-e2e") if args[1] == "rolebinding" else ()))
        assert done.code == 0, done.err

    async def nadia_may_bind() -> bool:
        done = up.kubectl(
            "--as", "nadia", "auth", "can-i", "create", "rolebindings", "-n", "rbac-e2e"
        )
        return done.out.strip() == "yes"

    asyncio.run(eventually(nadia_may_bind, 30.0, "nadia's binding to reach the authorizer"))
    as_nadia = ("--as", "nadia", "-n", "rbac-e2e", "create", "rolebinding")
    held = up.kubectl(*as_nadia, "bob-view", "--clusterrole=view", "--user=bob")
    assert held.code == 0, held.err
    refused = up.kubectl(*as_nadia, "bob-root", "--clusterrole=cluster-admin", "--user=bob")
    assert refused.code == 1
    assert refused.err.strip() == (
        'error: failed to create rolebinding: rolebindings.rbac.authorization.k8s.io "bob-root" '
        'is forbidden: user "nadia" (groups=["system:authenticated"]) is attempting to grant '
        "RBAC permissions not currently held:\n"
        '{APIGroups:["*"], Resources:["*"], Verbs:["*"]}\n'
        '{NonResourceURLs:["*"], Verbs:["*"]}'
    )
