"""jobwire-shared's one build step beyond pyproject.toml: jobwire.v1 is compiled from protos/."""

from __future__ import annotations

import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # the build backend runs this file without its folder on sys.path
from build_protos import compile_protos  # noqa: E402


class BuildPyWithProtos(build_py):
    def run(self) -> None:
        super().run()
        # An editable install imports this folder itself (its .pth names it), so the code goes
        # here; a wheel takes it from the build folder.
        compile_protos(HERE if self.editable_mode else Path(self.build_lib))


setup(cmdclass={"build_py": BuildPyWithProtos})
