"""Entry point of the `tinykube` console script: parse flags, find subcommands, run one.

Subcommand modules are discovered in the `tinykube.cli` package (see its docstring), so adding
a verb is adding a module. Async subcommands run under `asyncio.run`; one invocation is one
event loop. Errors become kubectl-style messages on stderr and exit code 1.

Ctrl-C (SIGINT) cancels the subcommand's task, as asyncio.run does, and the console script then
exits with 130 at once: without waiting for interpreter teardown (gRPC's threads), and, should
the cancelled task not finish (an in-flight call that ignores its cancellation on a busy
machine), by a hard exit INTERRUPT_DEADLINE seconds after the signal. A person pressing Ctrl-C
on `get -w` wants the prompt back, and nothing is left to finish by then.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import inspect
import os
import pkgutil
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any, TextIO

import tinykube.cli
from tinykube import errors
from tinykube.cli.common import (
    DEFAULT_SERVER,
    SERVER_ENV,
    UP_KUBECONFIG,
    CLIError,
    Context,
    describe_error,
)
from tinykube.kubeconfig import load as load_kubeconfig
from tinykube.kubeconfig import paths_from_env
from tinykube.manifest import ManifestError
from tinykube.tls import PLAINTEXT, Credentials, TLSConfigError

# Seconds from SIGINT to a hard exit if the cancelled subcommand has not ended by then.
INTERRUPT_DEADLINE = 0.5
EXIT_INTERRUPTED = 130

# Modules of tinykube.cli that are not subcommands.
_NOT_COMMANDS = frozenset({"main", "common", "printers"})


def _global_flags(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """The flags valid before and after the verb. After it, defaults are suppressed so a
    flag given before the verb is not overwritten by the subparser's default."""

    def default(value: object) -> Any:
        return argparse.SUPPRESS if suppress else value

    parser.add_argument(
        "--server",
        "-s",
        default=default(None),
        help="apiserver address host:port, or several comma-separated (default: "
        "$TINYKUBE_SERVER, the kubeconfig's, else 127.0.0.1:6443)",
    )
    parser.add_argument(
        "--kubeconfig",
        default=default(None),
        help="kubeconfig with the server, CA and credentials (default: $KUBECONFIG, else "
        f"{UP_KUBECONFIG} if it exists; --server overrides its server)",
    )
    parser.add_argument(
        "--insecure",
        action="store_true",
        default=default(False),
        help="plaintext, no credentials: for a cluster started with `tinykube up --insecure`",
    )
    parser.add_argument(
        "-n", "--namespace", default=default(None), help='namespace (default "default")'
    )
    parser.add_argument(
        "-A",
        "--all-namespaces",
        action="store_true",
        default=default(False),
        help="list across all namespaces",
    )
    parser.add_argument(
        "--request-timeout",
        type=float,
        default=default(10.0),
        help="seconds to wait for each request (default 10)",
    )


def command_modules() -> list[str]:
    """Names of the subcommand modules present in the tinykube.cli package."""
    return sorted(
        m.name
        for m in pkgutil.iter_modules(tinykube.cli.__path__)
        if m.name not in _NOT_COMMANDS and not m.name.startswith("_")
    )


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    _global_flags(common, suppress=True)

    class CommandParser(argparse.ArgumentParser):
        """Every subcommand parser also accepts the global flags, unless it is registered with
        `global_flags=False` (`up` talks to no apiserver: --server, -n, -A mean nothing to it)."""

        def __init__(self, *args: Any, global_flags: bool = True, **kwargs: Any) -> None:
            if global_flags:
                kwargs["parents"] = [*kwargs.get("parents", []), common]
            super().__init__(*args, **kwargs)

    parser = argparse.ArgumentParser(
        prog="tinykube",
        description="Talk to a tinykube cluster, or run one locally (tinykube up).",
    )
    _global_flags(parser, suppress=False)
    commands = parser.add_subparsers(
        dest="command", metavar="COMMAND", parser_class=CommandParser, required=True
    )
    for name in command_modules():
        module = importlib.import_module(f"tinykube.cli.{name}")
        register = getattr(module, "register", None)
        if callable(register):
            register(commands)
    return parser


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """parse_args, but names may follow flags, as kubectl allows (`get pods -o yaml web`).

    argparse stops filling a positional list at the first flag; what it leaves over that does
    not look like a flag is more names for a command that takes names.
    """
    args, extra = parser.parse_known_args(argv)
    if extra and hasattr(args, "names") and not any(a.startswith("-") for a in extra):
        if getattr(args, "resource", None) is None:
            args.resource, extra = extra[0], extra[1:]
        args.names = [*args.names, *extra]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def client_config(args: argparse.Namespace) -> tuple[str, Credentials | None, str]:
    """(server, credentials, error) as kubectl resolves them: --kubeconfig, else $KUBECONFIG,
    else `tinykube up`'s; --server (or $TINYKUBE_SERVER) overrides the kubeconfig's server."""
    explicit = args.server or os.environ.get(SERVER_ENV, "")
    if getattr(args, "insecure", False):
        return explicit or DEFAULT_SERVER, PLAINTEXT, ""
    path: str | None = getattr(args, "kubeconfig", None)
    if path is None and not paths_from_env() and os.path.exists(UP_KUBECONFIG):
        path = UP_KUBECONFIG
    if path is None and not paths_from_env():
        return explicit or DEFAULT_SERVER, None, ""
    try:
        config = load_kubeconfig(path)
    except TLSConfigError as exc:
        return explicit or DEFAULT_SERVER, None, str(exc)
    return explicit or config.grpc_server, config.credentials, ""


def make_context(args: argparse.Namespace, out: TextIO, err: TextIO) -> Context:
    server, credentials, problem = client_config(args)
    return Context(
        server=server,
        credentials=credentials,
        config_error=problem,
        namespace=args.namespace or "default",
        namespace_explicit=args.namespace is not None,
        all_namespaces=bool(args.all_namespaces),
        request_timeout=float(args.request_timeout),
        out=out,
        err=err,
    )


def main(
    argv: Sequence[str] | None = None,
    *,
    out: TextIO | None = None,
    err: TextIO | None = None,
    hard_exit_on_interrupt: bool | None = None,
) -> int:
    """Run one CLI invocation; returns the exit code (the console script exits with it).

    With `hard_exit_on_interrupt` (by default when `argv` is None: the invocation is the
    process's own command line, as the console script's), an interrupted command ends the
    process with 130 at once, and a SIGINT whose cancellation has not ended the command within
    INTERRUPT_DEADLINE seconds ends it then."""
    out = out or sys.stdout
    err = err or sys.stderr
    # gRPC core logs every failed TLS handshake; the CLI explains them in one line instead.
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    hard_exit = argv is None if hard_exit_on_interrupt is None else hard_exit_on_interrupt
    parser = build_parser()
    args = parse(parser, argv)
    ctx = make_context(args, out, err)
    is_async = False
    try:
        result = args.func(args, ctx)
        if inspect.isawaitable(result):
            is_async = True
            result = asyncio.run(_awaited(result, hard_exit))
        return int(result or 0)
    except (errors.TinykubeError, CLIError, ManifestError, OSError) as exc:
        ctx.eprint(describe_error(exc, ctx.server))
        return 1
    except KeyboardInterrupt:
        if hard_exit and is_async:
            # Interpreter teardown waits on gRPC's threads, which took seconds on a busy
            # machine; after Ctrl-C nothing is left to finish (a sync command such as `up`
            # may still have atexit work, so it exits normally).
            _exit_now(EXIT_INTERRUPTED)
        return EXIT_INTERRUPTED


async def _awaited(result: Any, hard_exit_on_interrupt: bool) -> Any:
    """Await the subcommand; with `hard_exit_on_interrupt`, asyncio.run's SIGINT handler (it
    cancels this task) is wrapped to arm the hard-exit timer first."""
    previous = signal.getsignal(signal.SIGINT)
    wrapped = hard_exit_on_interrupt and callable(previous)
    if wrapped:
        handler: Callable[[int, FrameType | None], Any] = previous  # type: ignore[assignment]

        def on_interrupt(signum: int, frame: FrameType | None) -> None:
            _arm_hard_exit()
            handler(signum, frame)

        signal.signal(signal.SIGINT, on_interrupt)
    try:
        return await result
    finally:
        if wrapped:
            signal.signal(signal.SIGINT, previous)


_hard_exit_armed = threading.Event()


def _arm_hard_exit() -> None:
    if _hard_exit_armed.is_set():
        return
    _hard_exit_armed.set()
    timer = threading.Timer(INTERRUPT_DEADLINE, _exit_now, (EXIT_INTERRUPTED,))
    timer.daemon = True
    timer.start()


def _exit_now(code: int) -> None:
    """Flush what was printed and end the process without interpreter teardown."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing more to say
            stream.flush()
    os._exit(code)


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
