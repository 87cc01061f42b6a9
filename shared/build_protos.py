"""Compiles protos/jobwire/v1/*.proto into jobwire/v1: messages, gRPC stubs and their typed .pyi.

The generated code is never committed. setup.py's build_py runs this for every wheel (into the
build folder) and editable install (into this folder); `make proto` runs it here after a .proto
changes (`python shared/build_protos.py`). `protos` beside this file is a link to the
repository's protos/, the one source; an sdist carries the files themselves (MANIFEST.in).
Needs grpcio-tools, mypy-protobuf (its protoc plugins on PATH) and googleapis-common-protos,
which holds google/rpc/status.proto (a per-item error of a batch call).
"""

from __future__ import annotations

import shutil
import sysconfig
from importlib.resources import files
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROTOS = HERE / "protos"
PLUGINS = ("protoc-gen-mypy", "protoc-gen-mypy_grpc")


def compile_protos(out: Path) -> list[Path]:
    """Writes jobwire/v1/*_pb2*.py and their .pyi under `out`, replacing any older ones; returns them."""
    from google.rpc import status_pb2
    from grpc_tools import protoc

    sources = sorted(str(p) for p in (PROTOS / "jobwire/v1").glob("*.proto"))
    if not sources:
        raise FileNotFoundError(f"no .proto files in {PROTOS / 'jobwire/v1'}")
    plugins = []
    for name in PLUGINS:
        # On PATH in a build environment; beside this interpreter in a virtualenv not activated.
        found = shutil.which(name) or shutil.which(name, path=sysconfig.get_path("scripts"))
        if found is None:
            raise FileNotFoundError(f"{name} is not on PATH: install mypy-protobuf")
        plugins.append(f"--plugin={name}={found}")
    generated = out / "jobwire/v1"
    generated.mkdir(parents=True, exist_ok=True)
    for old in generated.glob("*_pb2*.py*"):  # a removed .proto leaves no code behind
        old.unlink()
    args = [
        "grpc_tools.protoc",  # argv[0]
        f"-I{PROTOS}",
        f"-I{Path(status_pb2.__file__).parents[2]}",
        f"-I{files('grpc_tools') / '_proto'}",  # google/protobuf/*.proto
        *plugins,
        f"--python_out={out}",
        f"--grpc_python_out={out}",
        f"--mypy_out=quiet:{out}",
        f"--mypy_grpc_out=quiet:{out}",
        *sources,
    ]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc could not compile {PROTOS}: see its message above")
    return sorted(generated.glob("*_pb2*.py*"))


if __name__ == "__main__":
    compile_protos(HERE)
