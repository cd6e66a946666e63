# Two commands: `make lab` (open the course) and `make test` (lint, unit tests, every notebook; CI runs the other *-test targets too).
# Both create .venv on first use and reinstall only when the pins change.
# `make lab` serves workspace/ (the learner's copies of the student versions, ignored by git);
# `make lab-instructor` serves notebooks/ (solutions and hidden tests).

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PORT   ?= 8888
WORKSPACE ?= workspace
NOTEBOOK_DIR ?= notebooks
# `make test` runs pytest in this many processes (pytest-xdist; a notebook's cells stay together).
TEST_JOBS ?= 2
# Jupyter refuses to run as root unless told; containers and CI machines often are root.
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root)

.PHONY: lab lab-instructor workspace test exercises-test test-fast grading-test grading-test-cgroup2 grading-test-cgroup2-autograde colab-test browser-test chromium site install lint release grade-benchmark coordinator-benchmark capstone-benchmark gpu-check set-repo-url clean

# Two distributions, both editable: course_utils (this folder's pyproject.toml, what notebooks import)
# and the grader (grading/pyproject.toml, the `course` command).
$(STAMP): pyproject.toml grading/pyproject.toml requirements.lock
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.lock
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e . -e ./grading
	@touch $(STAMP)

install: $(STAMP)  ## create .venv and install the pinned environment

workspace: $(STAMP)  ## create or update workspace/ from grading/course/release/ (never overwrites your edits)
	$(BIN)/python -m grading.lab.workspace --into $(WORKSPACE)

lab: workspace  ## open JupyterLab on workspace/, the learner's lab (no instructor tools; Validate runs `course validate`)
	PATH="$(abspath $(BIN)):$$PATH" JUPYTER_CONFIG_PATH="$(CURDIR)/jupyter/learner$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}" \
	  $(BIN)/jupyter lab --notebook-dir=$(WORKSPACE) --port=$(PORT) $(ROOT_FLAG) $(LAB_ARGS)

# jupyter/instructor: the formgrader renders submissions sanitized (grading/README.md, "Manual grading").
lab-instructor: $(STAMP)  ## open JupyterLab on notebooks/ (solutions, hidden tests) with every nbgrader tool
	PATH="$(abspath $(BIN)):$$PATH" JUPYTER_CONFIG_PATH="$(CURDIR)/jupyter/instructor$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}" \
	  $(BIN)/jupyter lab --notebook-dir=$(NOTEBOOK_DIR) --port=$(PORT) $(ROOT_FLAG) $(LAB_ARGS)

test: $(STAMP)  ## lint, check notebooks, run unit tests and every notebook (small sizes)
	$(BIN)/ruff check course_utils grading tools tests notebooks docs
	$(BIN)/mypy
	$(BIN)/nbstripout --verify notebooks/*.ipynb
	COURSE_QUICK=1 $(BIN)/pytest $(if $(filter-out 1,$(TEST_JOBS)),-n $(TEST_JOBS) --dist loadfile) -m "not slow_grading and not exercises" $(PYTEST_ARGS)

# `make exercises-test`: the exercises as a learner meets them (README.md, Testing): every notebook once more with its
# solutions removed, and every wrong answer of tests/wrong_answers/. After changing an exercise, its tests or a demo.
exercises-test: $(STAMP)  ## each notebook without its solutions (test cells fail, demos run) and every plausible wrong answer
	COURSE_QUICK=1 $(BIN)/pytest $(if $(filter-out 1,$(TEST_JOBS)),-n $(TEST_JOBS) --dist loadfile) -m exercises tests/notebooks $(PYTEST_ARGS)

# `make test-fast`: what to run after changing a module (README.md, Testing). The unit tests only: the doctests
# and tests/course_utils, tests/grading, tests/tools, tests/project; no notebooks, no tests/grading_end_to_end,
# nothing marked slow_grading or slow (a unit test that starts kernels or servers for seconds).
FAST_TESTS := course_utils grading tools/gpu_check.py tests/course_utils tests/grading tests/tools tests/project
test-fast: lint  ## ruff, mypy and the unit tests (no notebooks, no end-to-end grading): under a minute on 2 quiet cores
	COURSE_QUICK=1 $(BIN)/pytest $(if $(filter-out 1,$(TEST_JOBS)),-n $(TEST_JOBS) --dist loadfile) -m "not slow_grading and not slow" $(FAST_TESTS) $(PYTEST_ARGS)

grading-test: $(STAMP)  ## the slow grading tests: notebook 12's exploit corpus, a Dask cluster, a PostgreSQL gradebook, nbgrader fidelity
	COURSE_QUICK=1 $(BIN)/pytest $(if $(filter-out 1,$(TEST_JOBS)),-n $(TEST_JOBS) --dist loadfile) -m slow_grading $(PYTEST_ARGS)

# `make grading-test-cgroup2`: tests/cgroup2 in a qemu machine whose kernel mounts only cgroup v2 (tools/cgroup2_vm.py:
# Debian's qemu-system-x86, linux-image-amd64 and busybox-static, as root). Its CPU is emulated, so pytest there skips
# the addopts, nbval and the root conftest.py: what they import takes a minute or more there.
grading-test-cgroup2: $(STAMP)  ## the cgroup v2 protections in a virtual machine whose kernel mounts only cgroup v2 (qemu, software emulation; minutes)
	$(BIN)/python tools/cgroup2_vm.py $(CGROUP2_VM_ARGS) -- $(BIN)/python -m pytest -o addopts= -p no:nbval -p no:cacheprovider \
	  --confcutdir=tests/cgroup2 -q tests/cgroup2 $(PYTEST_ARGS)

# `make grading-test-cgroup2-autograde`: `course autograde` end to end in that machine (its tests run on this machine's
# layout in `make grading-test` too): a memory budget past which a kernel's children fail only their own job, and the
# CPU attacks of notebook 12 with plain-Python stand-ins; and the jail's limits and namespaces (not its torch test).
# Slower: every `course autograde` starts workers and kernels at emulated speed.
grading-test-cgroup2-autograde: $(STAMP)  ## `course autograde` in the cgroup v2 virtual machine: memory budget, collusion, sabotage (emulated; about 15 minutes)
	$(BIN)/python tools/cgroup2_vm.py --timeout 5400 $(CGROUP2_VM_ARGS) -- $(BIN)/python -m pytest -o addopts= -p no:nbval \
	  -p no:cacheprovider -q -s --durations=0 -k "not torch_compile" tests/grading/sandbox/test_protections.py \
	  tests/grading_end_to_end/test_memory_budget.py tests/grading_end_to_end/test_cpu_attacks_plain.py $(PYTEST_ARGS)

colab-test: $(STAMP)  ## the Colab path: a fresh venv with only what Colab ships, each student notebook's setup cell, then the notebook
	COURSE_COLAB_TEST=1 $(BIN)/pytest tests/notebooks/test_colab.py $(PYTEST_ARGS)

# The site's notebooks run at build time on this machine's CPU, at the test suite's small sizes
# unless SITE_QUICK=0; MyST-NB caches the runs in build/site/jupyter_cache.
SITE_QUICK ?= 1
site: $(STAMP)  ## the course site in build/site/html (Sphinx + MyST-NB, offline): course map, one page per notebook, instructor guide
	PATH="$(abspath $(BIN)):$$PATH" COURSE_QUICK=$(SITE_QUICK) $(BIN)/python docs/build_site.py --out build/site $(SITE_ARGS)

# `make browser-test` drives Debian's chromium with Playwright; `make chromium` installs it when missing.
BROWSER_SHOTS ?= build/browser-test
browser-test: chromium site  ## every notebook in JupyterLab in headless Chromium (learner's and solved), the site, and the formgrader on a hostile submission; screenshots in build/browser-test/
	COURSE_BROWSER_TEST=1 BROWSER_TEST_SHOTS="$(abspath $(BROWSER_SHOTS))" $(BIN)/pytest tests/notebooks/test_browser.py tests/grading_end_to_end/test_browser_formgrader.py $(PYTEST_ARGS); \
	  status=$$?; echo "browser-test: screenshots in $(BROWSER_SHOTS)/ (summary.txt: seconds per notebook)"; exit $$status

chromium:  ## Debian's chromium on PATH for the browser test: installed with apt-get (as root) when missing
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "chromium: not on PATH; installing Debian's chromium with apt-get"; \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; \
	  else \
	    echo "chromium: not on PATH, and this make cannot install it (apt-get needs root on Debian or Ubuntu)."; \
	    echo "Install your system's chromium package (Debian: sudo apt-get install chromium), then run make browser-test again."; \
	    echo "(The test drives the system browser; it never downloads one of its own.)"; \
	    exit 1; \
	  fi; }
	@command -v chromium >/dev/null 2>&1 || { echo "chromium: apt-get finished but there is still no chromium on PATH"; exit 1; }

lint: $(STAMP)  ## ruff and mypy (both configured in pyproject.toml)
	$(BIN)/ruff check course_utils grading tools tests notebooks docs
	$(BIN)/mypy

release: $(STAMP)  ## regenerate the student versions in grading/course/release/ from notebooks/
	$(BIN)/course release

grade-benchmark: $(STAMP)  ## plain nbgrader vs `course autograde --jobs 2` on a class of 20; prints the ratio (BENCH_ARGS=--cluster: --jobs 2 vs a local Dask cluster)
	$(BIN)/python tools/grade_benchmark.py $(BENCH_ARGS)

coordinator-benchmark: $(STAMP)  ## a cluster's coordinator: CPU s per notebook for 2,000 notebooks, SQLite and PostgreSQL (BENCH_ARGS="--versions before,after": also the pre-issue-24 one, about 2 hours more)
	$(BIN)/python tools/coordinator_benchmark.py $(BENCH_ARGS)

capstone-benchmark: $(STAMP)  ## notebook 12's measured grade for four answers, graded 20 times: points and speedup spread (BENCH_ARGS="--load 2": beside outside CPU load)
	$(BIN)/python tools/capstone_benchmark.py $(BENCH_ARGS)

# The GPU check uses the Python at hand (a GPU machine's own CUDA build of torch), not .venv.
GPU_PYTHON ?= python3
gpu-check:  ## every notebook top to bottom at GPU sizes, one at a time, saying if another process uses the GPU; results in gpu-check/ (GPU_CHECK_ARGS=--keep: also keep the run in notebooks/gpu-runs/)
	$(GPU_PYTHON) tools/gpu_check.py $(GPU_CHECK_ARGS)

set-repo-url: $(STAMP)  ## for a fork: make set-repo-url URL=https://github.com/OWNER/NAME (rewrites every link), then commit
	@test -n "$(URL)" || { echo "usage: make set-repo-url URL=https://github.com/OWNER/NAME"; exit 2; }
	$(BIN)/python tools/repo_url.py "$(URL)"

clean:  ## remove the virtual environment
	rm -rf $(VENV)
