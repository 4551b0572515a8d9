#!/usr/bin/env bash
# Install what is missing into .venv: the one definition of the install steps (README "Install";
# `make demo`, `make test` and .ci/run all come here).
#
#   scripts/setup.sh                    synthlab itself
#   scripts/setup.sh test,postgres      with extras (pyproject.toml's optional dependencies)
#
# .venv is created with $PYTHON (default python3) when it is missing. torch is installed only
# when the venv cannot import one, so a build already there (a CUDA build you chose) is kept:
# $TORCH (default torch==2.13.0, the version README names; pip must find its CPU build: a plain
# PyPI torch on Linux is a multi-GB CUDA build, so set TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# where pip reaches the internet). Running it again reinstalls nothing: synthlab is an editable
# install (code changes need no reinstall), redone only when pyproject.toml or the extras asked
# for change (a stamp in .venv records what was installed).
set -euo pipefail
cd "$(dirname "$0")/.."

extras="${1:-}"
if [[ ! -x .venv/bin/python ]]; then
    "${PYTHON:-python3}" -m venv .venv
fi
if ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
    .venv/bin/python -m pip install -q ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "${TORCH:-torch==2.13.0}"
fi
# one line per install: "<sha256 of pyproject.toml> <extras>"; any install of this pyproject.toml
# has synthlab itself, and one with extras is needed again only for other extras
stamp=.venv/.synthlab-installed
hash="$(.venv/bin/python -c 'import hashlib; print(hashlib.sha256(open("pyproject.toml", "rb").read()).hexdigest())')"
if [[ -n "$extras" ]]; then done_line="^$hash $extras\$"; else done_line="^$hash "; fi
if [[ ! -x .venv/bin/synthlab ]] || ! grep -q "$done_line" "$stamp" 2>/dev/null; then
    # the distribution was named synthlab before synthlab-pe: an editable install of this
    # checkout under the old name would keep a second entry for the same package
    if .venv/bin/python -I - <<'PY'
import json, pathlib, sys
from importlib.metadata import PackageNotFoundError, distribution
try:
    url = json.loads(distribution("synthlab").read_text("direct_url.json") or "{}")
except PackageNotFoundError:
    sys.exit(1)
here = pathlib.Path.cwd().resolve().as_uri()
sys.exit(0 if url.get("dir_info", {}).get("editable") and url.get("url") == here else 1)
PY
    then
        .venv/bin/python -m pip uninstall -q -y synthlab
    fi
    .venv/bin/python -m pip install -q -e ".${extras:+[$extras]}"
    echo "$hash ${extras:-none}" >> "$stamp"
fi
