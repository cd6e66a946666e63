# Two commands: `make lab` (open the course) and `make test` (run every check).
# Both create .venv on first use and reinstall only when the pins change.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PORT   ?= 8888
# Jupyter refuses to run as root unless told; containers and CI machines often are root.
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root)

.PHONY: lab test install lint release grade-benchmark gpu-check clean

$(STAMP): pyproject.toml requirements.lock
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.lock
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	@touch $(STAMP)

install: $(STAMP)  ## create .venv and install the pinned environment

lab: $(STAMP)  ## open JupyterLab on notebooks/
	$(BIN)/jupyter lab --notebook-dir=notebooks --port=$(PORT) $(ROOT_FLAG) $(LAB_ARGS)

test: $(STAMP)  ## lint, check notebooks, run unit tests and every notebook (small sizes)
	$(BIN)/ruff check course_utils tests notebooks
	$(BIN)/nbstripout --verify notebooks/*.ipynb
	COURSE_QUICK=1 $(BIN)/pytest $(PYTEST_ARGS)

lint: $(STAMP)  ## ruff only
	$(BIN)/ruff check course_utils tests notebooks

release: $(STAMP)  ## regenerate the student versions in grading/release/ from notebooks/
	$(BIN)/course release

grade-benchmark: $(STAMP)  ## plain nbgrader vs `course autograde --jobs 2` on a class of 20; prints the ratio
	$(BIN)/python grading/benchmark.py $(BENCH_ARGS)

# The GPU check uses the Python at hand (a GPU machine's own CUDA build of torch), not .venv.
GPU_PYTHON ?= python3
gpu-check:  ## every notebook top to bottom at GPU sizes; executed notebooks and summary in gpu-check/
	$(GPU_PYTHON) tests/gpu_check.py $(GPU_CHECK_ARGS)

clean:  ## remove the virtual environment
	rm -rf $(VENV)
