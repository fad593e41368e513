"""``costscale bundle [CONFIG]``: build the wheelhouse workers install from where the package index
is out of reach (private subnets), and publish it to S3 (issue #38; :mod:`daemon.aws.wheelhouse`).

Where: ``--bucket``/``--prefix``, else the config's ``launch.wheelhouse`` (s3://BUCKET/PREFIX, which
is also what launched workers are told). Targets: ``--python`` versions times ``--arch`` machines
(default 3.11 and 3.12, x86_64 and aarch64: Amazon Linux 2023's python3.11 and Ubuntu 24.04's
3.12, Intel/AMD and Graviton), with onnxruntime-gpu unless ``--no-gpu``. Downloads are kept in
``--cache`` (default $COSTSCALE_CACHE_DIR/wheelhouse) and reused. Bad input: one line, exit 2.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from config.errors import UsageError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bundle", help="build the workers' wheelhouse and publish it to S3 (private subnets)")
    p.add_argument("config", nargs="?", metavar="CONFIG", help="take launch.wheelhouse, region and endpoint from it")
    p.add_argument("--bucket", help="S3 bucket [launch.wheelhouse's]")
    p.add_argument("--prefix", default=None, help="key prefix [launch.wheelhouse's, else costscale/wheelhouse]")
    p.add_argument("--region", default=None, help="the bucket's region [the config's, else $AWS_DEFAULT_REGION]")
    p.add_argument("--python", default="3.11,3.12", metavar="X.Y,...", help="CPython versions [3.11,3.12]")
    p.add_argument("--arch", default="x86_64,aarch64", metavar="LIST", help="machines [x86_64,aarch64]")
    p.add_argument("--no-gpu", action="store_true", help="leave onnxruntime-gpu out (no GPU worker types)")
    p.add_argument("--cache", metavar="DIR", default=None, help="keep downloaded wheels here [$COSTSCALE_CACHE_DIR/wheelhouse]")
    p.set_defaults(func=run)


def destination(args: argparse.Namespace, wheelhouse: str | None) -> str:
    """s3://BUCKET/PREFIX from the flags, else the config's launch.wheelhouse (UsageError otherwise)."""
    if args.bucket:
        if "/" in args.bucket or args.bucket.startswith("s3:"):
            raise UsageError(f"--bucket: {args.bucket!r} is a bucket name, not a URI")
        prefix = (args.prefix or "costscale/wheelhouse").strip("/")
        if not prefix:
            raise UsageError("--prefix: give a non-empty key prefix")
        return f"s3://{args.bucket}/{prefix}"
    if wheelhouse:
        return wheelhouse.rstrip("/")
    raise UsageError("bundle: give --bucket (and --prefix), or a CONFIG with launch.wheelhouse: s3://BUCKET/PREFIX")


def run(args: argparse.Namespace) -> int:
    import os

    from config.checks import load_checked_config
    from config.version import costscale_version
    from daemon.aws.wheelhouse import (BundleError, cache_dir, download_target, manifest, own_requirements,
                                       own_wheel, parse_targets, publish)
    from daemon.commands.common.progress import Progress
    from boto3.exceptions import S3UploadFailedError
    from botocore.exceptions import BotoCoreError, ClientError

    from scaler.cloud.aws_client import client_error_line, make_client
    from scaler.cloud.provider import CloudConfigError
    from scaler.cloud.user_data import SCRIPT_NAME, bootstrap_script, worker_install

    cfg = load_checked_config(args.config) if args.config else None
    uri = destination(args, cfg.launch.wheelhouse if cfg else None)
    try:
        targets = parse_targets([p.strip() for p in args.python.split(",") if p.strip()],
                                [a.strip() for a in args.arch.split(",") if a.strip()])
    except ValueError as exc:
        raise UsageError(f"bundle: {exc}") from None
    if not targets:
        raise UsageError("bundle: --python and --arch name no target")
    region = args.region or (cfg.region if cfg else None) or os.environ.get("AWS_DEFAULT_REGION")
    if not region:
        raise UsageError("bundle: no region (give --region, a CONFIG, or set AWS_DEFAULT_REGION)")
    try:
        install = worker_install(uri)
    except CloudConfigError as exc:
        raise UsageError(f"bundle: {exc}") from None
    cache = Path(args.cache) if args.cache else cache_dir()
    warn = lambda line: print(f"costscale: warning: {line}", file=sys.stderr)  # noqa: E731
    progress = Progress(len(targets) + 1)
    try:
        mine = own_wheel(cache, install.version)
        progress.step(mine.name)
        per_target = {}
        for t in targets:
            per_target[t] = [mine, *download_target(cache, t, own_requirements(),
                                                    None if args.no_gpu else install.onnxruntime, warn)]
            progress.step(t.tag)
        progress.close()
        doc = manifest(install.version, install.onnxruntime, per_target)
        files = {w.name: w for ws in per_target.values() for w in ws}
        s3 = make_client("s3", region, endpoint_url=cfg.aws.endpoint_url if cfg else None, max_attempts=8,
                         connect_timeout=5, read_timeout=120)
        progress = Progress(len(files))
        sent = publish(s3, uri, files, doc, progress.step, {SCRIPT_NAME: bootstrap_script().encode()})
    except BundleError as exc:
        progress.close()
        raise UsageError(f"bundle: {exc}") from None
    except (ClientError, BotoCoreError, S3UploadFailedError) as exc:   # one line, a refusal naming the action
        progress.close()
        raise UsageError(f"bundle: publishing to {uri}: {client_error_line(exc, 's3')}") from None
    progress.close()
    size = sum(w.stat().st_size for w in files.values())
    print(f"{uri}: costscale {install.version}, {len(files)} wheels ({size / 1e6:.0f} MB, {sent} uploaded) for "
          f"{', '.join(sorted(doc['targets']))}; manifest {uri}/manifest.json; image recipes: {uri}/{SCRIPT_NAME}")
    if cfg is None or cfg.launch.wheelhouse != uri:
        print(f"workers install from it with launch.wheelhouse: {uri}")
    return 0
