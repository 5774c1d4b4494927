import sys

from specsteer.cli import main

sys.exit(main())
