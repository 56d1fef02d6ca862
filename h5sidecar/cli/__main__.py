"""``python -m h5sidecar.cli ...``: the ``h5sidecar`` command."""

import sys

from h5sidecar.cli import main

if __name__ == "__main__":  # imported (e.g. by a walk over the package's modules), it runs nothing
    sys.exit(main())
