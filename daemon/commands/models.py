"""``costscale models`` and ``costscale offline``: the model-less API of a running dispatcher
(INFaaS §3.1: register_model, list variants, offline_query).

    costscale models register --dispatcher HOST:PORT NAME --application APP --onnx FILE|s3://B/K [--validation FILE.npz|s3://B/K]
    costscale models list --dispatcher HOST:PORT [--model M | --application A] [--json]
    costscale offline submit --dispatcher HOST:PORT (--model M | --application A) --input PATH|s3://B/K[/] [--output PATH|s3://B/K] [--wait]
    costscale offline status --dispatcher HOST:PORT JOB [--output PATH]

The dispatcher never reads or writes a path on its host for a caller (issue #14): a local file is
read here and sent inline (a folder of .npy/.npz inputs as one .npz), an ``s3://`` URI is passed on
for the daemon to read or write in S3, and a done job's outputs without an S3 ``--output`` come back
in the reply and are written here. Connection flags (TLS, tokens): :mod:`daemon.commands.common.client_flags`.
Bad flags: one line, exit 2. The dispatcher unreachable or refusing: one line, exit 1.
"""
from __future__ import annotations

from config.numbers import finite_float

import argparse
import json
import time
from pathlib import Path

from config.hostport import hostport_arg
from config.errors import UsageError
from config.sections.security import read_file_bytes
from daemon.commands.common.client_flags import add_client_flags, call


def register(sub: argparse._SubParsersAction) -> None:
    """Adds two top-level commands, ``models`` and ``offline``."""
    p = sub.add_parser("models", help="register models and list their variants on a running dispatcher")
    msub = p.add_subparsers(dest="models_command", metavar="ACTION", parser_class=type(p))
    msub.required = True
    reg = msub.add_parser("register", help="register an ONNX model: generate, profile and store its variants")
    reg.add_argument("name", metavar="NAME")
    reg.add_argument("--dispatcher", required=True, type=hostport_arg, metavar="HOST:PORT")
    reg.add_argument("--application", required=True, metavar="APP")
    reg.add_argument("--onnx", required=True, metavar="FILE|s3://B/K", help="the model file (a local one is sent as bytes)")
    reg.add_argument("--validation", metavar="FILE.npz|s3://B/K", help="validation set with arrays x and labels")
    reg.add_argument("--qos-ms", type=finite_float, default=0.0, help="latency target (default: dispatcher's)")
    reg.add_argument("--max-batch", type=int, default=0)
    reg.add_argument("--timeout", type=finite_float, default=300.0)
    reg.add_argument("--json", action="store_true", help="print one JSON object")
    add_client_flags(reg)
    reg.set_defaults(func=run_register)
    ls = msub.add_parser("list", help="list registered variants")
    ls.add_argument("--dispatcher", required=True, type=hostport_arg, metavar="HOST:PORT")
    g = ls.add_mutually_exclusive_group()
    g.add_argument("--model", default="")
    g.add_argument("--application", default="")
    ls.add_argument("--json", action="store_true")
    add_client_flags(ls)
    ls.set_defaults(func=run_list)

    o = sub.add_parser("offline", help="offline (batch) jobs on a running dispatcher")
    osub = o.add_subparsers(dest="offline_command", metavar="ACTION", parser_class=type(o))
    osub.required = True
    sm = osub.add_parser("submit", help="run a model over a .npy/.npz file or folder while the fleet is idle")
    sm.add_argument("--dispatcher", required=True, type=hostport_arg, metavar="HOST:PORT")
    g2 = sm.add_mutually_exclusive_group(required=True)
    g2.add_argument("--model", default="")
    g2.add_argument("--application", default="")
    sm.add_argument("--input", required=True, metavar="PATH|s3://B/K",
                    help="a .npy/.npz file or folder here (sent inline), or an S3 object or prefix ending in /")
    sm.add_argument("--output", metavar="PATH|s3://B/K",
                    help="where the outputs (.npz) go: an S3 object the daemon writes, or a file here (needs --wait)")
    sm.add_argument("--min-accuracy", type=finite_float, default=0.0)
    sm.add_argument("--wait", action="store_true", help="poll until the job is done or failed")
    sm.add_argument("--json", action="store_true")
    add_client_flags(sm)
    sm.set_defaults(func=run_offline_submit)
    st = osub.add_parser("status", help="progress of an offline job")
    st.add_argument("job", metavar="JOB")
    st.add_argument("--dispatcher", required=True, type=hostport_arg, metavar="HOST:PORT")
    st.add_argument("--output", metavar="PATH", help="write a done job's outputs (.npz) here")
    st.add_argument("--json", action="store_true")
    add_client_flags(st)
    st.set_defaults(func=run_offline_status)


def _variant_dict(v) -> dict:  # type: ignore[no-untyped-def]
    return {"name": v.name, "model": v.model, "application": v.application, "precision": v.precision,
            "hardware": v.hardware, "tuned_batch": v.tuned_batch, "accuracy": round(v.accuracy, 6),
            "accuracy_estimated": v.accuracy_estimated, "state": v.state, "instances": list(v.instances)}


def _print_variants(variants, as_json: bool, extra: dict | None = None) -> None:  # type: ignore[no-untyped-def]
    rows = [_variant_dict(v) for v in variants]
    if as_json:
        print(json.dumps({**(extra or {}), "variants": rows}))
        return
    if not rows:
        print("no variants registered")
        return
    print(f"{'variant':28} {'model':14} {'prec':5} {'hw':5} {'batch':5} {'accuracy':9} {'state':10} instances")
    for r in rows:
        acc = f"{r['accuracy']:.3f}" + ("~" if r["accuracy_estimated"] else " ")
        print(f"{r['name']:28} {r['model']:14} {r['precision']:5} {r['hardware']:5} {r['tuned_batch'] or '-':>5} "
              f"{acc:9} {r['state']:10} {','.join(r['instances']) or '-'}")


def run_register(args: argparse.Namespace) -> int:
    from dispatcher.object_store import is_s3_uri
    from dispatcher.proto import costscale_pb2 as pb

    if args.qos_ms < 0 or args.max_batch < 0:
        raise UsageError("--qos-ms and --max-batch must be >= 0")
    req = pb.RegisterModelRequest(name=args.name, application=args.application, qos_ms=args.qos_ms,
                                  max_batch=args.max_batch)
    if is_s3_uri(args.onnx):
        req.onnx_uri = args.onnx
    else:   # read here, sent inline; unreadable or empty: one line, exit 2
        req.onnx = read_file_bytes(args.onnx, "--onnx")
    if args.validation and is_s3_uri(args.validation):
        req.validation_uri = args.validation
    elif args.validation:
        req.validation = read_file_bytes(args.validation, "--validation")
    reply = call(args.dispatcher, "RegisterModel", req, timeout=args.timeout, conn=args)
    _print_variants(reply.variants, args.json, {"model": reply.name})
    return 0


def run_list(args: argparse.Namespace) -> int:
    from dispatcher.proto import costscale_pb2 as pb

    reply = call(args.dispatcher, "ListVariants", pb.ListVariantsRequest(model=args.model, application=args.application),
                 conn=args)
    _print_variants(reply.variants, args.json)
    return 0


def _job_dict(r) -> dict:  # type: ignore[no-untyped-def]
    return {"job_id": r.job_id, "state": r.state, "done": r.done, "total": r.total, "message": r.message}


def _print_job(r, as_json: bool) -> None:  # type: ignore[no-untyped-def]
    if as_json:
        print(json.dumps(_job_dict(r)))
    else:
        print(f"{r.job_id}: {r.state} {r.done}/{r.total}" + (f" ({r.message})" if r.message else ""))


def _save_outputs(reply, path: str | None) -> None:  # type: ignore[no-untyped-def]
    """Write a done job's inline outputs to ``path`` (a file here)."""
    from config.files import write_atomic

    if path and reply.state == "done" and reply.output:
        try:
            write_atomic(Path(path), reply.output)
        except OSError as exc:
            raise UsageError(f"--output: cannot write {path} ({exc.strerror or exc})") from None


def run_offline_submit(args: argparse.Namespace) -> int:
    from dispatcher.object_store import is_s3_uri
    from dispatcher.offline import npz_bytes, offline_inputs
    from dispatcher.proto import costscale_pb2 as pb

    if not 0 <= args.min_accuracy <= 1:
        raise UsageError("--min-accuracy must be in [0, 1]")
    local_output = args.output if args.output and not is_s3_uri(args.output) else None
    if local_output and not args.wait:
        raise UsageError("--output: a local file needs --wait (the outputs come back when the job is done); "
                         "or give an s3:// URI, or fetch them later with `offline status JOB --output FILE`")
    req = pb.OfflineJobRequest(model=args.model, application=args.application, min_accuracy=args.min_accuracy,
                               output_uri=args.output if args.output and is_s3_uri(args.output) else "")
    if is_s3_uri(args.input):
        req.input_uri = args.input
    else:   # read here, sent inline: the dispatcher reads no path of its host for a caller
        try:
            req.input = npz_bytes(dict(offline_inputs(Path(args.input))))
        except ValueError as exc:
            raise UsageError(f"--input: {exc}") from None
    reply = call(args.dispatcher, "SubmitOffline", req, conn=args)
    while args.wait and reply.state not in ("done", "failed"):
        time.sleep(0.5)
        reply = call(args.dispatcher, "GetOfflineJob", pb.OfflineJobReply(job_id=reply.job_id), conn=args)
    _save_outputs(reply, local_output)
    _print_job(reply, args.json)
    return 1 if reply.state == "failed" else 0


def run_offline_status(args: argparse.Namespace) -> int:
    from dispatcher.proto import costscale_pb2 as pb

    reply = call(args.dispatcher, "GetOfflineJob", pb.OfflineJobReply(job_id=args.job), conn=args)
    _save_outputs(reply, args.output)
    _print_job(reply, args.json)
    return 1 if reply.state == "failed" else 0
