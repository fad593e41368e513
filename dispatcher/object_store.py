"""Where files that remote callers send or ask for live: S3 objects named ``s3://bucket/key``,
never paths on the control host (issue #14, deliverable 4; INFaaS keeps its model repository and
offline inputs in S3). :func:`parse_s3_uri` is the rule a request's name must pass (a local path,
``file://`` or any other scheme is refused with one line); :class:`S3Objects` reads and writes
objects with boto3, against AWS or an emulator at ``aws.endpoint_url`` (moto's S3 in the demo and
the tests). The daemon's AWS credentials are the standard boto3 chain, as for EC2.
"""
from __future__ import annotations

from typing import Any, Protocol

from botocore.config import Config as BotoConfig
from botocore.exceptions import BotoCoreError, ClientError

from scaler.cloud.aws_client import client_error_line

S3_SCHEME = "s3://"
#: objects listed under an ``s3://bucket/prefix/`` input at most (an offline job is a batch, not a lake)
MAX_PREFIX_OBJECTS = 1000


class ObjectError(ValueError):
    """A bad URI, or an object that cannot be read or written: one line, the caller's problem."""


def is_s3_uri(text: str) -> bool:
    """True when ``text`` names an S3 object (``s3://...``), not a local path: the CLI sends a local
    file's bytes and passes an S3 name on."""
    return text.startswith(S3_SCHEME)


def parse_s3_uri(uri: str, what: str = "uri") -> tuple[str, str]:
    """(bucket, key) of ``s3://bucket/key``; ObjectError naming ``what`` for anything else."""
    if not is_s3_uri(uri):
        raise ObjectError(f"{what}: {uri!r} is not an s3://bucket/key URI; remote callers cannot name paths on "
                          "the control host (send the file's bytes, or upload it to S3; the costscale CLI sends "
                          "local files)")
    bucket, _, key = uri[len(S3_SCHEME):].partition("/")
    if not bucket or not key:
        raise ObjectError(f"{what}: {uri!r} needs a bucket and a key (s3://bucket/key)")
    return bucket, key


class ObjectStore(Protocol):
    def get(self, uri: str) -> bytes: ...

    def put(self, uri: str, data: bytes) -> None: ...

    def list(self, uri: str) -> list[str]: ...


class S3Objects:
    """Objects in S3 through boto3 (a client made at first use; blocking: call it off the event loop)."""

    def __init__(self, region: str, endpoint_url: str | None = None) -> None:
        self.region, self.endpoint_url = region, endpoint_url
        self._client: Any = None

    def _s3(self) -> Any:
        if self._client is None:
            import boto3

            # path-style addressing: an emulator on 127.0.0.1 has no bucket subdomains
            cfg = BotoConfig(s3={"addressing_style": "path"}) if self.endpoint_url else None
            self._client = boto3.client("s3", region_name=self.region, endpoint_url=self.endpoint_url, config=cfg)
        return self._client

    @staticmethod
    def _why(uri: str, exc: Exception) -> ObjectError:
        if isinstance(exc, ClientError):      # a refusal names the IAM action (s3:GetObject, s3:ListBucket, ...)
            err = exc.response.get("Error", {})
            line = client_error_line(exc, "s3") if err.get("Code") and err.get("Message") else \
                f"{err.get('Code', 'error')}: S3 refused the request"
            return ObjectError(f"{uri}: {line}")
        return ObjectError(f"{uri}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")

    def get(self, uri: str) -> bytes:
        bucket, key = parse_s3_uri(uri)
        try:
            return self._s3().get_object(Bucket=bucket, Key=key)["Body"].read()
        except (ClientError, BotoCoreError) as exc:
            raise self._why(uri, exc) from None

    def put(self, uri: str, data: bytes) -> None:
        bucket, key = parse_s3_uri(uri)
        try:
            self._s3().put_object(Bucket=bucket, Key=key, Body=data)
        except (ClientError, BotoCoreError) as exc:
            raise self._why(uri, exc) from None

    def list(self, uri: str) -> list[str]:
        """The URIs of the objects under ``s3://bucket/prefix/``, sorted."""
        bucket, prefix = parse_s3_uri(uri)
        out: list[str] = []
        try:
            for page in self._s3().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
                out += [f"{S3_SCHEME}{bucket}/{o['Key']}" for o in page.get("Contents", [])]
                if len(out) > MAX_PREFIX_OBJECTS:
                    raise ObjectError(f"{uri}: more than {MAX_PREFIX_OBJECTS} objects")
        except (ClientError, BotoCoreError) as exc:
            raise self._why(uri, exc) from None
        return sorted(out)
