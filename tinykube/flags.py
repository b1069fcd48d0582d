"""Command-line flag helpers shared by every process's `__main__`/settings module."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Sequence

_DURATION = re.compile(r"^(?P<num>\d+(?:\.\d+)?)(?P<unit>ms|s|m|h)?$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(text: str) -> float:
    """Seconds from "40s", "1m", "500ms" or a bare number of seconds (Kubernetes flag style)."""
    match = _DURATION.match(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r} (use e.g. 40s, 1m, 500ms)")
    return float(match["num"]) * _UNITS[match["unit"]]


def listen_address(bind_address: str, port: int) -> str:
    """`--bind-address` may carry a port ("0.0.0.0:10250") or not ("0.0.0.0" + `--port`)."""
    if bind_address.count(":") == 1 or bind_address.startswith("["):
        return bind_address
    return f"{bind_address}:{port}"


def split_addresses(value: str | Sequence[str]) -> tuple[str, ...]:
    """Every address of a list flag or field: "a:1,b:2", ["a:1", "b:2"] or ["a:1,b:2"] give
    ("a:1", "b:2"), in order, blanks and repeats dropped (kube's --etcd-servers style)."""
    parts = [value] if isinstance(value, str) else list(value)
    found: dict[str, None] = {}
    for part in parts:
        for address in str(part).split(","):
            if address.strip():
                found.setdefault(address.strip(), None)
    return tuple(found)


APISERVER_HELP = (
    "apiserver gRPC address host:port, overriding the kubeconfig's; several apiservers as a "
    "comma-separated list or a repeated flag, failed over between (default: the kubeconfig's, "
    "else 127.0.0.1:6443; env TINYKUBE_APISERVER)"
)


def add_apiserver_flag(parser: argparse.ArgumentParser, env: str) -> None:
    """`--apiserver`, repeatable and comma-separated; `apiserver_flag` reads it back."""
    parser.add_argument(
        "--apiserver",
        action="append",
        default=[],
        metavar="HOST:PORT[,HOST:PORT...]",
        help=APISERVER_HELP,
    )
    parser.set_defaults(apiserver_env=env)


def apiserver_flag(args: argparse.Namespace) -> str:
    """Every address `--apiserver` gave ("a:1,b:2"), else its environment variable's, else ""."""
    given: list[str] = getattr(args, "apiserver", None) or []
    if not given:
        given = [os.environ.get(getattr(args, "apiserver_env", ""), "")]
    return ",".join(split_addresses(given))
