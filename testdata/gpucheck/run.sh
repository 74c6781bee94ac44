#!/bin/sh
# The device check: PYTHON (default python3) must have numpy, and torch and
# cuda-python (tritonclient too, for its cuda_shared_memory) for every
# check to run. One line per check; exit status 1 if any failed.
cd "$(dirname "$0")" || exit 1
exec timeout 480 "${PYTHON:-python3}" gpu_check.py --python "${PYTHON:-$(command -v python3)}" "$@"
