# The two commands of README "Install and run": each installs what is missing into .venv
# (torch only if the venv has none), then runs.
#
#   make demo    the main job: synthlab sweep flipflop --pe cope,rope
#                (make demo ARGS="--preset smoke --out /tmp/synthlab-demo": a check in seconds)
#   make test    the full test suite, slow tests included: what CI runs (.ci/run)
#                (make test ARGS="-m 'not slow'": the quick part)
#
# The steps live in scripts/ (setup.sh, demo.sh, test.sh), which run the same without make.

ARGS ?=

.PHONY: help demo test setup

help:
	@sed -n 's/^#   //p' Makefile

demo:
	bash scripts/demo.sh $(ARGS)

test:
	bash scripts/test.sh $(ARGS)

# only the install (synthlab and torch), nothing run
setup:
	bash scripts/setup.sh
