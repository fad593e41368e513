"""A stock Open Inference Protocol client (tritonclient[grpc], written by NVIDIA, not by us) run
against a costscale dispatcher: ``python tests/oip_client.py HOST:PORT`` runs the calls below and
prints one JSON object of what it saw; ``python tests/oip_client.py --infer HOST:PORT MODEL N``
sends N queries of batch 1 and 64 float features and prints the outcomes;
``python tests/oip_client.py --descriptors`` prints tritonclient's own message and field table,
which tests/dispatcher/test_oip.py compares with ours.

It runs in a process of its own: tritonclient's generated messages and costscale's ``oip_pb2``
define the same ``inference.*`` names, and one process's protobuf descriptor pool holds only one
of the two files.
"""
from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np


def descriptors() -> dict[str, Any]:
    """tritonclient's own table (this process loads its messages, not ours)."""
    from tritonclient.grpc import service_pb2

    return descriptor_table(service_pb2.DESCRIPTOR)


def descriptor_table(file_descriptor: Any) -> dict[str, Any]:
    """Every message of a generated protobuf file (nested ones as ``Outer.Inner``) with its
    fields' names, numbers, types and message types, and the GRPCInferenceService's methods: what
    wire compatibility rests on. tests/dispatcher/test_oip.py runs it on ``oip_pb2`` too."""
    out: dict[str, Any] = {}

    def walk(d: Any, prefix: str) -> None:
        out[prefix + d.name] = sorted([f.name, f.number, f.type, f.message_type.full_name if f.message_type else ""]
                                      for f in d.fields)
        for n in d.nested_types:
            walk(n, prefix + d.name + ".")

    for d in file_descriptor.message_types_by_name.values():
        walk(d, "")
    svc = file_descriptor.services_by_name["GRPCInferenceService"]
    out["service:" + svc.full_name] = sorted([m.name, m.input_type.full_name, m.output_type.full_name]
                                             for m in svc.methods)
    return out


def _error(fn: Any) -> dict[str, Any]:
    from tritonclient.utils import InferenceServerException

    try:
        fn()
    except InferenceServerException as exc:
        return {"status": exc.status(), "message": exc.message()}
    return {"status": None}


def session(url: str) -> dict[str, Any]:
    import tritonclient.grpc as grpcclient

    c = grpcclient.InferenceServerClient(url=url)
    seen: dict[str, Any] = {
        "live": c.is_server_live(),
        "ready": c.is_server_ready(),
        "model_ready": c.is_model_ready("mlp"),
        "app_ready": c.is_model_ready("demo-app"),
        "unknown_ready": c.is_model_ready("nope"),
        "server_metadata": c.get_server_metadata(as_json=True),
        "metadata": c.get_model_metadata("mlp", as_json=True),
    }
    x = np.random.default_rng(3).standard_normal((4, 64)).astype(np.float32)
    inp = grpcclient.InferInput("x", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    res = c.infer("mlp", [inp], outputs=[grpcclient.InferRequestedOutput("y")], request_id="r-1",
                  parameters={"latency_slo_ms": 5000, "min_accuracy": "0", "idempotency_key": "oip-1"})
    resp = res.get_response(as_json=True)
    seen["infer"] = {"x": x.tolist(), "y": res.as_numpy("y").tolist(), "id": resp.get("id"),
                     "model_name": resp.get("model_name"), "parameters": resp.get("parameters", {})}
    app = c.infer("demo-app", [inp])
    seen["app_infer"] = {"y": app.as_numpy("y").tolist(),
                         "parameters": app.get_response(as_json=True).get("parameters", {})}
    seen["unknown_model"] = _error(lambda: c.infer("nope", [inp]))
    seen["bad_parameter"] = _error(lambda: c.infer("mlp", [inp], parameters={"latency_slo_ms": "fast"}))
    text = grpcclient.InferInput("x", [1, 1], "BYTES")
    text.set_data_from_numpy(np.array([[b"hello"]], dtype=np.object_))
    seen["bytes_input"] = _error(lambda: c.infer("mlp", [text]))
    seen["unknown_output"] = _error(lambda: c.infer("mlp", [inp], outputs=[grpcclient.InferRequestedOutput("z")]))
    seen["unknown_metadata"] = _error(lambda: c.get_model_metadata("nope"))
    seen["unimplemented"] = _error(lambda: c.get_model_config("mlp"))
    c.close()
    return seen


def infer(url: str, model: str, n: int) -> dict[str, Any]:
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    c = grpcclient.InferenceServerClient(url=url)
    outcomes: dict[str, int] = {}
    for k in range(n):
        x = grpcclient.InferInput("x", [1, 64], "FP32")
        x.set_data_from_numpy(np.full((1, 64), k, dtype=np.float32))
        try:
            c.infer(model, [x])
            code = "OK"
        except InferenceServerException as exc:
            code = str(exc.status()).removeprefix("StatusCode.")
        outcomes[code] = outcomes.get(code, 0) + 1
    c.close()
    return outcomes


if __name__ == "__main__":
    if sys.argv[1] == "--descriptors":
        print(json.dumps(descriptors()))
    elif sys.argv[1] == "--infer":
        print(json.dumps(infer(sys.argv[2], sys.argv[3], int(sys.argv[4]))))
    else:
        print(json.dumps(session(sys.argv[1])))
