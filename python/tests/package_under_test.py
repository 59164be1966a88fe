# SPDX-License-Identifier: Apache-2.0
"""Which tpscope the tests import: this checkout's python/tpscope by default (CTest points
TPSCOPE_LIBRARY at the build's library), or, with TPSCOPE_TEST_INSTALLED=1, the installed package as a
user has it (scripts/test's stage for the wheel, run from outside the tree)."""

import os
import sys

CHECKOUT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
INSTALLED = os.environ.get("TPSCOPE_TEST_INSTALLED") == "1"


def use():
    """Puts the checkout first on sys.path unless the installed package is under test."""
    if not INSTALLED and CHECKOUT not in sys.path:
        sys.path.insert(0, CHECKOUT)
