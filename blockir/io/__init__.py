"""Persistence (``bir.io``, Fluid's ``fluid.io``): variables and inference models saved and loaded.

:mod:`blockir.io.persistence` holds the code; model formats of other frameworks will sit beside it.
"""

from blockir.io.persistence import (
    MANIFEST_FILE,
    MAX_INDEX_BYTES,
    MAX_STREAM_BYTES,
    PARAMS_DIR,
    PROGRAM_FILE,
    is_parameter,
    is_persistable,
    load_array,
    load_inference_model,
    load_params,
    load_persistables,
    load_vars,
    save_inference_model,
    save_params,
    save_persistables,
    save_vars,
)

__all__ = [
    "MANIFEST_FILE",
    "MAX_INDEX_BYTES",
    "MAX_STREAM_BYTES",
    "PARAMS_DIR",
    "PROGRAM_FILE",
    "is_parameter",
    "is_persistable",
    "load_array",
    "load_inference_model",
    "load_params",
    "load_persistables",
    "load_vars",
    "save_inference_model",
    "save_params",
    "save_persistables",
    "save_vars",
]
