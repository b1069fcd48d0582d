"""The CLI against an in-memory fake apiserver client: tables, apply/delete, errors, flags.

Pure: `Context.client` is replaced by a fake that keeps objects in dicts, and "now" is pinned,
so AGE columns are exact.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest

from tinykube import errors, kinds
from tinykube.cli import apply, common, logs, printers
from tinykube.cli.main import build_parser, command_modules, main
from tinykube.duration import human_duration
from tinykube.kinds import KindInfo
from tinykube.manifest import load_manifests
from tinykube.v1 import event_pb2, node_pb2, pod_pb2

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def ts(ago: timedelta) -> Any:
    from google.protobuf.timestamp_pb2 import Timestamp

    t = Timestamp()
    t.FromDatetime(NOW - ago)
    return t


class FakeResource:
    """Just enough of ResourceClient: objects by (namespace, name), resourceVersion counter."""

    def __init__(self, info: KindInfo, server: FakeServer) -> None:
        self.info = info
        self.server = server
        self.objects: dict[tuple[str, str], Any] = {}

    def _key(self, name: str, namespace: str) -> tuple[str, str]:
        return (namespace if self.info.namespaced else "", name)

    def _missing(self, name: str) -> errors.NotFoundError:
        return errors.NotFoundError(f'{self.info.plural} "{name}" not found')

    async def get(self, name: str, namespace: str = "") -> Any:
        try:
            obj = self.objects[self._key(name, namespace)]
        except KeyError:
            raise self._missing(name) from None
        copy = type(obj)()
        copy.CopyFrom(obj)
        return copy

    async def list(self, namespace: str = "", **kwargs: Any) -> Any:
        result = self.info.list_message()
        for (ns, _), obj in sorted(self.objects.items()):
            if namespace and ns != namespace:
                continue
            selector = kwargs.get("label_selector", "")
            if selector:
                key, _, value = selector.partition("=")
                if obj.metadata.labels.get(key) != value:
                    continue
            result.items.append(obj)  # type: ignore[attr-defined]
        result.metadata.resourceVersion = str(self.server.revision)  # type: ignore[attr-defined]
        return result

    async def create(self, obj: Any) -> Any:
        key = self._key(obj.metadata.name, obj.metadata.namespace)
        if key in self.objects:
            raise errors.AlreadyExistsError(
                f'{self.info.plural} "{obj.metadata.name}" already exists'
            )
        stored = type(obj)()
        stored.CopyFrom(obj)
        self.server.revision += 1
        stored.metadata.resourceVersion = str(self.server.revision)
        stored.metadata.uid = f"uid-{obj.metadata.name}"
        stored.metadata.creationTimestamp.CopyFrom(ts(timedelta(seconds=5)))
        self.objects[key] = stored
        self.server.calls.append(("create", obj.metadata.name))
        return stored

    async def update(self, obj: Any) -> Any:
        key = self._key(obj.metadata.name, obj.metadata.namespace)
        live = self.objects.get(key)
        if live is None:
            raise self._missing(obj.metadata.name)
        if obj.metadata.resourceVersion != live.metadata.resourceVersion:
            raise errors.ConflictError("the object has been modified")
        stored = type(obj)()
        stored.CopyFrom(obj)
        self.server.revision += 1
        stored.metadata.resourceVersion = str(self.server.revision)
        self.objects[key] = stored
        self.server.calls.append(("update", obj.metadata.name))
        return stored

    async def delete(self, name: str, namespace: str = "", **kwargs: Any) -> Any:
        try:
            obj = self.objects.pop(self._key(name, namespace))
        except KeyError:
            raise self._missing(name) from None
        self.server.calls.append(("delete", name))
        return obj


class FakeServer:
    def __init__(self) -> None:
        self.revision = 100
        self.calls: list[tuple[str, str]] = []
        self.resources = {info.kind: FakeResource(info, self) for info in kinds.ALL_KINDS}

    def resource(self, kind: KindInfo | str) -> FakeResource:
        info = kind if isinstance(kind, KindInfo) else kinds.lookup(kind)
        return self.resources[info.kind]

    @property
    def pods(self) -> FakeResource:
        return self.resources["Pod"]

    @property
    def events(self) -> FakeResource:
        return self.resources["Event"]

    async def __aenter__(self) -> FakeServer:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeServer]:
    fake = FakeServer()
    monkeypatch.setattr(common.Context, "client", lambda self: fake)
    # Pin "now" for AGE columns.
    original = common.Context.__init__

    def init(self: common.Context, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self.now = lambda: NOW

    monkeypatch.setattr(common.Context, "__init__", init)
    yield fake


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def make_pod(name: str, node: str = "", phase: str = "Running", namespace: str = "default") -> Any:
    pod = pod_pb2.Pod(apiVersion="v1", kind="Pod")
    pod.metadata.name = name
    pod.metadata.namespace = namespace
    pod.metadata.creationTimestamp.CopyFrom(ts(timedelta(minutes=3, seconds=20)))
    pod.spec.containers.add(name="c", image="busybox")
    pod.spec.containers.add(name="d", image="busybox")
    pod.spec.nodeName = node
    pod.status.phase = phase
    pod.status.podIP = "10.0.0.7" if node else ""
    cs = pod.status.containerStatuses.add(name="c", ready=True, restartCount=2)
    cs.state.running.startedAt.CopyFrom(ts(timedelta(minutes=1)))
    pod.status.containerStatuses.add(name="d", ready=False, restartCount=1)
    return pod


# ---- printers -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-5, "<invalid>"),
        (0, "0s"),
        (119, "119s"),
        (120, "2m"),
        (200, "3m20s"),
        (600, "10m"),
        (3 * 3600 - 1, "179m"),
        (3 * 3600, "3h"),
        (2 * 3600 + 30 * 60 + 3 * 3600, "5h30m"),
        (20 * 3600, "20h"),
        (3 * 86400 + 4 * 3600, "3d4h"),
        (40 * 86400, "40d"),
        (2 * 365 * 86400 + 30 * 86400, "2y30d"),
        (9 * 365 * 86400, "9y"),
    ],
)
def test_human_duration_matches_kubernetes(seconds: int, text: str) -> None:
    assert human_duration(seconds) == text


def test_pod_status_follows_kubectl() -> None:
    pod = make_pod("p")
    assert printers.pod_status(pod) == "Running"
    pod.status.containerStatuses[1].state.waiting.reason = "CrashLoopBackOff"
    assert printers.pod_status(pod) == "CrashLoopBackOff"
    pod.status.containerStatuses[1].state.ClearField("waiting")
    pod.status.containerStatuses[1].state.terminated.exitCode = 3
    assert printers.pod_status(pod) == "ExitCode:3"
    pod.metadata.deletionTimestamp.CopyFrom(ts(timedelta()))
    assert printers.pod_status(pod) == "Terminating"
    assert printers.pod_status(pod_pb2.Pod()) == "Pending"


def test_a_gated_pods_status_is_scheduling_gated_as_kubectl() -> None:
    pod = pod_pb2.Pod(status=pod_pb2.PodStatus(phase="Pending"))
    pod.status.conditions.add(type="PodScheduled", status="False", reason="Unschedulable")
    assert printers.pod_status(pod) == "Pending"
    pod.status.conditions[0].reason = "SchedulingGated"
    assert printers.pod_status(pod) == "SchedulingGated"


def test_node_status_and_roles() -> None:
    node = node_pb2.Node()
    assert printers.node_status(node) == "Unknown"
    node.status.conditions.add(type="Ready", status="True")
    node.spec.unschedulable = True
    node.metadata.labels["node-role.kubernetes.io/control-plane"] = ""
    assert printers.node_status(node) == "Ready,SchedulingDisabled"
    assert printers.node_roles(node) == "control-plane"
    node.status.conditions[0].status = "Unknown"
    node.spec.unschedulable = False
    assert printers.node_status(node) == "NotReady"


# ---- get ------------------------------------------------------------------------------------


async def _seed(server: FakeServer, *objs: Any) -> None:
    for obj in objs:
        await server.resource(obj.kind).create(obj)


def seed(server: FakeServer, *objs: Any) -> None:
    import asyncio

    asyncio.run(_seed(server, *objs))


def test_get_pods_table_and_wide(server: FakeServer) -> None:
    seed(server, make_pod("web", node="node-1"), make_pod("db"))
    server.pods.objects[("default", "web")].metadata.creationTimestamp.CopyFrom(
        ts(timedelta(minutes=3, seconds=20))
    )
    code, out, _ = run_cli("get", "pods")
    assert code == 0
    assert out.splitlines() == [
        "NAME   READY   STATUS    RESTARTS   AGE",
        "db     1/2     Running   3          5s",
        "web    1/2     Running   3          3m20s",
    ]
    code, out, _ = run_cli("get", "po", "web", "-o", "wide")
    assert out.splitlines()[0].split() == [
        "NAME",
        "READY",
        "STATUS",
        "RESTARTS",
        "AGE",
        "IP",
        "NODE",
        "NOMINATED",
        "NODE",
        # As kubectl against kube: the apiserver's Table has this wide column too.
        "READINESS",
        "GATES",
    ]
    assert out.splitlines()[1].split()[-4:] == ["10.0.0.7", "node-1", "<none>", "<none>"]


def test_get_all_namespaces_adds_namespace_column(server: FakeServer) -> None:
    seed(server, make_pod("a", namespace="x"), make_pod("b", namespace="y"))
    _, out, _ = run_cli("get", "pods", "-A")
    lines = out.splitlines()
    assert lines[0].startswith("NAMESPACE   NAME")
    assert [line.split()[:2] for line in lines[1:]] == [["x", "a"], ["y", "b"]]
    code, _, err = run_cli("get", "pods", "a", "-A")
    assert code == 1
    assert "cannot be retrieved by name across all namespaces" in err


def test_get_empty_and_not_found(server: FakeServer) -> None:
    code, out, err = run_cli("get", "pods", "-n", "prod")
    assert (code, out) == (0, "")
    assert err == "No resources found in prod namespace.\n"
    code, out, err = run_cli("get", "nodes")
    assert err == "No resources found\n"
    code, out, err = run_cli("get", "pod", "nope")
    assert code == 1
    assert err == 'Error from server (NotFound): pods "nope" not found\n'


def test_get_yaml_json_name(server: FakeServer) -> None:
    seed(server, make_pod("web"))
    _, out, _ = run_cli("get", "pod", "web", "-o", "yaml")
    # Keys sorted, zero fields Kubernetes always prints included: what kubectl prints.
    assert out.startswith("apiVersion: v1\nkind: Pod\nmetadata:\n  creationTimestamp: ")
    assert "\n  name: web\n  namespace: default\n" in out
    assert "\n    lastState: {}\n" in out and "\n    resources: {}\n" in out
    _, out, _ = run_cli("get", "pods", "-o", "json")
    assert '"kind": "List"' in out
    assert '"resourceVersion": "101"' in out
    _, out, _ = run_cli("get", "pods", "-o", "name")
    assert out == "pod/web\n"


def test_get_label_selector_is_passed_to_the_server(server: FakeServer) -> None:
    a, b = make_pod("a"), make_pod("b")
    a.metadata.labels["app"] = "web"
    seed(server, a, b)
    _, out, _ = run_cli("get", "pods", "-l", "app=web", "-o", "name")
    assert out == "pod/a\n"


def test_get_events_sorted_by_last_seen(server: FakeServer) -> None:
    for name, minutes in (("e1", 1), ("e2", 5)):
        event = event_pb2.Event(apiVersion="v1", kind="Event", reason="Scheduled", type="Normal")
        event.metadata.name = name
        event.metadata.namespace = "default"
        event.involvedObject.kind = "Pod"
        event.involvedObject.name = "web"
        event.message = f"message {name}"
        event.lastTimestamp.CopyFrom(ts(timedelta(minutes=minutes)))
        seed(server, event)
    _, out, _ = run_cli("get", "events")
    lines = out.splitlines()
    assert lines[0].split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert lines[1].split() == ["5m", "Normal", "Scheduled", "pod/web", "message", "e2"]
    assert lines[2].split()[0] == "60s"


# ---- apply / delete -------------------------------------------------------------------------

POD_YAML = """\
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {app: web}
spec:
  containers:
  - name: c
    image: nginx
---
apiVersion: v1
kind: Node
metadata: {name: n1, namespace: ignored}
"""


def test_apply_creates_then_is_unchanged_then_configures(
    server: FakeServer, tmp_path: Path
) -> None:
    manifest = tmp_path / "m.yaml"
    manifest.write_text(POD_YAML)
    code, out, _ = run_cli("apply", "-f", str(manifest))
    assert (code, out) == (0, "pod/web created\nnode/n1 created\n")
    assert ("", "n1") in server.resources["Node"].objects

    # Fields the server set (nodeName by the scheduler) survive a re-apply.
    server.pods.objects[("default", "web")].spec.nodeName = "node-1"
    code, out, _ = run_cli("apply", "-f", str(manifest))
    assert out == "pod/web unchanged\nnode/n1 unchanged\n"
    assert [c for c in server.calls if c[0] == "update"] == []

    manifest.write_text(POD_YAML.replace("image: nginx", "image: nginx:2"))
    code, out, _ = run_cli("apply", "-f", str(manifest))
    assert out.splitlines()[0] == "pod/web configured"
    live = server.pods.objects[("default", "web")]
    assert live.spec.containers[0].image == "nginx:2"
    assert live.spec.nodeName == "node-1"
    assert live.metadata.uid == "uid-web"


def test_apply_namespace_mismatch_is_an_error(server: FakeServer, tmp_path: Path) -> None:
    manifest = tmp_path / "m.yaml"
    manifest.write_text(POD_YAML.replace("name: web\n", "name: web\n  namespace: a\n"))
    code, _, err = run_cli("apply", "-n", "b", "-f", str(manifest))
    assert code == 1
    assert 'the namespace from the provided object "a" does not match the namespace "b"' in err
    assert server.calls == []


def test_apply_bad_manifest_names_document_and_field(server: FakeServer, tmp_path: Path) -> None:
    manifest = tmp_path / "m.yaml"
    manifest.write_text(POD_YAML.replace("image: nginx", "imag: nginx"))
    code, _, err = run_cli("apply", "-f", str(manifest))
    assert code == 1
    assert err.startswith("error: error in document 1 of ")
    assert 'unknown field "spec.containers[0].imag"' in err


async def test_apply_retries_on_conflict() -> None:
    server = FakeServer()
    resource = server.resource("pods")
    item = load_manifests(POD_YAML)[0]
    await resource.create(item.obj)
    real_get = resource.get
    gets = 0

    async def racing_get(name: str, namespace: str = "") -> Any:
        # Another writer bumps the object right after our first read.
        nonlocal gets
        gets += 1
        live = await real_get(name, namespace)
        if gets == 1:
            server.revision += 1
            resource.objects[("", "web")].metadata.resourceVersion = str(server.revision)
        return live

    resource.get = racing_get  # type: ignore[method-assign]
    item.obj.spec.containers[0].image = "nginx:3"  # type: ignore[attr-defined]
    assert await apply.apply_object(resource, item) == "configured"
    assert gets == 2


def test_merge_rules() -> None:
    live = {
        "spec": {
            "nodeName": "n1",
            "containers": [{"name": "a", "image": "x", "imagePullPolicy": "Always"}],
            "tolerations": [{"key": "k"}],
        },
        "metadata": {"labels": {"a": "1", "b": "2"}},
    }
    want = {
        "spec": {"containers": [{"name": "a", "image": "y"}], "tolerations": [{"key": "z"}]},
        "metadata": {"labels": {"b": "3"}},
    }
    assert apply.merge(live, want) == {
        "spec": {
            "nodeName": "n1",
            "containers": [{"name": "a", "image": "y", "imagePullPolicy": "Always"}],
            "tolerations": [{"key": "z"}],
        },
        "metadata": {"labels": {"a": "1", "b": "3"}},
    }


def test_delete_by_name_and_by_file(server: FakeServer, tmp_path: Path) -> None:
    manifest = tmp_path / "m.yaml"
    manifest.write_text(POD_YAML)
    run_cli("apply", "-f", str(manifest))
    code, out, _ = run_cli("delete", "pod", "web")
    assert (code, out) == (0, 'pod "web" deleted\n')
    code, _, err = run_cli("delete", "pod", "web")
    assert code == 1
    assert err == 'Error from server (NotFound): pods "web" not found\n'
    code, out, _ = run_cli("delete", "pod", "web", "--ignore-not-found")
    assert (code, out) == (0, "")
    code, out, _ = run_cli("delete", "-f", str(manifest), "--ignore-not-found")
    assert out == 'node "n1" deleted\n'
    code, _, err = run_cli("delete", "pod")
    assert code == 1
    assert "no name was specified" in err


def test_delete_goes_on_past_missing_objects_and_reports_each(
    server: FakeServer, tmp_path: Path
) -> None:
    seed(server, make_pod("a"), make_pod("c"))
    manifest = tmp_path / "m.yaml"
    manifest.write_text(
        "".join(
            f"---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {n}}}\n"
            "spec: {containers: [{name: c, image: x}]}\n"
            for n in ("a", "b", "c", "d")
        )
    )
    code, out, err = run_cli("delete", "-f", str(manifest))
    assert (code, out) == (1, 'pod "a" deleted\npod "c" deleted\n')
    assert err == (
        'Error from server (NotFound): pods "b" not found\n'
        'Error from server (NotFound): pods "d" not found\n'
    )
    seed(server, make_pod("e"))
    code, out, err = run_cli("delete", "pod", "x", "e")
    assert (code, out, err) == (
        1,
        'pod "e" deleted\n',
        'Error from server (NotFound): pods "x" not found\n',
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["get", "pod/web", "-o", "name"],
        ["get", "pods", "-o", "name", "web"],  # a name after flags
        ["get", "-o", "name", "pod/web"],
        ["get", "po/web", "po/db", "-o", "name"],
        ["get", "pods", "web", "-o", "name", "db"],
    ],
)
def test_get_takes_kubectls_argument_forms(server: FakeServer, argv: list[str]) -> None:
    seed(server, make_pod("web"), make_pod("db"))
    code, out, err = run_cli(*argv)
    assert (code, err) == (0, "")
    names = [a.rpartition("/")[2] for a in argv[1:] if a not in ("-o", "name", "pods")]
    assert out == "".join(f"pod/{n}\n" for n in names)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["get", "pods", "pod/web"], "there is no need to specify a resource type as a separate"),
        (["get", "pod/web", "db"], "arguments in resource/name form must have a single resource"),
        (["get", "pod/"], "arguments in resource/name form must have a single resource"),
        (["get", "pod/web", "node/n1"], "of more than one kind (pods, nodes) are not supported"),
        (["delete", "pods", "pod/web"], "(e.g. 'tinykube delete resource/<resource_name>'"),
        (["get", "pods", "--nope", "web"], "unrecognized arguments: --nope"),
    ],
)
def test_bad_argument_forms_are_refused_clearly(
    server: FakeServer, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    try:
        code, _, err = run_cli(*argv)
    except SystemExit as exc:  # argparse's own errors
        code, err = int(exc.code or 0), capsys.readouterr().err
    assert code != 0
    assert message in err


def test_describe_and_delete_take_type_slash_name(server: FakeServer) -> None:
    seed(server, make_pod("web"))
    code, out, _ = run_cli("describe", "pod/web")
    assert code == 0 and out.startswith("Name:")
    assert "web" in out.splitlines()[0]
    assert run_cli("delete", "pod/web") == (0, 'pod "web" deleted\n', "")


@pytest.mark.parametrize(
    ("arg", "expected"),
    [("web", "web"), ("pod/web", "web"), ("pods/web", "web"), ("po/web", "web")],
)
def test_logs_takes_a_pod_or_pod_slash_name(arg: str, expected: str) -> None:
    assert logs.pod_name(arg) == expected


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("node/n1", "cannot get logs of a node: tinykube logs takes pod/NAME"),
        ("pod/", "arguments in resource/name form must have a single resource and name"),
        ("nosuch/x", "nosuch"),
    ],
)
def test_logs_refuses_other_kinds(arg: str, message: str) -> None:
    with pytest.raises(common.CLIError, match=re.escape(message)):
        logs.pod_name(arg)


# ---- describe -------------------------------------------------------------------------------


def test_describe_pod_shows_conditions_and_its_events(server: FakeServer) -> None:
    pod = make_pod("web", node="node-1")
    pod.spec.containers[0].resources.requests["cpu"] = "100m"
    pod.status.conditions.add(type="PodScheduled", status="True")
    pod.spec.tolerations.add(key="k", operator="Exists", effect="NoSchedule")
    other = event_pb2.Event(apiVersion="v1", kind="Event", reason="Other")
    other.metadata.name = "x"
    other.metadata.namespace = "default"
    other.involvedObject.kind = "Pod"
    other.involvedObject.name = "db"
    mine = event_pb2.Event(apiVersion="v1", kind="Event", reason="Scheduled", type="Normal")
    mine.metadata.name = "y"
    mine.metadata.namespace = "default"
    mine.involvedObject.kind = "Pod"
    mine.involvedObject.name = "web"
    mine.source.component = "tinykube-scheduler"
    mine.message = "Successfully assigned default/web to node-1"
    mine.lastTimestamp.CopyFrom(ts(timedelta(seconds=30)))
    seed(server, pod, other, mine)
    code, out, _ = run_cli("describe", "pod", "web")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "Name:             web"
    assert "Node:             node-1" in lines
    assert "      cpu:      100m" in lines
    assert "    Restart Count:    2" in lines
    assert "Tolerations:     k:NoSchedule op=Exists" in lines
    conditions = lines.index("Conditions:")
    assert lines[conditions + 1].split() == ["Type", "Status"]
    assert lines[conditions + 3].split() == ["PodScheduled", "True"]
    events = lines.index("Events:")
    assert lines[events + 3].split() == [
        "Normal",
        "Scheduled",
        "30s",
        "tinykube-scheduler",
        "Successfully",
        "assigned",
        "default/web",
        "to",
        "node-1",
    ]
    assert "Other" not in out


# ---- plumbing -------------------------------------------------------------------------------


def test_global_flags_before_or_after_the_verb(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(common.SERVER_ENV, "env:1")
    parser = build_parser()
    before = parser.parse_args(["-n", "a", "--server", "s:1", "get", "pods"])
    after = parser.parse_args(["get", "pods", "-n", "b", "-A"])
    assert (before.namespace, before.server, before.all_namespaces) == ("a", "s:1", False)
    assert (after.namespace, after.server, after.all_namespaces) == ("b", None, True)
    assert common.default_server() == "env:1"


def test_subcommands_are_discovered_from_modules() -> None:
    found = set(command_modules())
    assert {"get", "apply", "delete", "describe", "health", "up"} <= found
    assert not found & {"main", "common", "printers"}


@pytest.mark.parametrize(
    ("exc", "line"),
    [
        (
            errors.NotFoundError('pods "x" not found'),
            'Error from server (NotFound): pods "x" not found',
        ),
        (
            errors.ConflictError("the object has been modified"),
            "Error from server (Conflict): the object has been modified",
        ),
        (
            errors.InvalidError('Pod "x" is invalid: a'),
            'Error from server (Invalid): Pod "x" is invalid: a',
        ),
        (
            errors.UnavailableError("failed to connect to all addresses"),
            "The connection to the server h:1 was refused - "
            "did you specify the right host or port?",
        ),
        (
            errors.UnavailableError("etcd is unavailable"),
            "Error from server (ServiceUnavailable): etcd is unavailable",
        ),
        (
            errors.UnavailableError(
                "errors resolving h:1: [field:hostname lookup error:address lookup failed "
                "for h:1: Domain name not found]"
            ),
            "Unable to connect to the server: lookup h: no such host",
        ),
        (
            errors.UnavailableError("DNS resolution failed for h:1: C-ares status is not ARES"),
            "Unable to connect to the server: lookup h: no such host",
        ),
        (
            errors.UnauthenticatedError("Unauthorized"),
            "error: You must be logged in to the server (Unauthorized)",
        ),
        (common.CLIError("bad flag"), "error: bad flag"),
    ],
)
def test_errors_print_like_kubectl(exc: Exception, line: str) -> None:
    assert common.describe_error(exc, "h:1") == line


def test_describe_replicaset_counts_its_pods_and_describe_all(server: FakeServer) -> None:
    from tinykube.v1 import replicaset_pb2

    rs = replicaset_pb2.ReplicaSet(apiVersion="v1", kind="ReplicaSet")
    rs.metadata.name = "web"
    rs.metadata.namespace = "default"
    rs.spec.replicas = 3
    rs.spec.selector.matchLabels["app"] = "web"
    rs.spec.template.metadata.labels["app"] = "web"
    rs.spec.template.spec.containers.add(name="c", image="nginx")
    rs.status.replicas = 2
    seed(server, rs)
    uid = server.resources["ReplicaSet"].objects[("default", "web")].metadata.uid
    running, pending, orphan = make_pod("web-1"), make_pod("web-2", phase="Pending"), make_pod("x")
    for pod in (running, pending):
        pod.metadata.ownerReferences.add(kind="ReplicaSet", name="web", uid=uid, controller=True)
    seed(server, running, pending, orphan)
    code, out, _ = run_cli("describe", "rs", "web")
    assert code == 0
    lines = out.splitlines()
    assert "Selector:         app=web" in lines
    assert "Replicas:         2 current / 3 desired" in lines
    assert "Pods Status:      1 Running / 1 Waiting / 0 Succeeded / 0 Failed" in lines

    _, out, _ = run_cli("describe", "pods")
    names = [line.split()[1] for line in out.splitlines() if line.startswith("Name:")]
    assert names == ["web-1", "web-2", "x"]
    _, out, _ = run_cli("describe", "pod", "web-1")
    assert "Controlled By:    ReplicaSet/web" in out.splitlines()


def test_apply_missing_file(server: FakeServer, tmp_path: Path) -> None:
    code, _, err = run_cli("apply", "-f", str(tmp_path / "nope.yaml"))
    assert code == 1
    assert err == f'error: the path "{tmp_path / "nope.yaml"}" does not exist\n'


@pytest.mark.parametrize(
    ("server", "message"),
    [
        (
            "bad host:6443",
            'invalid server address "bad host:6443": the host is empty or has spaces',
        ),
        ("h:x", 'invalid server address "h:x": port "x" is not 1-65535'),
        ("h:99999", 'invalid server address "h:99999": port "99999" is not 1-65535'),
        (":6443", 'invalid server address ":6443": the host is empty or has spaces'),
        ("localhost", 'invalid server address "localhost": expected host:port or [ipv6]:port'),
        ("::1", 'invalid server address "::1": expected host:port or [ipv6]:port'),
        (
            "2001:db8::1:2",
            'invalid server address "2001:db8::1:2": expected host:port or [ipv6]:port',
        ),
        # several apiservers: each is checked, the bad one named
        ("h:1,h:x", 'invalid server address "h:x": port "x" is not 1-65535'),
        (",", 'invalid server address ",": expected host:port or [ipv6]:port'),
    ],
)
def test_a_malformed_server_address_is_refused_before_dialling(server: str, message: str) -> None:
    out, err = io.StringIO(), io.StringIO()
    assert main(["--server", server, "get", "pods"], out=out, err=err) == 1
    assert err.getvalue() == f"error: {message}\n"


@pytest.mark.parametrize(
    "server",
    ["127.0.0.1:6443", "[::1]:6443", "h.example:1", "dns:///h:1", "127.0.0.1:1,[::1]:2,h:3"],
)
def test_well_formed_server_addresses_pass(server: str) -> None:
    common.check_server(server)


def test_describe_pod_shows_topology_spread_constraints_as_kubectl(server: FakeServer) -> None:
    pod = make_pod("web")
    pod.spec.tolerations.add(key="k", operator="Exists", effect="NoSchedule")
    zone = pod.spec.topologySpreadConstraints.add(
        maxSkew=1, topologyKey="zone", whenUnsatisfiable="DoNotSchedule"
    )
    zone.labelSelector.matchLabels["app"] = "web"
    zone.labelSelector.matchExpressions.add(key="pod-template-hash", operator="In", values=["7"])
    zone.labelSelector.matchExpressions.add(key="canary", operator="DoesNotExist")
    pod.spec.topologySpreadConstraints.add(
        maxSkew=3, topologyKey="kubernetes.io/hostname", whenUnsatisfiable="ScheduleAnyway"
    )
    seed(server, pod)
    code, out, _ = run_cli("describe", "pod", "web")
    assert code == 0
    lines = out.splitlines()
    # Sorted by topologyKey; the block aligns to its longest key, as kubectl's tabwriter does.
    at = lines.index(
        "Topology Spread Constraints:  kubernetes.io/hostname:ScheduleAnyway when max "
        "skew 3 is exceeded"
    )
    assert lines[at + 1] == (
        " " * 30 + "zone:DoNotSchedule when max skew 1 is exceeded for selector "
        "app=web,!canary,pod-template-hash in (7)"
    )
    assert "Tolerations:                  k:NoSchedule op=Exists" in lines
    assert "Node-Selectors:               <none>" in lines


def test_get_and_describe_pdb_as_kubectl(server: FakeServer) -> None:
    from tinykube.v1 import poddisruptionbudget_pb2 as pdb_pb2

    pdb = pdb_pb2.PodDisruptionBudget(apiVersion="policy/v1", kind="PodDisruptionBudget")
    pdb.metadata.name, pdb.metadata.namespace = "web", "default"
    pdb.spec.maxUnavailable.string_value = "25%"
    pdb.spec.selector.matchLabels["app"] = "web"
    pdb.status.disruptionsAllowed = 1
    pdb.status.currentHealthy, pdb.status.desiredHealthy, pdb.status.expectedPods = 4, 3, 4
    seed(server, pdb)
    code, out, _ = run_cli("get", "pdb")
    assert code == 0
    assert out.splitlines() == [
        "NAME   MIN AVAILABLE   MAX UNAVAILABLE   ALLOWED DISRUPTIONS   AGE",
        "web    N/A             25%               1                     5s",
    ]
    code, out, _ = run_cli("describe", "pdb", "web")
    assert code == 0
    assert out.splitlines()[:9] == [
        "Name:             web",
        "Namespace:        default",
        "Max unavailable:  25%",
        "Selector:         app=web",
        "Status:",
        "    Allowed disruptions:  1",
        "    Current:              4",
        "    Desired:              3",
        "    Total:                4",
    ]
