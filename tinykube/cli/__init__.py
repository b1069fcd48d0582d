"""The `tinykube` command line: kubectl-like verbs against a tinykube apiserver, plus `up`.

Subcommands are modules of this package, found at start-up: every module here (other than
`main`, `common`, `printers` and names starting with "_") that defines

    def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
        parser = commands.add_parser("explain", help="...")
        parser.add_argument("name")
        parser.set_defaults(func=run)

    async def run(args: argparse.Namespace, ctx: tinykube.cli.common.Context) -> int: ...

becomes a subcommand; `run` may be sync or async and returns the exit code. Parsers created
through `commands.add_parser` accept the global flags (`--server`, `-n`, `-A`) after the verb
too, as kubectl does. `ctx` carries the global flags and opens the apiserver client
(`async with ctx.client() as client:`); errors from `tinykube.errors` propagate and are printed
by `main` the way kubectl prints them (`Error from server (NotFound): pods "x" not found`).
"""
