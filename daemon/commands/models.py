"""``costscale models`` and ``costscale offline``: the model-less API of a running dispatcher
(INFaaS §3.1: register_model, list variants, offline_query).

    costscale models register --dispatcher HOST:PORT NAME --application APP --onnx FILE [--validation FILE.npz]
    costscale models list --dispatcher HOST:PORT [--model M | --application A] [--json]
    costscale offline submit --dispatcher HOST:PORT (--model M | --application A) --input PATH --output PATH [--wait]
    costscale offline status --dispatcher HOST:PORT JOB

Bad flags: one line, exit 2. The dispatcher unreachable or refusing: one line, exit 1.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import grpc

from config.hostport import hostport_arg
from config.errors import UsageError


class RpcFailed(UsageError):
    exit_code = 1


def register(sub: argparse._SubParsersAction) -> None:
    """Adds two top-level commands, ``models`` and ``offline``."""
    p = sub.add_parser("models", help="register models and list their variants on a running dispatcher")
    msub = p.add_subparsers(dest="models_command", metavar="ACTION", parser_class=type(p))
    msub.required = True
    reg = msub.add_parser("register", help="register an ONNX model: generate, profile and store its variants")
    reg.add_argument("name", metavar="NAME")
    reg.add_argument("--dispatcher", required=True, type=hostport_arg, metavar="HOST:PORT")
    reg.add_argument("--application", required=True, metavar="APP")
    reg.add_argument("--onnx", required=True, metavar="FILE", help="the model file (sent as bytes)")
    reg.add_argument("--validation", metavar="FILE.npz", help="validation set with arrays x and labels")
    reg.add_argument("--qos-ms", type=float, default=0.0, help="latency target (default: dispatcher's)")
    reg.add_argument("--max-batch", type=int, default=0)
    reg.add_argument("--timeout", type=float, default=300.0)
    reg.add_argument("--json", action="store_true", help="print one JSON object")
    reg.set_defaults(func=run_register)
    ls = msub.add_parser("list", help="list registered variants")
    ls.add_argument("--dispatcher", required=True, type=hostport_arg, metavar="HOST:PORT")
    g = ls.add_mutually_exclusive_group()
    g.add_argument("--model", default="")
    g.add_argument("--application", default="")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=run_list)

    o = sub.add_parser("offline", help="offline (batch) jobs on a running dispatcher")
    osub = o.add_subparsers(dest="offline_command", metavar="ACTION", parser_class=type(o))
    osub.required = True
    sm = osub.add_parser("submit", help="run a model over a .npy/.npz file or folder while the fleet is idle")
    sm.add_argument("--dispatcher", required=True, type=hostport_arg, metavar="HOST:PORT")
    g2 = sm.add_mutually_exclusive_group(required=True)
    g2.add_argument("--model", default="")
    g2.add_argument("--application", default="")
    sm.add_argument("--input", required=True, metavar="PATH")
    sm.add_argument("--output", required=True, metavar="PATH")
    sm.add_argument("--min-accuracy", type=float, default=0.0)
    sm.add_argument("--wait", action="store_true", help="poll until the job is done or failed")
    sm.add_argument("--json", action="store_true")
    sm.set_defaults(func=run_offline_submit)
    st = osub.add_parser("status", help="progress of an offline job")
    st.add_argument("job", metavar="JOB")
    st.add_argument("--dispatcher", required=True, type=hostport_arg, metavar="HOST:PORT")
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=run_offline_status)


def _call(target: str, method: str, request, timeout: float = 30.0):  # type: ignore[no-untyped-def]
    from dispatcher.proto import costscale_pb2_grpc as pbg

    try:
        with grpc.insecure_channel(target) as ch:
            return getattr(pbg.InferenceStub(ch), method)(request, timeout=timeout)
    except grpc.RpcError as exc:
        code = exc.code()  # type: ignore[attr-defined]
        if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            raise RpcFailed(f"cannot reach dispatcher {target}: {code.name}") from None
        raise RpcFailed(f"{method}: {code.name}: {exc.details()}") from None  # type: ignore[attr-defined]


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
    from dispatcher.proto import costscale_pb2 as pb

    onnx = Path(args.onnx)
    if not onnx.is_file():
        raise UsageError(f"--onnx: {onnx}: no such file")
    if args.validation and not Path(args.validation).is_file():
        raise UsageError(f"--validation: {args.validation}: no such file")
    if args.qos_ms < 0 or args.max_batch < 0:
        raise UsageError("--qos-ms and --max-batch must be >= 0")
    req = pb.RegisterModelRequest(name=args.name, application=args.application, onnx=onnx.read_bytes(),
                                  validation_path=str(Path(args.validation).resolve()) if args.validation else "",
                                  qos_ms=args.qos_ms, max_batch=args.max_batch)
    reply = _call(args.dispatcher, "RegisterModel", req, timeout=args.timeout)
    _print_variants(reply.variants, args.json, {"model": reply.name})
    return 0


def run_list(args: argparse.Namespace) -> int:
    from dispatcher.proto import costscale_pb2 as pb

    reply = _call(args.dispatcher, "ListVariants", pb.ListVariantsRequest(model=args.model, application=args.application))
    _print_variants(reply.variants, args.json)
    return 0


def _job_dict(r) -> dict:  # type: ignore[no-untyped-def]
    return {"job_id": r.job_id, "state": r.state, "done": r.done, "total": r.total, "message": r.message}


def _print_job(r, as_json: bool) -> None:  # type: ignore[no-untyped-def]
    if as_json:
        print(json.dumps(_job_dict(r)))
    else:
        print(f"{r.job_id}: {r.state} {r.done}/{r.total}" + (f" ({r.message})" if r.message else ""))


def run_offline_submit(args: argparse.Namespace) -> int:
    from dispatcher.proto import costscale_pb2 as pb

    src = Path(args.input)
    if not src.exists():
        raise UsageError(f"--input: {src}: no such file or folder")
    if not 0 <= args.min_accuracy <= 1:
        raise UsageError("--min-accuracy must be in [0, 1]")
    reply = _call(args.dispatcher, "SubmitOffline", pb.OfflineJobRequest(
        model=args.model, application=args.application, input_path=str(src.resolve()),
        output_path=str(Path(args.output).resolve()), min_accuracy=args.min_accuracy))
    while args.wait and reply.state not in ("done", "failed"):
        time.sleep(0.5)
        reply = _call(args.dispatcher, "GetOfflineJob", pb.OfflineJobReply(job_id=reply.job_id))
    _print_job(reply, args.json)
    return 1 if reply.state == "failed" else 0


def run_offline_status(args: argparse.Namespace) -> int:
    from dispatcher.proto import costscale_pb2 as pb

    reply = _call(args.dispatcher, "GetOfflineJob", pb.OfflineJobReply(job_id=args.job))
    _print_job(reply, args.json)
    return 1 if reply.state == "failed" else 0
