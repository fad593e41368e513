"""The embedded default's cloud (``costscale demo``, ``costscale demo --serve``): moto EC2 in
server mode on a free loopback port, with throwaway credentials so nothing can reach real AWS."""
from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path
from urllib.parse import urlparse

from config.sections.security import is_loopback
from config.schema import Config


class EmbeddedCloud:
    """The demo's and the sandbox's cloud: moto EC2 on a free loopback port, throwaway credentials
    in the environment (so nothing can reach real AWS), an AMI to launch and a temporary state
    directory. :meth:`stop` takes all of it down."""

    def __init__(self, label: str) -> None:
        import boto3
        from moto.server import ThreadedMotoServer

        for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
            os.environ.pop(key, None)
        os.environ.update(AWS_ACCESS_KEY_ID=f"costscale-{label}", AWS_SECRET_ACCESS_KEY=f"costscale-{label}",
                          AWS_DEFAULT_REGION="us-east-1")
        port = _free_port()
        self._moto = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        self._moto.start()
        self._tmp = tempfile.TemporaryDirectory(prefix=f"costscale-{label}-")
        self.endpoint = f"http://127.0.0.1:{port}"
        self.state_dir = Path(self._tmp.name)
        try:
            self.ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=self.endpoint)
            images = self.ec2.describe_images(Owners=["amazon"]).get("Images") or self.ec2.describe_images().get("Images")
            self.ami = images[0]["ImageId"]
        except BaseException:
            self.stop()
            raise

    def instances(self, cluster: str) -> dict[str, str]:
        """The cluster's instances, ever launched, with their states."""
        found = self.ec2.describe_instances(Filters=[{"Name": "tag:costscale:cluster", "Values": [cluster]}])
        return {i["InstanceId"]: i["State"]["Name"] for r in found["Reservations"] for i in r["Instances"]}

    def live_instances(self, cluster: str) -> list[str]:
        """Ids of the cluster's instances still pending or running."""
        return [i for i, state in self.instances(cluster).items() if state in ("pending", "running")]

    def stop(self) -> None:
        self._moto.stop()
        self._tmp.cleanup()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def on_this_host(cfg: Config) -> bool:
    """True when the config's EC2 is an emulator on this host (moto on loopback, the embedded
    default): its instances are served by local worker processes (``daemon.local.runner``)."""
    host = urlparse(cfg.aws.endpoint_url).hostname if cfg.aws.endpoint_url else None
    return host is not None and is_loopback(f"{host}:0")


__all__ = ["EmbeddedCloud", "on_this_host"]
