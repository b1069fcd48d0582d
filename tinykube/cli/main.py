"""Entry point of the `tinykube` console script: parse flags, find subcommands, run one.

Subcommand modules are discovered in the `tinykube.cli` package (see its docstring), so adding
a verb is adding a module. Async subcommands run under `asyncio.run`; one invocation is one
event loop. Errors become kubectl-style messages on stderr and exit code 1.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import pkgutil
import sys
from collections.abc import Sequence
from typing import Any, TextIO

import tinykube.cli
from tinykube import errors
from tinykube.cli.common import CLIError, Context, default_server, describe_error
from tinykube.manifest import ManifestError

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
        help="apiserver address host:port (default: $TINYKUBE_SERVER or 127.0.0.1:6443)",
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
        """Every subcommand parser also accepts the global flags."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
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


def make_context(args: argparse.Namespace, out: TextIO, err: TextIO) -> Context:
    return Context(
        server=args.server or default_server(),
        namespace=args.namespace or "default",
        namespace_explicit=args.namespace is not None,
        all_namespaces=bool(args.all_namespaces),
        request_timeout=float(args.request_timeout),
        out=out,
        err=err,
    )


def main(
    argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Run one CLI invocation; returns the exit code (the console script exits with it)."""
    out = out or sys.stdout
    err = err or sys.stderr
    parser = build_parser()
    args = parse(parser, argv)
    ctx = make_context(args, out, err)
    try:
        result = args.func(args, ctx)
        if inspect.isawaitable(result):
            result = asyncio.run(_awaited(result))
        return int(result or 0)
    except (errors.TinykubeError, CLIError, ManifestError, OSError) as exc:
        ctx.eprint(describe_error(exc, ctx.server))
        return 1
    except KeyboardInterrupt:
        return 130


async def _awaited(result: Any) -> Any:
    return await result


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
