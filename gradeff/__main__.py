"""``python -m gradeff``: the same command line as the ``gradeff`` console script."""

import sys

from gradeff.cli import main

if __name__ == "__main__":
    sys.exit(main())
