# Two commands do all set-up on a fresh machine (see README.md):
#   make demo   create .venv, install keras_vit + export, train on digits, export and verify -> runs/demo/
#   make test   the same install, then every test (slow ones too)
#   make bench  the same install, then the benchmarks (tens of minutes; tables in benchmarks/results/)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.keras_vit-installed
WEB_STAMP := export/web/node_modules/.keras_vit-installed
export TF_CPP_MIN_LOG_LEVEL ?= 2
export PYTHONUNBUFFERED = 1

.PHONY: install system-deps demo test test-budget test-backends test-quick bench clean

# tflite-support's extension (TFLite metadata) needs libusb; installed as root with apt-get.
system-deps:
	@ldconfig -p | grep -q libusb-1.0.so.0 || { \
	  echo "installing Debian package libusb-1.0-0 (needed by tflite-support)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq libusb-1.0-0; }
	@# The browser check and page (--web-check, --web; docs/web.md): Debian's Chromium, and npm for the pinned
	@# packages; each only if missing (Debian's npm conflicts with a Node.js installed from elsewhere). g++: the
	@# benchmarks' torch.compile peer (benchmarks/peers.py) compiles its kernels with it.
	@missing=$$(for p in chromium npm g++; do command -v $$p >/dev/null || echo $$p; done); [ -z "$$missing" ] || { \
	  echo "installing Debian packages $$missing (the browser check, docs/web.md; g++: torch.compile)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; }

$(STAMP): setup.cfg pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip setuptools wheel
	# PyPI's other `keras-vit` (and this project's earlier distribution name, keras_vit) import as keras_vit too: out first.
	$(PY) -m pip uninstall --quiet --yes keras-vit 2>/dev/null || true
	$(PY) -m pip install --quiet -e ".[tensorflow,export,test,bench]"
	# docs/traps.md: tflite-support pins protobuf<4, which would break TensorFlow; it goes in last, without its deps.
	$(PY) -m pip install --quiet --no-deps tflite-support==0.4.4
	# setup.cfg: mediapipe's opencv-contrib-python would clash with opencv-python-headless; its other deps are in.
	$(PY) -m pip install --quiet --no-deps mediapipe==1.2.3
	touch $(STAMP)

# MediaPipe Tasks for Web and onnxruntime-web, pinned by export/web/package-lock.json (no install scripts run).
$(WEB_STAMP): export/web/package.json export/web/package-lock.json
	npm ci --prefix export/web --no-audit --no-fund --ignore-scripts --loglevel=error
	touch $(WEB_STAMP)

install: system-deps $(STAMP) $(WEB_STAMP)

# The best small-data recipe of benchmarks.recipes within 1.5x the paper recipe's training time (issue 26,
# docs/recipes.md); tests/test_demo.py reads this line.
DEMO_TRAIN_FLAGS := --recipe mixup-smoothing
# TensorFlow's four TFLite modes (full_integer_int8 among them), five of LiteRT Quantizer's six (int8 among them; not
# int8_mixed16) and three of the four ONNX modes (not float32_fused; docs/export.md's table has them all);
# tests/test_demo.py reads this line.
DEMO_EXPORT_FLAGS := --calibration-data digits --quantization float32,float16,dynamic_int8,int8,full_integer_int8,int16x8,weight_only_int8,weight_only_int4,dynamic_int4 --onnx-quantization float32,dynamic_int8,int8

demo: install
	$(PY) -m keras_vit.train $(DEMO_TRAIN_FLAGS) --output-dir runs/demo --overwrite
	$(PY) -m export runs/demo/model.keras $(DEMO_EXPORT_FLAGS) --output-dir runs/demo/export --web runs/demo/web --overwrite

# Issue 42: every test module of the TensorFlow pass, and the model side's tests again under JAX and PyTorch (issue 15;
# tests/run_suite.py BACKEND_TESTS), in shards of a few minutes, two at a time, each in a fresh process; it ends
# with the counts, the wall time, the peak memory and the budget check (no module over 5 min, at most 12 GB).
test: install
	$(PY) -m tests.run_suite

# The same run, failing also when the budget breaks (a module over 5 minutes, a peak over 12 GB). Times depend on
# the machine: make test prints a breach, this target makes it an error (docs/testing.md).
test-budget: install
	$(PY) -m tests.run_suite --enforce-budget

# The backend runs alone (quick loop): make test-backends
test-backends: install
	$(PY) -m tests.run_suite --passes jax,torch

test-quick: install
	$(PY) -m tests.run_suite --passes tensorflow -- -m "not slow"

bench: install
	$(PY) -m benchmarks.run --update-results

clean:
	rm -rf runs .pytest_cache
