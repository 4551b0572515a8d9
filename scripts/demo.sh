#!/usr/bin/env bash
# The main job from nothing (`make demo`): install what is missing (scripts/setup.sh), then run
# README's main command, `synthlab sweep flipflop --pe cope,rope`. Extra arguments go to the
# sweep, e.g. a check in seconds: scripts/demo.sh --preset smoke --out /tmp/synthlab-demo
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
exec .venv/bin/synthlab sweep flipflop --pe cope,rope "$@"
