#!/usr/bin/env bash
# The unit tier with the declared minimum versions (.ci/min-versions.txt: every floor of
# pyproject.toml pinned exactly; torch is CI's 2.13.0 CPU build): a floor that no longer holds
# fails here. scripts/test.sh runs it before the full suite (what CI runs); by hand:
#   bash scripts/min_versions.sh                   # the unit tier, slow tests left out
#   bash scripts/min_versions.sh -k inference      # extra arguments go to pytest
# The venv ($MIN_VENV, default .venv-min) is made afresh whenever the constraints or
# pyproject.toml change, and reused otherwise (a stamp in it records what it was built from).
# torch comes from $TORCH_INDEX_URL when set, as in scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${MIN_VENV:-.venv-min}
stamp=$venv/.synthlab-min-versions
hash="$(cat .ci/min-versions.txt pyproject.toml | sha256sum | cut -d' ' -f1)"
if ! grep -qx "$hash" "$stamp" 2>/dev/null; then
    rm -rf "$venv"
    "${PYTHON:-python3}" -m venv "$venv"
    torch="$(grep -E '^torch==' .ci/min-versions.txt)"
    "$venv/bin/python" -m pip install -q ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "$torch"
    # synthlab with its declared dependencies, each at its floor; the unit tier's pytest and scipy
    "$venv/bin/python" -m pip install -q -c .ci/min-versions.txt -e . pytest pytest-xdist scipy
    echo "$hash" > "$stamp"
fi
"$venv/bin/python" -m pip freeze --exclude-editable | grep -iE "^($(grep -oE '^[A-Za-z0-9_.-]+==' .ci/min-versions.txt \
    | tr -d '=' | paste -sd'|'))==" | paste -sd' ' | sed 's/^/minimum versions: /'
# the unit tier, and the in-process files that moved to the integration tier for their time
# (torch.func.vmap over seeds; a user's task trained through the CLI's main; the generators'
# mixes; the committed report), so that the floors still cover what they covered when these
# were in the unit tier
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider -n "${SYNTHLAB_TEST_WORKERS:-2}" --dist loadfile \
    -m "not slow" tests/unit \
    tests/integration/test_vmap_seeds.py tests/integration/test_toy_task.py \
    tests/integration/test_generator_mixes.py tests/integration/test_results_report.py "$@"
