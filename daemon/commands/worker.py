"""``costscale worker``: run the worker runtime on an instance (or locally, standing for one).

Prints ``listening HOST:PORT`` as the first stdout line once bound (``--listen 127.0.0.1:0`` picks a
free port; the demo parses the line). SIGTERM/SIGINT stop it gracefully. The instance id and type
come from flags or COSTSCALE_INSTANCE_ID / COSTSCALE_INSTANCE_TYPE (EC2 instance metadata is not
read); the cluster token from --token, --token-file or COSTSCALE_CLUSTER_TOKEN, or read from the SSM
parameter --token-parameter / COSTSCALE_TOKEN_PARAMETER names (what launched workers get: user data
names the parameter, never the token; read again every minute, issue #27). Bad flags raise
UsageError (one line, exit 2); a refused registration exits 1.
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from config.hostport import split_hostport
from config.errors import UsageError
from config.numbers import finite_float
from config.sections.security import read_token
from config.catalog import load_catalog
from variants.runtime.builtin_models import ModelError
from variants.runtime.executor import parse_providers

if TYPE_CHECKING:
    from worker.options import WorkerOptions


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("worker", help="serve model variants on this instance (worker gRPC service)")
    p.add_argument("--listen", default="0.0.0.0:50061", metavar="HOST:PORT",
                   help="address to serve on (port 0: pick a free one) [0.0.0.0:50061]")
    p.add_argument("--dispatcher", metavar="HOST:PORT", help="register with this dispatcher's Control service (or a "
                   "gRPC target over several replicas: ipv4:H:P,H:P or dns:///NAME:PORT)")
    p.add_argument("--advertise", metavar="HOST:PORT", help="address given to the dispatcher (default: the bound one)")
    tok = p.add_mutually_exclusive_group()
    tok.add_argument("--token", help="cluster token presented when registering [$COSTSCALE_CLUSTER_TOKEN]")
    tok.add_argument("--token-file", metavar="F", help="file holding the cluster token")
    tok.add_argument("--token-parameter", metavar="NAME",
                     help="SSM parameter holding the cluster token, read with this instance's profile at start and "
                          "every minute (rotation without a restart) [$COSTSCALE_TOKEN_PARAMETER]")
    p.add_argument("--instance-id", default=None, help="this instance's id [$COSTSCALE_INSTANCE_ID]")
    p.add_argument("--instance-type", default=None, help="this instance's EC2 type [$COSTSCALE_INSTANCE_TYPE]")
    p.add_argument("--model", action="append", default=[], metavar="NAME=SPEC",
                   help="serve SPEC (builtin:mlp or an .onnx path) as NAME; repeatable [mlp=builtin:mlp]")
    p.add_argument("--emulate-profile", metavar="MODEL",
                   help="pad each query's service time to MODEL's latency profile on this instance type")
    p.add_argument("--model-profile", action="append", default=[], metavar="NAME=PROFILE",
                   help="with --emulate-profile: pad the served model NAME to PROFILE's latency (a model of the "
                        "profile CSV); repeatable")
    p.add_argument("--profiles", metavar="CSV", help="latency profile CSV [the shipped Kairos profiles]")
    p.add_argument("--providers", default="auto", metavar="LIST",
                   help="ONNX Runtime providers in order, e.g. cuda,cpu; auto = CUDA first on GPU types [auto]")
    p.add_argument("--threads", type=int, default=None, help="ONNX Runtime intra-op threads [ORT default]")
    p.add_argument("--cache-dir", default=None, metavar="DIR", help="where built-in and pushed models are written")
    p.add_argument("--register-attempts", type=int, default=None, metavar="N",
                   help="give up registering after N failed attempts [retry until answered]")
    p.add_argument("--rejoin-after-s", type=finite_float, default=None, metavar="S",
                   help="register again through --dispatcher when no dispatcher called for S seconds; 0: never "
                        "[3: 3 dispatcher health intervals]")
    p.add_argument("--tls-cert", metavar="PEM", help="serve over TLS with this certificate (and --tls-key); also the "
                                                      "client certificate towards a dispatcher under mutual TLS")
    p.add_argument("--tls-key", metavar="PEM", help="the private key of --tls-cert")
    p.add_argument("--tls-client-ca", metavar="PEM", help="mutual TLS: only clients with a certificate this CA signed")
    p.add_argument("--dispatcher-ca", metavar="PEM", help="register over TLS, trusting this CA for the dispatcher")
    p.add_argument("--imds-endpoint", default=None, metavar="URL",
                   help="watch this instance metadata service for spot interruption notices every 5 s (on EC2: "
                        "http://169.254.169.254; tests: a local server) [$COSTSCALE_IMDS_ENDPOINT; default: no watch]")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.set_defaults(func=run)


def _tls_flags(args: argparse.Namespace) -> dict[str, str | None]:
    """The TLS files, each readable PEM (UsageError naming the flag otherwise)."""
    from config.sections.security import read_pem

    if bool(args.tls_cert) != bool(args.tls_key):
        raise UsageError("--tls-cert and --tls-key go together")
    if args.tls_client_ca and not args.tls_cert:
        raise UsageError("--tls-client-ca needs --tls-cert and --tls-key (mutual TLS is TLS first)")
    out = {"tls_cert": args.tls_cert, "tls_key": args.tls_key, "tls_client_ca": args.tls_client_ca,
           "dispatcher_ca": args.dispatcher_ca}
    for key, path in out.items():
        if path:
            read_pem(path, "--" + key.replace("_", "-"))
    return out


#: gRPC name-resolver schemes a ``--dispatcher`` target may use instead of HOST:PORT (several
#: dispatcher replicas: ``ipv4:10.0.0.11:50051,10.0.0.12:50051``, or DNS with several records)
TARGET_SCHEMES = ("ipv4:", "ipv6:", "dns:")


def _hostport(flag: str, value: str) -> str:
    if flag == "--dispatcher" and value.startswith(TARGET_SCHEMES):
        return value
    try:
        split_hostport(value)
    except ValueError as exc:
        raise UsageError(f"{flag}: {exc}") from None
    return value


#: the permission the worker's instance profile needs on the token parameter (README "How it maps to AWS")
READ_PERMISSION = "ssm:GetParameter"


def _token_from_parameter(name: str) -> tuple[str, Callable[[], str | None]]:
    """The cluster token read from SSM parameter ``name`` (region: $AWS_REGION or $AWS_DEFAULT_REGION,
    which the launch's user data sets from the instance metadata), and the read to repeat. One line
    (UsageError, exit 2) when it cannot be read: no region, refused access (naming the parameter and
    ``ssm:GetParameter``), SSM not reached (after botocore's retries), no such parameter. Exit 2
    (a config problem), not 1 (a refused registration): the instance profile, the region or the
    parameter is the deployment's to fix, the worker never contacts the dispatcher without a
    token, and a refusal is final (no retry loop on AccessDenied)."""
    from scaler.cloud.provider import CloudConfigError, CloudError
    from scaler.cloud.token_parameter import ParameterRefused, TokenParameter, make_ssm_client

    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if not region:
        raise UsageError("--token-parameter: no region (set AWS_REGION or AWS_DEFAULT_REGION)")
    param = TokenParameter(make_ssm_client(region), name)
    needs = f"the instance profile needs {READ_PERMISSION} on it (and kms:Decrypt with a customer-managed key)"
    try:
        value = param.read()
    except ParameterRefused as exc:
        raise UsageError(f"--token-parameter: SSM in {region} refused {READ_PERMISSION} on {name} "
                         f"({exc.code}: {exc.detail}); {needs}") from None
    except CloudConfigError as exc:      # no credentials at all: no instance profile attached
        raise UsageError(f"--token-parameter: {name}: {exc}; {needs}") from None
    except CloudError as exc:            # SSM not reached (after botocore's retries): no IAM advice
        raise UsageError(f"--token-parameter: SSM parameter {name} in {region} not read: {exc}") from None
    if not value:
        raise UsageError(f"--token-parameter: SSM parameter {name} does not exist in {region}")
    return value, param.read


def build_options(args: argparse.Namespace) -> "WorkerOptions":
    """Check the flags and build WorkerOptions (every problem is a UsageError)."""
    from worker.options import WorkerOptions, default_cache_dir

    listen = _hostport("--listen", args.listen)
    dispatcher = _hostport("--dispatcher", args.dispatcher) if args.dispatcher else None
    advertise = _hostport("--advertise", args.advertise) if args.advertise else None
    token = args.token or os.environ.get("COSTSCALE_CLUSTER_TOKEN", "")
    if args.token_file:
        token = read_token(args.token_file, "--token-file")     # ConfigError: one line, exit 2
    parameter = None if (args.token or args.token_file) else (args.token_parameter
                                                              or os.environ.get("COSTSCALE_TOKEN_PARAMETER"))
    fetch = None
    if parameter:
        token, fetch = _token_from_parameter(parameter)
    instance_id = args.instance_id or os.environ.get("COSTSCALE_INSTANCE_ID")
    if not instance_id:
        raise UsageError("--instance-id: missing (give the flag or set COSTSCALE_INSTANCE_ID)")
    instance_type = args.instance_type or os.environ.get("COSTSCALE_INSTANCE_TYPE")
    if not instance_type:
        raise UsageError("--instance-type: missing (give the flag or set COSTSCALE_INSTANCE_TYPE)")
    catalog = load_catalog()
    if instance_type not in catalog:
        raise UsageError(f"--instance-type: unknown instance type {instance_type!r} (known: {', '.join(sorted(catalog))})")
    models: dict[str, str] = {}
    for item in args.model:
        name, sep, spec = item.partition("=")
        if not sep or not name.strip() or not spec.strip():
            raise UsageError(f"--model: {item!r} is not NAME=SPEC")
        if name in models:
            raise UsageError(f"--model: model {name!r} given twice")
        models[name.strip()] = spec.strip()
    model_profiles: dict[str, str] = {}
    for item in args.model_profile:
        name, sep, prof = item.partition("=")
        if not sep or not name.strip() or not prof.strip():
            raise UsageError(f"--model-profile: {item!r} is not NAME=PROFILE")
        model_profiles[name.strip()] = prof.strip()
    try:
        providers = parse_providers(args.providers)
    except ValueError as exc:
        raise UsageError(f"--providers: {exc}") from None
    if args.threads is not None and args.threads < 1:
        raise UsageError("--threads: must be >= 1")
    if args.register_attempts is not None and args.register_attempts < 1:
        raise UsageError("--register-attempts: must be >= 1")
    imds = args.imds_endpoint or os.environ.get("COSTSCALE_IMDS_ENDPOINT") or None
    if imds is not None and not imds.startswith(("http://", "https://")):
        raise UsageError(f"--imds-endpoint: {imds!r} is not an http:// or https:// URL")
    if args.rejoin_after_s is not None and args.rejoin_after_s < 0:
        raise UsageError("--rejoin-after-s: must be >= 0 (0: never register again)")
    return WorkerOptions(
        instance_id=instance_id, instance_type=instance_type, listen=listen,
        models=models or {"mlp": "builtin:mlp"}, dispatcher=dispatcher, token=token, token_fetch=fetch,
        advertise=advertise,
        providers=providers, emulate_profile=args.emulate_profile, model_profiles=model_profiles,
        profiles_path=Path(args.profiles) if args.profiles else None,
        cache_dir=Path(args.cache_dir) if args.cache_dir else default_cache_dir(),
        threads=args.threads, register_attempts=args.register_attempts, imds_endpoint=imds,
        **({} if args.rejoin_after_s is None else {"rejoin_after_s": args.rejoin_after_s or None}),
        **_tls_flags(args))


def run(args: argparse.Namespace) -> int:
    from daemon.local.runner import die_with_parent

    die_with_parent()
    opts = build_options(args)
    logging.basicConfig(level=getattr(logging, args.log_level), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from worker.registration import RegistrationFailed, RegistrationRefused
    from worker.server import serve_worker

    def listening(address: str) -> None:
        print(f"listening {address}", flush=True)

    async def main() -> None:
        await serve_worker(opts, on_listening=listening)

    try:
        asyncio.run(main())
    except (ModelError, ValueError) as exc:  # a bad model file / profile: the user's input
        raise UsageError(str(exc).splitlines()[0]) from None
    except OSError as exc:
        raise UsageError(str(exc)) from None
    except RegistrationRefused as exc:
        print(f"costscale: dispatcher {opts.dispatcher} refused this worker: {exc}", file=sys.stderr)
        return 1
    except RegistrationFailed as exc:
        print(f"costscale: {exc}", file=sys.stderr)
        return 1
    return 0
