#!/usr/bin/env bash
# The full test suite from nothing (`make test`, what CI runs through .ci/run): install what is
# missing with the test and docs extras (scripts/setup.sh), lint and format check (ruff), type
# check (mypy; both configured in pyproject.toml), build the docs site with warnings as errors
# (mkdocs.yml), the unit tier with the declared minimum versions (scripts/min_versions.sh), start the local
# PostgreSQL server for the distributed-sweep test and the one-node SLURM cluster for the SLURM
# launcher's tests when they can be had, then README's test command (slow tests included, in two
# processes; the 30 slowest are listed).
# Extra arguments go to pytest, e.g. scripts/test.sh -m "not slow"; with arguments the
# minimum-versions step is left out (a quick run while iterating) unless SYNTHLAB_MIN_VERSIONS=1;
# SYNTHLAB_MIN_VERSIONS=0 leaves it out of a full run.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh test,docs,postgres,slurm
. .venv/bin/activate

ruff check .
ruff format --check .
# the type check ([tool.mypy] in pyproject.toml) and the docs site, warnings as errors (mkdocs.yml)
mypy
NO_MKDOCS_2_WARNING=1 mkdocs build --strict --quiet  # without the theme's end-of-life banner

if [[ "${SYNTHLAB_MIN_VERSIONS:-$(( $# == 0 ))}" == 1 ]]; then
    bash scripts/min_versions.sh
fi

# a local PostgreSQL server for the distributed-sweep test (skipped with a reason if it cannot
# start); sourced, it exports SYNTHLAB_PG_URL and stops a server it started when this shell exits
if [[ -x .ci/postgres.sh ]]; then
    source .ci/postgres.sh || echo "postgres setup failed; the PostgreSQL test will be skipped"
fi

# a one-node SLURM cluster (slurmctld + slurmd + munged) for tests/system/test_slurm.py
# (skipped with a reason if it cannot start); sourced, it exports SLURM_CONF and stops a cluster
# it started when this shell exits
if [[ -x .ci/slurm.sh ]]; then
    source .ci/slurm.sh || echo "slurm setup failed; the SLURM launcher's cluster tests will be skipped"
fi

# two pytest processes (pytest-xdist), each test file whole in one of them: the system tier mostly
# waits on the child processes it starts; SYNTHLAB_TEST_WORKERS=0 runs everything in this process
python -m pytest -q -n "${SYNTHLAB_TEST_WORKERS:-2}" --dist loadfile --durations=30 "$@"
