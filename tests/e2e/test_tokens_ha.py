"""Two real apiserver processes started by the launcher load the same service account key: a
token one of them mints (`kubectl create token` against it) is accepted by the other, and a
token bound to a pod stops working on both once the pod is gone."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.e2e.conftest import venv_bin
from tests.e2e.waiting import until
from tinykube.launcher import LocalCluster

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cl = LocalCluster(
        tmp_path_factory.mktemp("tokens-ha"),
        apiservers=2,
        scheduler=False,
        kubelets=(),
    )
    cl.start()
    try:
        yield cl
    finally:
        cl.stop()


def kubectl(conf: Path, server: str, *args: str, stdin: str | None = None) -> tuple[int, str, str]:
    done = subprocess.run(
        [str(venv_bin() / "kubectl"), "--kubeconfig", str(conf), "--server", server, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.returncode, done.stdout, done.stderr


def token_conf(cl: LocalCluster, path: Path, token: str) -> Path:
    admin = yaml.safe_load(cl.kubeconfig.read_text())
    admin["users"] = [{"name": admin["users"][0]["name"], "user": {"token": token}}]
    path.write_text(yaml.safe_dump(admin))
    return path


def test_a_token_minted_by_one_apiserver_works_on_the_other(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    first, second = cluster.rest_urls[:2]
    admin = cluster.kubeconfig

    def account_exists() -> bool:
        return kubectl(admin, first, "get", "sa", "default", "-n", "default")[0] == 0

    until(account_exists, "the default service account")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "holder", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    code, _, err = kubectl(admin, first, "create", "-f", "-", stdin=json.dumps(pod))
    assert code == 0, err
    code, out, err = kubectl(
        admin, first, "create", "token", "default",
        "--bound-object-kind", "Pod", "--bound-object-name", "holder",
    )  # fmt: skip
    assert code == 0, err
    conf = token_conf(cluster, tmp_path / "token.conf", out.strip())
    for server in (first, second):
        code, out, err = kubectl(conf, server, "auth", "whoami", "-o", "json")
        assert code == 0, (server, err)
        user = json.loads(out)["status"]["userInfo"]["username"]
        assert user == "system:serviceaccount:default:default"
    ok_delete = kubectl(admin, second, "delete", "pod", "holder", "--grace-period=0", "--force")
    assert ok_delete[0] == 0, ok_delete[2]

    def refused_by_both() -> bool:
        return all(kubectl(conf, server, "auth", "whoami")[0] == 1 for server in (first, second))

    until(refused_by_both, "both apiservers to refuse the token of the deleted pod")
