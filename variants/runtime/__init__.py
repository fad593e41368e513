"""Executors that run a variant (ONNX Runtime, Neuron) and the built-in demo model."""
