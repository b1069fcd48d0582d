"""`python -m controller`: the tinykube controller manager (see controller/app.py)."""

from __future__ import annotations

import asyncio
import logging
import sys

from controller.app import ControllerManager
from controller.settings import Settings
from tinykube.serving import run_until_signalled


async def _main(settings: Settings) -> None:
    manager = ControllerManager(settings)
    port = await manager.start()
    logging.getLogger("controller").info(
        "controller manager serving health on port %d, apiserver %s", port, settings.apiserver
    )
    await run_until_signalled(manager.stop)


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    asyncio.run(_main(Settings.from_args(argv)))


if __name__ == "__main__":
    main()
