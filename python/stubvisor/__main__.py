"""``python -m stubvisor``: the Python stub process (fd 3 = the region)."""

import sys

from stubvisor.host import main

sys.exit(main())
