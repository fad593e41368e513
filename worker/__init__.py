"""costscale: the worker runtime (a separate process on each instance): the gRPC worker server that
serves variants with ONNX Runtime / Neuron executors, and hardware emulation for local runs."""
