#!/bin/sh
# test-run-on-device-fake.sh - tests/gpu/run-on-device.sh, the script that
# validates GPU sharing on a real GPU, run whole against the fake driver so
# that it still works when the next GPU is lent: every step must pass.
set -u
exec "$(dirname "$0")/run-on-device.sh" --fake
