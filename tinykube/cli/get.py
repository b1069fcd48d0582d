"""`tinykube get RESOURCE [NAME...] [-o wide|yaml|json|name] [-l SEL] [--field-selector SEL] [-w]`.

Lists (or gets by name) through the apiserver and prints kubectl's tables; `-w` then follows a
Watch from the list's resourceVersion and prints one row per change until Ctrl-C.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from tinykube import kinds
from tinykube.cli import printers
from tinykube.cli.common import RESOURCES, SHORT_NAMES, CLIError, Context
from tinykube.kinds import KindInfo
from tinykube.manifest import to_json, to_yaml

OUTPUTS = ("wide", "yaml", "json", "name")


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "get",
        help=f"list objects ({RESOURCES})",
        description="Display one or many objects, as kubectl get does.",
    )
    parser.add_argument("resource", help=f"one of {RESOURCES} (short: {SHORT_NAMES}), or TYPE/NAME")
    parser.add_argument("names", nargs="*", metavar="NAME", help="only these objects")
    parser.add_argument("-o", "--output", choices=OUTPUTS, help="output format")
    parser.add_argument("-l", "--selector", default="", help="label selector, e.g. app=web")
    parser.add_argument("--field-selector", default="", help="e.g. spec.nodeName=node-1")
    parser.add_argument(
        "-w", "--watch", action="store_true", help="after listing, watch for changes"
    )
    parser.set_defaults(func=run)


def resolve_kind(resource: str) -> KindInfo:
    try:
        return kinds.lookup(resource)
    except KeyError as exc:
        raise CLIError(exc.args[0]) from exc


def split_type_name(
    resource: str, names: Sequence[str], verb: str = "get"
) -> tuple[KindInfo, list[str]]:
    """`pods web db` or `pod/web pod/db` (kubectl's two forms) as a kind and its names.

    The forms cannot be mixed (kubectl's messages); TYPE/NAME arguments must name one kind.
    """
    if "/" not in resource:
        if any("/" in name for name in names):
            raise CLIError(
                "there is no need to specify a resource type as a separate argument when "
                f"passing arguments in resource/name form (e.g. 'tinykube {verb} "
                f"resource/<resource_name>' instead of 'tinykube {verb} resource "
                "resource/<resource_name>')"
            )
        return resolve_kind(resource), list(names)
    info: KindInfo | None = None
    out: list[str] = []
    for arg in (resource, *names):
        kind, _, name = arg.partition("/")
        if not kind or not name or "/" in name:
            raise CLIError("arguments in resource/name form must have a single resource and name")
        this = resolve_kind(kind)
        if info is not None and this.kind != info.kind:
            raise CLIError(
                f"resource/name arguments of more than one kind ({info.plural}, {this.plural}) "
                "are not supported; give one kind per command"
            )
        info = this
        out.append(name)
    assert info is not None
    return info, out


def kind_name(info: KindInfo, obj: Any) -> str:
    return f"{info.kind.lower()}/{obj.metadata.name}"


def no_resources(ctx: Context, info: KindInfo) -> str:
    if info.namespaced and not ctx.all_namespaces:
        return f"No resources found in {ctx.namespace} namespace."
    return "No resources found"


def show(
    ctx: Context,
    info: KindInfo,
    objs: Sequence[Any],
    output: str | None,
    *,
    single: bool = False,
    resource_version: str = "",
) -> None:
    """Print objects in the requested format (a table by default)."""
    if output == "yaml":
        ctx.print(to_yaml(objs[0] if single else objs, resource_version=resource_version), end="")
    elif output == "json":
        ctx.print(to_json(objs[0] if single else objs, resource_version=resource_version), end="")
    elif output == "name":
        for obj in objs:
            ctx.print(kind_name(info, obj))
    else:
        with_ns = ctx.all_namespaces
        ctx.print(
            printers.table(info, objs, ctx.now(), wide=output == "wide", with_namespace=with_ns),
            end="",
        )


async def run(args: argparse.Namespace, ctx: Context) -> int:
    info, args.names = split_type_name(args.resource, args.names)
    if args.names and ctx.all_namespaces and info.namespaced:
        raise CLIError("a resource cannot be retrieved by name across all namespaces")
    namespace = ctx.namespace_for(info)
    async with ctx.client() as client:
        resource = client.resource(info)
        resource_version = ""
        if args.names:
            objs = [await resource.get(name, namespace) for name in args.names]
        else:
            listed = await resource.list(
                namespace, label_selector=args.selector, field_selector=args.field_selector
            )
            objs = printers.sort_for_display(info, listed.items)
            resource_version = listed.metadata.resourceVersion
        if objs or (args.output in ("yaml", "json") and not args.names):
            show(
                ctx,
                info,
                objs,
                args.output,
                single=len(args.names) == 1,
                resource_version=resource_version,
            )
        elif not args.watch:
            ctx.eprint(no_resources(ctx, info))
        if args.watch:
            await watch(ctx, info, resource, args, namespace, resource_version, bool(objs))
    return 0


async def watch(
    ctx: Context,
    info: KindInfo,
    resource: Any,
    args: argparse.Namespace,
    namespace: str,
    resource_version: str,
    header_printed: bool,
) -> None:
    """Print a row (or a document) per change until interrupted."""
    field_selector = args.field_selector
    if len(args.names) == 1:
        by_name = f"metadata.name={args.names[0]}"
        field_selector = f"{field_selector},{by_name}" if field_selector else by_name
    wide = args.output == "wide"
    with_ns = ctx.all_namespaces
    if not header_printed and args.output in (None, "wide"):
        header = printers.columns(info, wide=wide, with_namespace=with_ns)
        ctx.print(printers.render(header, []), end="")
    async for event in resource.watch(
        namespace,
        label_selector=args.selector,
        field_selector=field_selector,
        resource_version=resource_version,
    ):
        if event.type == "BOOKMARK":
            continue
        obj = event.object
        if args.names and obj.metadata.name not in args.names:
            continue
        if args.output == "yaml":
            ctx.print("---\n" + to_yaml(obj), end="")
        elif args.output == "json":
            ctx.print(to_json(obj), end="")
        elif args.output == "name":
            ctx.print(kind_name(info, obj))
        else:
            cells = printers.row(info, obj, ctx.now(), wide=wide, with_namespace=with_ns)
            ctx.print("   ".join(cells))
