"""`tinykube create -f FILE|-` and `tinykube create namespace NAME`: create objects, as kubectl.

Unlike `apply`, an object that exists already is an error (AlreadyExists), reported after the
others are created, as kubectl does; the exit code is 1 then. Prints `pod/web created` per
object (`namespace/team created` for the namespace form).
"""

from __future__ import annotations

import argparse
from typing import Any

from tinykube import errors, kinds
from tinykube.cli.apply import add_file_flag, read_manifests
from tinykube.cli.common import CLIError, Context, describe_error
from tinykube.v1 import namespace_pb2


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "create",
        help="create objects from a manifest, or a namespace by name",
        description="Create objects: `create -f web.yaml` or `create namespace team`.",
    )
    parser.add_argument("resource", nargs="?", help="namespace (ns), for `create namespace NAME`")
    parser.add_argument("names", nargs="*", metavar="NAME")
    add_file_flag(parser, required=False)
    parser.set_defaults(func=run)


async def run(args: argparse.Namespace, ctx: Context) -> int:
    objects: list[tuple[kinds.KindInfo, Any]] = []
    if args.filename:
        if args.resource:
            raise CLIError("give either -f FILE or `namespace NAME`, not both")
        objects = [(item.info, item.obj) for item in read_manifests(args.filename, ctx)]
        if not objects:
            raise CLIError("no objects passed to create")
    elif args.resource in ("namespace", "ns"):
        if len(args.names) != 1:
            raise CLIError("exactly one NAME is required, got " + str(len(args.names)))
        ns = namespace_pb2.Namespace()
        ns.metadata.name = args.names[0]
        objects = [(kinds.NAMESPACE, ns)]
    elif args.resource:
        raise CLIError(f'unknown resource to create by name: "{args.resource}" (namespace only)')
    else:
        raise CLIError("you must provide -f FILE or `namespace NAME`")
    failed: list[errors.TinykubeError] = []
    async with ctx.client() as client:
        for info, obj in objects:
            try:
                created = await client.resource(info).create(obj)
            except errors.AlreadyExistsError as exc:
                failed.append(exc)
                continue
            ctx.print(f"{info.kind.lower()}/{created.metadata.name} created")
    for error in failed:
        ctx.eprint(describe_error(error, ctx.server))
    return 1 if failed else 0
