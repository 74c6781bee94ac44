"""``python -m stubvisor``: the Python stub process (fd 3 = the region)."""

import sys

from stubvisor.host import main

# The supervisor adds "triton_python_backend_stub <instance>" to the command
# line for ps and pgrep; the model sees no arguments, as in Triton's stub.
del sys.argv[1:]

sys.exit(main())
