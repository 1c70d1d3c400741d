"""Persistence (``bir.io``, Fluid's ``fluid.io``): variables and inference models saved and loaded.

:mod:`blockir.io.persistence` holds the code; :mod:`blockir.io.paddle` reads and writes PaddlePaddle's legacy
model files (``.pdmodel``, ``.pdiparams``, one file per variable) and :mod:`blockir.io.onnx` ONNX models
(``.onnx``), which ``load_inference_model`` and ``save_inference_model(format=...)`` use.
"""

from blockir.io import onnx, paddle
from blockir.io.persistence import (
    FLUID_MODEL_FILE,
    MANIFEST_FILE,
    MAX_INDEX_BYTES,
    MODEL_FORMATS,
    PARAMS_DIR,
    PROGRAM_FILE,
    is_parameter,
    is_persistable,
    load_array,
    load_inference_model,
    load_params,
    load_persistables,
    load_vars,
    model_format,
    read_paddle_params,
    save_inference_model,
    save_params,
    save_persistables,
    save_vars,
)

__all__ = [
    "FLUID_MODEL_FILE",
    "MANIFEST_FILE",
    "MAX_INDEX_BYTES",
    "MODEL_FORMATS",
    "PARAMS_DIR",
    "PROGRAM_FILE",
    "is_parameter",
    "is_persistable",
    "load_array",
    "load_inference_model",
    "load_params",
    "load_persistables",
    "load_vars",
    "model_format",
    "onnx",
    "paddle",
    "read_paddle_params",
    "save_inference_model",
    "save_params",
    "save_persistables",
    "save_vars",
]
