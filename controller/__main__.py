"""`python -m controller`: the tinykube controller manager (see controller/app.py)."""

from __future__ import annotations

import logging

from controller.app import ControllerManager
from controller.settings import Settings
from tinykube import aio, memreport
from tinykube.serving import configure_logging, run_until_signalled
from tinykube.tls import start_checks


async def _main(settings: Settings) -> None:
    start_checks(settings.security, "controller")
    manager = ControllerManager(settings)
    port = await manager.start()
    memreport.install()
    logging.getLogger("controller").info(
        "controller manager serving health on port %d, apiserver %s", port, settings.apiserver
    )
    await run_until_signalled(manager.stop)


def main(argv: list[str] | None = None) -> None:
    configure_logging(logging.INFO)
    aio.run(_main(Settings.from_args(argv)))


if __name__ == "__main__":
    main()
