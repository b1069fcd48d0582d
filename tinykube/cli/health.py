"""`tinykube health ADDRESS`: one grpc.health.v1 probe; exit 0 only when SERVING.

Made for container health checks (docker-compose `healthcheck: tinykube health
127.0.0.1:6443`) and scripts; prints the status (SERVING, NOT_SERVING, or the RPC failure such
as UNAVAILABLE) on stdout.
"""

from __future__ import annotations

import argparse

from tinykube.cli.common import Context
from tinykube.flags import split_addresses
from tinykube.health import status_name


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "health",
        help="probe a component's gRPC health (exit 0 when SERVING)",
        description="Ask a tinykube process's grpc.health.v1 service whether it is SERVING.",
    )
    parser.add_argument(
        "address", nargs="?", help="host:port (default: the --server address, the first of several)"
    )
    parser.add_argument("--service", default="", help='service name (default "": the process)')
    parser.add_argument("--timeout", type=float, default=2.0, help="seconds (default 2)")
    parser.add_argument("-q", "--quiet", action="store_true", help="print nothing")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    address = args.address or next(iter(split_addresses(ctx.server)), ctx.server)
    status = status_name(address, args.service, args.timeout, credentials=ctx.dial_credentials())
    if not args.quiet:
        ctx.print(status)
    return 0 if status == "SERVING" else 1
