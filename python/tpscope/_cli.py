# SPDX-License-Identifier: Apache-2.0
"""The ``tpscope`` command of the wheel: runs the tpscope binary the package carries (``bin/tpscope``),
with this process's arguments, in this process (exec), so its exit status and signals are the binary's."""

import os
import sys


def binary():
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "tpscope")


def main():
    exe = binary()
    if not os.access(exe, os.X_OK):
        sys.stderr.write("tpscope: this Python package has no tpscope binary (%s); install the wheel "
                         "(pip install tpscope) or run the one a build made (build/bin/tpscope)\n" % exe)
        return 1
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
