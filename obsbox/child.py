"""The command line that starts obsbox itself in a child process.

``python -m obsbox`` puts the working directory first on ``sys.path``, so a folder that holds a
directory named ``obsbox`` (a checkout, a project of the same name) would be imported instead of the
installed package. ``-P`` (Python 3.11+) leaves the working directory out and keeps everything else:
the virtual environment, ``PYTHONPATH``, user site-packages. Before 3.11, a ``-c`` stub drops that
first entry and runs the package's ``__main__`` the way ``-m`` does.
"""

from __future__ import annotations

import sys

_WITHOUT_CWD = "import runpy, sys; del sys.path[0]; runpy.run_module('obsbox', run_name='__main__', alter_sys=True)"


def obsbox_command(*args: str, safe_path_flag: bool = sys.version_info >= (3, 11)) -> list[str]:
    """``[python, ..., *args]`` running the installed obsbox, wherever the child's working directory is."""
    if safe_path_flag:
        return [sys.executable, "-P", "-m", "obsbox", *args]
    return [sys.executable, "-c", _WITHOUT_CWD, *args]
