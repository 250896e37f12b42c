from __future__ import annotations

import sys

from .cli import console

sys.exit(console())
