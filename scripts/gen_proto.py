"""Regenerate blockir/proto/*_pb2.py(i) from proto/blockir/*.proto with grpcio-tools.

Usage: python scripts/gen_proto.py [OUT_DIR]   (default: the package's blockir/proto)
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "proto"


def generate(out_dir: Path) -> list[Path]:
    """Compile every .proto under proto/blockir into out_dir; return the files written."""
    from grpc_tools import protoc  # dev extra

    out_dir.mkdir(parents=True, exist_ok=True)
    sources = sorted(str(p.relative_to(PROTO_DIR)) for p in (PROTO_DIR / "blockir").glob("*.proto"))
    args = ["protoc", f"-I{PROTO_DIR}", f"--python_out={out_dir}", f"--pyi_out={out_dir}", *sources]
    if protoc.main(args) != 0:
        raise SystemExit(f"protoc failed: {' '.join(args)}")
    # protoc mirrors the proto package path (blockir/...); flatten into out_dir.
    written = []
    for f in sorted((out_dir / "blockir").glob("*_pb2.py*")):
        target = out_dir / f.name
        f.replace(target)
        written.append(target)
    (out_dir / "blockir").rmdir()
    return written


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "blockir" / "proto"
    for path in generate(out):
        print(path)
