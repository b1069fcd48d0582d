"""`python -m kubelet --node-name n1`: the tinykube node agent (see kubelet/app.py)."""

from __future__ import annotations

import logging

from kubelet.app import Kubelet
from kubelet.settings import Settings
from tinykube import aio
from tinykube.serving import configure_logging, run_until_signalled
from tinykube.tls import start_checks


async def _main(settings: Settings) -> None:
    start_checks(settings.security, "kubelet")
    kubelet = Kubelet(settings)
    port = await kubelet.start()
    logging.getLogger("kubelet").info(
        "kubelet for %s (%s runtime) serving on port %d, apiserver %s",
        settings.node_name if not settings.fake_nodes else f"{settings.fake_nodes} fake nodes",
        settings.runtime,
        port,
        settings.apiserver,
    )
    await run_until_signalled(kubelet.stop)


def main(argv: list[str] | None = None) -> None:
    configure_logging(logging.INFO)
    aio.run(_main(Settings.from_args(argv)))


if __name__ == "__main__":
    main()
