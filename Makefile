# Shortcuts for the scripts in scripts/ (which a fresh machine can run without make).
.PHONY: build run test
build:
	bash scripts/build.sh
run:
	bash scripts/run.sh
test:
	bash scripts/test.sh
