import sys

from obsbox.cli import main

sys.exit(main())
