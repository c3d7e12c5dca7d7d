# make demo : the guided tour (creates .venv and installs what it needs first)
# make test : the whole test suite
# make simulator : download Sophgo's BM1684 simulator (tpu-mlir==1.30.2 wheel, about 312 MB) into the cache
# make ocr-models : download PP-OCRv4's detector and recognizer (rapidocr-onnxruntime wheel, 15 MB) and ddddocr's recognizer (ddddocr wheel, 76 MB) into the cache
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test install opencl-runtime simulator simulator-quiet ocr-models bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[all]'
	touch $(STAMP)

WARM := $(VENV)/.warm

# compile the numba kernels once per install, so that later processes load them
$(WARM): $(STAMP)
	$(BIN)/python -m tensorlayout._warm
	touch $(WARM)

install: $(STAMP) $(WARM)

# PoCL (a CPU OpenCL implementation) when the machine has no OpenCL platform yet.
opencl-runtime: $(STAMP) $(WARM)
	@if $(BIN)/python -c "import pyopencl as cl, sys; sys.exit(0 if cl.get_platforms() else 1)" >/dev/null 2>&1; then \
	  echo "OpenCL platform found."; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "No OpenCL platform: installing PoCL (pocl-opencl-icd) with apt-get."; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pocl-opencl-icd) >/dev/null \
	    || echo "apt-get could not install PoCL: OpenCL parts will be skipped."; \
	else \
	  echo "No OpenCL platform and no root apt-get: OpenCL parts will be skipped."; \
	fi

# Sophgo's simulator is never committed: pip downloads the wheel and only libcmodel_bm1684.so is
# kept, in ~/.cache/tensorlayout (or $$TENSORLAYOUT_CMODEL names an existing copy).
simulator: $(STAMP)
	$(BIN)/tensorlayout npu simulator --fetch

# The same, tolerating no network: the simulator tests then skip, saying why.
simulator-quiet: $(STAMP)
	@$(BIN)/tensorlayout npu simulator --fetch --quiet >/dev/null 2>&1 \
	  || echo "BM1684 simulator not available (no network?): its tests and tour part are skipped."

# Real models are never committed either: tests/test_real_models.py skips without them.
ocr-models: $(STAMP)
	$(BIN)/python tests/_real_models.py

demo: opencl-runtime simulator-quiet
	$(BIN)/tensorlayout demo

test: opencl-runtime simulator-quiet
	$(BIN)/python -m pytest -q

bench: opencl-runtime
	for b in benchmarks/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .hypothesis gallery
