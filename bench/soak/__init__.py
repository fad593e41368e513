"""The soak bench's parts (``bench/soak_bench.py``, ``tests/soak/test_soak.py``)."""
