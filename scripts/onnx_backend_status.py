"""Run ONNX's backend test suite (node, simple, pytorch-converted, pytorch-operator cases) through blockir and
write what it finds:

- ``tests/io/onnx_backend_cases.json``: the cases excluded by category (the issue's categories: float8, sub-byte
  types, string, bfloat16, the ai.onnx.ml and ai.onnx.preview.training domains, sequence and optional types,
  ImageDecoder) and the cases not yet supported, each with its reason (a missing op, an attribute, a type);
  ``tests/io/test_onnx_backend.py`` runs every other case and expects it to pass;
- the per-op table of ``docs/onnx.md`` (between its ``onnx-table`` markers): cases, passed, excluded and not
  supported.

Run it after changing the importer: ``python scripts/onnx_backend_status.py`` (about a minute and a half).
"""

from __future__ import annotations

import collections
import json
import re
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
CASES_FILE = REPO / "tests" / "io" / "onnx_backend_cases.json"
DOC = REPO / "docs" / "onnx.md"
KINDS = ("node", "simple", "pytorch-converted", "pytorch-operator")

FLOAT8 = {"FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "FLOAT8E8M0"}
SUB_BYTE = {"INT4", "UINT4", "FLOAT4E2M1", "INT2", "UINT2"}


def _type_names(model: Any) -> set[str]:
    """The ONNX element types a model uses anywhere: values, initializers, Cast targets, constants, subgraphs."""
    import onnx

    found: set[str] = set()
    seq_or_optional = False

    def elem(code: int) -> None:
        if code:
            found.add(onnx.TensorProto.DataType.Name(code))

    def value_type(t: Any) -> None:
        nonlocal seq_or_optional
        kind = t.WhichOneof("value")
        if kind == "tensor_type":
            elem(t.tensor_type.elem_type)
        elif kind in ("sequence_type", "optional_type", "map_type"):
            seq_or_optional = True

    def graph(g: Any) -> None:
        for v in (*g.input, *g.output, *g.value_info):
            value_type(v.type)
        for t in g.initializer:
            elem(t.data_type)
        for n in g.node:
            for a in n.attribute:
                if a.name in ("to", "output_dtype", "dtype") and a.type == onnx.AttributeProto.INT:
                    elem(a.i)
                if a.type == onnx.AttributeProto.TENSOR:
                    elem(a.t.data_type)
                if a.type == onnx.AttributeProto.GRAPH:
                    graph(a.g)
                for sub in a.graphs:
                    graph(sub)

    graph(model.graph)
    if seq_or_optional:
        found.add("SEQUENCE_OR_OPTIONAL")
    return found


def category(model: Any) -> str | None:
    """The issue's exclusion category of a case's model, or None."""
    ops = {(n.domain, n.op_type) for n in model.graph.node}
    for f in model.functions:
        ops |= {(n.domain, n.op_type) for n in f.node}
    domains = {d for d, _ in ops} | {o.domain for o in model.opset_import}
    types = _type_names(model)
    if "ai.onnx.ml" in domains:
        return "the ai.onnx.ml domain"
    if "ai.onnx.preview.training" in domains:
        return "the ai.onnx.preview.training domain"
    if any(t in FLOAT8 for t in types):
        return "float8 types"
    if any(t in SUB_BYTE for t in types):
        return "int4, uint4, float4 (and 2-bit) types"
    if "STRING" in types:
        return "string tensors"
    if "BFLOAT16" in types:
        return "bfloat16"
    if "SEQUENCE_OR_OPTIONAL" in types or any(op.startswith(("Sequence", "Optional")) for _, op in ops):
        return "sequence and optional types"
    if any(op == "ImageDecoder" for _, op in ops):
        return "ImageDecoder"
    return None


def reason(error: BaseException) -> str:
    """Why a case fails, in a few words: the missing op, the refused attribute or type, or the difference."""
    text = str(error)
    found = re.search(r"node [^ ]+ \((\w+)\): (.*?)(?:; node |; graph |; initializer |$)", text)
    if "ONNX type" in text:
        return "type " + re.search(r"ONNX type (\w+)", text).group(1)  # type: ignore[union-attr]
    if found:
        op, why = found.group(1), found.group(2)
        if why == "blockir has no op for it":
            return f"missing op {op}"
        why = re.sub(r"'[^']*'", "'...'", why)
        return f"{op}: {why}"[:160]
    if "opset" in text and "imports opsets" in text:
        return "opset below 7"
    if isinstance(error, AssertionError):
        return "results differ from the reference"
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"[:160]


def _cases() -> list[Any]:
    from onnx.backend.test.loader import load_model_tests

    found = []
    for kind in KINDS:
        found.extend(load_model_tests(kind=kind))
    return found


def _load(case: Any) -> Any:
    import onnx

    if case.model is not None:
        return case.model
    return onnx.load(str(Path(case.model_dir) / "model.onnx"))


def _data_sets(case: Any) -> list[tuple[list[Any], list[Any]]]:
    import onnx
    from onnx.backend.test.runner import _normalize_tensor

    if case.data_sets is not None:
        return [
            ([_normalize_tensor(i) for i in ins], [_normalize_tensor(o) for o in outs]) for ins, outs in case.data_sets
        ]
    sets = []
    for directory in sorted(Path(case.model_dir).glob("test_data_set_*")):

        def read(prefix: str, directory: Path = directory) -> list[Any]:
            values = []
            for path in sorted(directory.glob(f"{prefix}_*.pb"), key=lambda p: int(p.stem.split("_")[-1])):
                tensor = onnx.TensorProto()
                tensor.ParseFromString(path.read_bytes())
                values.append(onnx.numpy_helper.to_array(tensor))
            return values

        sets.append((read("input"), read("output")))
    return sets


def run_case(case: Any) -> BaseException | None:
    """None when blockir computes the case's outputs, else the error."""
    from onnx.backend.test.runner import Runner

    import blockir.io.onnx_backend as backend

    try:
        rep = backend.prepare(_load(case))
        for inputs, outputs in _data_sets(case):
            Runner.assert_similar_outputs(outputs, rep.run(inputs), case.rtol, case.atol)
    except Exception as e:  # noqa: BLE001  # every failure is recorded with its reason
        return e
    return None


def _op_of(case: Any, model: Any) -> str:
    if case.kind != "node":
        return f"({case.kind})"
    name = case.name.removeprefix("test_")
    ops = [n.op_type for n in model.graph.node]
    for op in ops:
        if op.lower() in name.replace("_", "").lower() or name.startswith(op.lower()):
            return op
    return ops[-1] if ops else "?"


def main() -> int:
    warnings.filterwarnings("ignore")
    np.seterr(all="ignore")
    excluded: dict[str, str] = {}
    unsupported: dict[str, str] = {}
    table: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for case in _cases():
        model = _load(case)
        op = _op_of(case, model)
        table[op]["cases"] += 1
        found = category(model)
        if found is not None:
            excluded[case.name] = found
            table[op]["excluded"] += 1
            continue
        error = run_case(case)
        if error is None:
            table[op]["passed"] += 1
        else:
            unsupported[case.name] = reason(error)
            table[op]["not supported"] += 1
    _write_cases(excluded, unsupported)
    _write_table(table)
    total = sum(c["cases"] for c in table.values())
    passed = sum(c["passed"] for c in table.values())
    print(f"{total} cases: {passed} passed, {len(excluded)} excluded, {len(unsupported)} not supported")
    return 0


def _write_cases(excluded: dict[str, str], unsupported: dict[str, str]) -> None:
    document = {
        "about": "ONNX backend test cases blockir does not run, each with its reason; generated by "
        "python scripts/onnx_backend_status.py (do not edit by hand). excluded: the issue's excluded categories; "
        "not_supported: cases outside them blockir cannot run yet, and why.",
        "excluded": dict(sorted(excluded.items())),
        "not_supported": dict(sorted(unsupported.items())),
    }
    CASES_FILE.write_text(json.dumps(document, indent=1) + "\n")


def _write_table(table: dict[str, collections.Counter[str]]) -> None:
    rows = ["| op | cases | passed | excluded | not supported |", "| --- | ---: | ---: | ---: | ---: |"]
    for op in sorted(table):
        c = table[op]
        rows.append(f"| {op} | {c['cases']} | {c['passed']} | {c['excluded']} | {c['not supported']} |")
    total = collections.Counter[str]()
    for c in table.values():
        total.update(c)
    rows.append(f"| **all** | {total['cases']} | {total['passed']} | {total['excluded']} | {total['not supported']} |")
    outside = total["cases"] - total["excluded"]
    summary = (
        f"{total['cases']} cases: {total['passed']} pass, {total['excluded']} are excluded, "
        f"{total['not supported']} are not supported yet; {100 * total['passed'] / outside:.1f}% of the cases outside "
        f"the excluded categories pass ({100 * total['passed'] / total['cases']:.1f}% of all)."
    )
    rows = [summary, "", *rows]
    text = DOC.read_text()
    start, end = "<!-- onnx-table: begin -->", "<!-- onnx-table: end -->"
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    DOC.write_text(f"{head}{start}\n" + "\n".join(rows) + f"\n{end}{tail}")


if __name__ == "__main__":
    sys.exit(main())
