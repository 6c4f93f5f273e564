# vla_ros in pip mode (no ROS install needed): `make demo` runs the simulated demo, `make test` the tests.
# Both set themselves up on a fresh Debian/Ubuntu machine. In a ROS 2 workspace use colcon instead (README).

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# The CPU build of torch is the default. Where pip's indexes serve only PyPI's Linux torch wheel (a CUDA build
# of several GB), set TORCH_INDEX to PyTorch's CPU wheel index and torch comes from there. GPU=1 (the GPU host
# of a two-computer set-up, docs/two_computers.md) installs requirements-gpu.txt instead: torch's CUDA build
# and onnxruntime-gpu.
GPU ?= 0
TORCH_INDEX ?=
TORCH_PIN := $(shell grep -E '^torch==' requirements.txt)
ifeq ($(GPU),1)
STAMP := $(VENV)/.installed-gpu
else
STAMP := $(VENV)/.installed
endif
# Headless OpenGL for MuJoCo's renderer (EGL on Mesa's software rasteriser; OSMesa as a fallback).
APT_PACKAGES := libegl1 libegl-mesa0 libgl1-mesa-dri libopengl0 libosmesa6

# DDS stays on this machine: discovery on loopback only (ROS_LOCALHOST_ONLY for Humble), own domain.
# Multi-machine users widen ROS_AUTOMATIC_DISCOVERY_RANGE themselves (README).
export ROS_AUTOMATIC_DISCOVERY_RANGE := LOCALHOST
export ROS_LOCALHOST_ONLY := 1
export HF_HUB_OFFLINE := 1
export PYTHONUNBUFFERED := 1
export MUJOCO_GL ?= egl

.PHONY: setup test lint format demo demo-two-hosts bench params model clean

setup: $(STAMP)

$(STAMP): requirements.txt requirements-gpu.txt setup.py package.xml
	@missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  else echo "Headless rendering needs: sudo apt-get install -y $$missing" >&2; fi; \
	fi
	@$(PYTHON) -m venv $(VENV) 2>/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv && $(PYTHON) -m venv $(VENV); \
	  else echo "Needs: sudo apt-get install -y python3-venv" >&2; exit 1; fi; }
	$(PY) -m pip install -q --upgrade pip
ifeq ($(GPU),1)
	$(PY) -m pip uninstall -y -q torch onnxruntime 2>/dev/null || true  # CPU builds; onnxruntime-gpu replaces onnxruntime
	$(PY) -m pip install -q -r requirements-gpu.txt
	grep -v -E '^(torch|onnxruntime)==' requirements.txt > $(VENV)/requirements-common.txt
	$(PY) -m pip install -q -r $(VENV)/requirements-common.txt
	rm -f $(VENV)/.installed
else
	if [ -f $(VENV)/.installed-gpu ]; then $(PY) -m pip uninstall -y -q torch onnxruntime-gpu; rm -f $(VENV)/.installed-gpu; fi
	if [ -n "$(TORCH_INDEX)" ]; then $(PY) -m pip install -q --no-deps --index-url "$(TORCH_INDEX)" "$(TORCH_PIN)"; fi
	$(PY) -m pip install -q -r requirements.txt
endif
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

# Tests in random order, module by module (each module's launched graph starts once); the seed is printed:
# `make test RANDOM_ORDER_SEED=N` repeats an order, PYTEST_ARGS adds pytest options to both passes (e.g. -k sim).
# Two passes: first the tests marked `unit` (no ROS node, no DDS, no wall-clock timing) on TEST_WORKERS
# pytest-xdist workers, a module per worker at a time (TEST_WORKERS=0: in one process); then the rest one at a
# time, each launched graph alone on the machine as its timing needs. Python's bytecode caches go to a
# temporary folder and pytest keeps no cache, so a run writes nothing into the working tree. A pass that
# collects no test is fine when the other one ran some (a -k for one kind); both empty (pytest's exit code 5
# twice) fails: nothing was tested.
ifndef RANDOM_ORDER_SEED
RANDOM_ORDER_SEED := $(shell od -An -N2 -tu2 /dev/urandom | tr -d ' ')
endif
PYTEST_ARGS ?=
TEST_WORKERS ?= 2
test: setup
	@echo "make test: random order seed $(RANDOM_ORDER_SEED) (again: make test RANDOM_ORDER_SEED=$(RANDOM_ORDER_SEED))"
	@export ROS_DOMAIN_ID=$${ROS_DOMAIN_ID:-61} PYTHONPYCACHEPREFIX=$${TMPDIR:-/tmp}/vla_ros-pycache-$$(id -u); \
	  pytest="$(PY) -m pytest -q -p no:cacheprovider -p random_order --random-order-seed=$(RANDOM_ORDER_SEED) --durations=15"; \
	  echo "make test: pass 1 of 2, the unit tests on $(TEST_WORKERS) workers"; \
	  $$pytest -n $(TEST_WORKERS) --dist loadfile -m unit test $(PYTEST_ARGS); unit=$$?; \
	  echo "make test: pass 2 of 2, the tests of processes, graphs and timing, one at a time"; \
	  $$pytest -m "not unit" test $(PYTEST_ARGS); rest=$$?; \
	  echo "make test: unit tests exit $$unit, the rest exit $$rest (0 passed, 1 failed, 5 none collected)"; \
	  if [ $$unit -eq 5 ] && [ $$rest -eq 5 ]; then echo "make test: pytest collected no tests: nothing was tested" >&2; exit 5; fi; \
	  for code in $$unit $$rest; do if [ $$code -ne 0 ] && [ $$code -ne 5 ]; then exit $$code; fi; done

# ruff (lint and format check) with the configuration in .ci/ruff.toml; `make format` rewrites the files.
RUFF := $(VENV)/bin/ruff
RUFF_PIN := ruff==0.17.6
$(RUFF): $(STAMP)
	$(PY) -m pip install -q $(RUFF_PIN)
lint: $(RUFF)
	$(RUFF) check --config .ci/ruff.toml .
	$(RUFF) format --config .ci/ruff.toml --check .
format: $(RUFF)
	$(RUFF) check --config .ci/ruff.toml --fix .
	$(RUFF) format --config .ci/ruff.toml .

demo: setup
	ROS_DOMAIN_ID=$${ROS_DOMAIN_ID:-62} $(VENV)/bin/vla-ros demo

# The demo across two simulated computers (network namespaces joined by a veth; needs root): the policy in
# namespace gpu_host, sim + safety filter + controller in namespace robot, then the same episode on one host.
# Discovery is widened to SUBNET inside the namespaces only; the variables above keep everything else local.
demo-two-hosts: setup
	ROS_DOMAIN_ID=$${ROS_DOMAIN_ID:-64} $(VENV)/bin/vla-ros demo-two-hosts

bench: setup
	for part in sim tokens policy safety controller faults; do \
	  ROS_DOMAIN_ID=$${ROS_DOMAIN_ID:-63} $(VENV)/bin/vla-ros bench $$part --json || exit 1; done

# Train the cup policy as the README measures it: 360 expert episodes (two collectors, one per core), then two
# runs of the same recipe side by side (one core each, training seeds 0 and 1; 1,000 steps on rendered views,
# then 3,600 steps by step count: about 25-35 min, repeatable), each stopped at 37 min if the machine is busier
# (its report then says how far it got; seed 1 writes to runs/vla_cups_seed1.log). Runs of one recipe differ
# widely in closed-loop success, so does one run from checkpoint to checkpoint late in its schedule, and the
# validation loss does not say which weights are better: each run also saves its weights at steps 3,000 and
# 3,300, and `vla-ros select` judges the six candidates on selection episodes of their own (all on 50, the best
# two on 100) and keeps the best; the held-out evaluation comes last. About 41 min on an idle 2-core Intel Xeon.
# The rate is 5e-4, half `vla-ros train`'s default: its candidates are better in both pairs measured, and
# models/vla_cups holds this target's kept weights from demonstrations recorded with the earlier 2 cm finger
# pads (seeds 0 and 1; docs/training.md, "`make model`" and "Wider finger pads").
MODEL_RECIPE = --data runs/demos --task cups --steps 3600 --vision-warmup-steps 1000 --phrasing-swap 0.5 --lr 5e-4 \
  --checkpoints 3000,3300 --minutes 37 --threads 1
model: setup
	$(VENV)/bin/vla-ros collect --episodes 180 --seed-start 0 --out runs/demos/a & pid=$$!; \
	$(VENV)/bin/vla-ros collect --episodes 180 --seed-start 180 --out runs/demos/b && wait $$pid
	mkdir -p runs; $(VENV)/bin/vla-ros train $(MODEL_RECIPE) --seed 1 --out runs/vla_cups_seed1 > runs/vla_cups_seed1.log 2>&1 & pid=$$!; \
	$(VENV)/bin/vla-ros train $(MODEL_RECIPE) --seed 0 --out runs/vla_cups_seed0 || { kill $$pid; exit 1; }; \
	wait $$pid || { echo "training seed 1 failed: runs/vla_cups_seed1.log"; exit 1; }
	$(VENV)/bin/vla-ros select --runs runs/vla_cups_seed0 runs/vla_cups_seed1 --checkpoints --out runs/vla_cups \
	  --episodes 100 --screen-episodes 50 --finalists 2 --workers 2
	$(VENV)/bin/vla-ros eval --model runs/vla_cups --episodes 100 --seed 0 --workers 2 --json

params: setup
	$(VENV)/bin/vla-ros params

clean:
	rm -rf $(VENV) build install log *.egg-info
