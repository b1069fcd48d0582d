"""`python -m kubelet.proxy --node-name n1`: the tinykube proxy of one node (see app.py)."""

from __future__ import annotations

import logging

from kubelet.proxy.app import Proxy
from kubelet.proxy.settings import Settings
from tinykube import aio
from tinykube.serving import configure_logging, run_until_signalled
from tinykube.tls import start_checks


async def _main(settings: Settings) -> None:
    start_checks(settings.security, "kubelet.proxy")
    proxy = Proxy(settings)
    port = await proxy.start()
    logging.getLogger("kubelet.proxy").info(
        "proxy for %s serving health on port %d, apiserver %s",
        settings.node_name,
        port,
        settings.apiserver,
    )
    await run_until_signalled(proxy.stop)


def main(argv: list[str] | None = None) -> None:
    configure_logging(logging.INFO)
    aio.run(_main(Settings.from_args(argv)))


if __name__ == "__main__":
    main()
