"""The Clouds that run elsewhere: connecting to the one a generation's settings name, and the settings'
"Test connection" (what a Cloud address serves, or why it cannot be used here).

:class:`RemoteClouds` holds the remote Clouds' shared secret (the composition root reads
``$SPECSTEER_CLOUD_SECRET``): sent as a header, never shown, stored or part of the settings, and sent only to
addresses the deployment's exposure lets its callers use.
"""

from __future__ import annotations

from collections.abc import Sequence

from specsteer.cloud.client import RemoteCloud
from specsteer.engine.settings import GenerationSettings, sentence
from specsteer.method.catalog import METHOD_INFO
from specsteer.protocol.exposure import Exposure, cloud_address
from specsteer.protocol.link import CloudError, CloudRefused
from specsteer.service.events import CloudCheck
from specsteer.service.pair_catalog import pairing_mismatch, pairing_name


class RemoteClouds:
    """Connections to remote Clouds with the deployment's secret, where its exposure allows them."""

    def __init__(self, cloud_secret: str | None, exposure: Exposure) -> None:
        self._cloud_secret = cloud_secret or None
        self.exposure = exposure

    # ----------------------------------------------------------------------- a remote Cloud

    def check(self, address: str, pairing: str | None = None) -> CloudCheck:
        """The settings' "Test connection": whether a Cloud answers at ``address``, what it serves (pairing,
        protocol version, runtime, limits) and whether that fits ``pairing``. Never raises for a bad
        address or an absent Cloud: the check says what is wrong."""
        try:
            address = cloud_address(address)
        except ValueError as error:
            return CloudCheck("", False, str(error))
        if not address:
            return CloudCheck("", True, "The Cloud runs in this process: there is no connection to test.")
        refused = self.exposure.cloud_problem(address)
        if refused:
            return CloudCheck(address, False, refused)
        try:
            with RemoteCloud(address, self._cloud_secret, timeout_s=10.0) as cloud:
                info = cloud.info()
        except CloudError as error:
            return CloudCheck(address, False, sentence(str(error)))
        problem = pairing_mismatch(address, info.pairing, pairing) if pairing else None
        if problem:
            return CloudCheck(address, False, problem, info)
        fits = ", the pairing chosen here" if pairing else ""
        return CloudCheck(
            address,
            True,
            f"The Cloud at {address} answers: it serves {pairing_name(info.pairing)}"
            f"{fits}, protocol version {info.protocol}.",
            info,
        )

    def connect(self, settings: GenerationSettings, methods: Sequence[str]) -> RemoteCloud | None:
        """The Cloud service the settings name, checked to answer and to serve their pairing before any
        model loads; None when the Cloud runs in this process or no method needs one. Raises CloudError."""
        if not settings.remote or all(METHOD_INFO[method].device_only for method in methods):
            return None
        cloud = RemoteCloud(settings.cloud, self._cloud_secret)
        try:
            info = cloud.info()
            problem = pairing_mismatch(settings.cloud, info.pairing, settings.pairing)
            if problem:
                raise CloudRefused(problem, "pairing")
        except BaseException:
            cloud.close()
            raise
        return cloud
