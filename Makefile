# costscale: the two commands of the quick start.
#   make demo   run the whole loop against an embedded moto cloud on 127.0.0.1
#   make test   run the whole test suite
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: demo test bench venv clean proto system-packages

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	@# this venv takes the CPU onnxruntime (pyproject). One built before held onnxruntime-gpu, which
	@# shares its files: remove both so the CPU build goes in whole, never beside the GPU one.
	@if $(PY) -m pip show --quiet onnxruntime-gpu >/dev/null 2>&1; then \
	  $(PY) -m pip uninstall --quiet --yes onnxruntime-gpu onnxruntime; fi
	$(PY) -m pip install --quiet -e '.[demo,test,bench]'
	@rm -f $(VENV)/.installed-*
	@touch $@

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/costscale demo $(ARGS)

# nginx from the distribution: tests/replicas/test_demo_replicas.py puts it (grpc_pass) in front of two replicas.
# Installed when missing (apt, as root or through sudo); where that fails, one warning line, and that
# test fails naming the missing nginx (the README runs it: a silent fallback would prove something else).
system-packages:
	@[ -x /usr/sbin/nginx ] || { echo "installing nginx-light (tests/replicas/test_demo_replicas.py)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  ( $$SUDO apt-get install -y --no-install-recommends nginx-light >/dev/null 2>&1 || \
	    { $$SUDO apt-get update >/dev/null 2>&1 && $$SUDO apt-get install -y --no-install-recommends nginx-light >/dev/null 2>&1; } ) \
	  || echo "warning: could not install nginx-light; tests/replicas/test_demo_replicas.py will fail without it"; }

# pytest-xdist: 4 workers whatever the cores (most long tests wait on processes and sockets, not the
# CPU: on 2 cores 4 workers finish the 1761 tests in 6:47-7:10, one per core in 9:30), a test file's tests on
# one worker (its fixtures, moto server and cached wheelhouse are per file).
test: $(STAMP) system-packages
	$(PY) -m pytest -q -n 4 --dist loadfile $(ARGS)

bench: $(STAMP)
	$(PY) bench/planner/plan_bench.py
	$(PY) bench/dispatch/dispatch_bench.py
	$(PY) bench/variants/autoscale_bench.py
	$(PY) bench/planner/kairos_repro.py
	$(PY) bench/planner/joint_bench.py
	$(PY) bench/replay/both_loops_bench.py
	$(PY) bench/variants/pipeline_bench.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache

# Regenerate the committed gRPC stubs with the grpcio-tools of the installed grpcio's version (the
# stubs check it at import; pyproject's grpcio floor names it).
proto: $(STAMP)
	$(PY) -m pip install --quiet "grpcio-tools==$$($(PY) -c 'import grpc; print(grpc.__version__)')"
	$(PY) -m grpc_tools.protoc -Idispatcher/proto --python_out=dispatcher/proto --pyi_out=dispatcher/proto \
	  --grpc_python_out=dispatcher/proto dispatcher/proto/costscale.proto dispatcher/proto/oip.proto
	sed -i 's/^import costscale_pb2 as costscale__pb2/from dispatcher.proto import costscale_pb2 as costscale__pb2/' \
	  dispatcher/proto/costscale_pb2_grpc.py
	sed -i 's/^import oip_pb2 as oip__pb2/from dispatcher.proto import oip_pb2 as oip__pb2/' \
	  dispatcher/proto/oip_pb2_grpc.py
