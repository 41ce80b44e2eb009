# tests/cli/module.mk - the command-line conventions every program follows.
SHELL_TESTS += tests/cli/test-help-version.sh
