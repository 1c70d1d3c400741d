"""onnxruntime, the peer of blockir's ONNX tests: a dev dependency (never imported by ``blockir/``), ``None`` where
it is not installed (a test that needs it calls ``pytest.importorskip("onnxruntime")``)."""

from __future__ import annotations

from typing import Any

try:
    import onnxruntime
except ImportError:  # the dev extra is not installed
    onnxruntime = None


def session(model: Any) -> Any:
    """An onnxruntime session of ``model`` (a ``ModelProto`` or a path) on one thread, its warnings off."""
    assert onnxruntime is not None, "onnxruntime is not installed (it comes with blockir's dev extra)"
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.log_severity_level = 3
    source = model.SerializeToString() if hasattr(model, "SerializeToString") else str(model)
    return onnxruntime.InferenceSession(source, options, providers=["CPUExecutionProvider"])
