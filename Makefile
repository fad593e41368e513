# costscale: the two commands of the quick start.
#   make demo   run the whole loop against an embedded moto cloud on 127.0.0.1
#   make test   run the whole test suite
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: demo test bench venv clean proto

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[demo,test,bench]'
	@rm -f $(VENV)/.installed-*
	@touch $@

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/costscale demo $(ARGS)

test: $(STAMP)
	$(PY) -m pytest -q $(ARGS)

bench: $(STAMP)
	$(PY) bench/plan_bench.py
	$(PY) bench/dispatch_bench.py
	$(PY) bench/autoscale_bench.py
	$(PY) bench/kairos_repro.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache

# Regenerate the committed gRPC stubs (needs grpcio-tools; pin grpcio in pyproject to its version).
proto: $(STAMP)
	$(PY) -m pip install --quiet grpcio-tools
	$(PY) -m grpc_tools.protoc -Idispatcher/proto --python_out=dispatcher/proto --pyi_out=dispatcher/proto \
	  --grpc_python_out=dispatcher/proto dispatcher/proto/costscale.proto
	sed -i 's/^import costscale_pb2 as costscale__pb2/from dispatcher.proto import costscale_pb2 as costscale__pb2/' \
	  dispatcher/proto/costscale_pb2_grpc.py
