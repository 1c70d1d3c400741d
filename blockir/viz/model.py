"""The page's data model: what the pass manager kept of each pass, as one JSON-ready dict.

:func:`collect` runs a pipeline with the :class:`~blockir.passes.KeepPrograms`
instrument and keeps every program (a failing pass's ``PassError`` carries the
report of the passes before it); :func:`build` turns the programs into the
model. Nothing here re-derives what a pass did: ops are matched across passes
by their ids (which clones keep), lineage is the ``op_pass``/``op_origin`` the
passes recorded, devices and streams are the ops' ``op_device``/``op_stream``.

The model (``format`` ``"blockir-viz"``, ``version`` 2)::

    title, pipeline              the page's title; the pipeline as the report names it
    devices, streams             every op device ("" = not placed) and op stream seen, sorted
    states[k]                    k = 0: the input; k >= 1: after pass k (its PassRecord's fields,
                                 ``stats``: ops per device, copies, bytes copied across devices;
                                 ``structural`` and ``annotated``: ops changed in structure, and in
                                 annotations alone; ``text``: its text form as ``blockir show``
                                 prints it, line by line: v >= 0 the op version ops[v], else lines[-1 - v])
    ops[v]                       one entry per op *version* (op id + its text form); ``present``
                                 has one character per state, "1" where the op is this version;
                                 ``sv`` numbers its structure: two versions of an op with the same
                                 ``sv`` differ only in annotations (ANNOTATIONS); ``inputs``, ``outputs``
    nodes                        op id -> [x, y, w, h, block]: one position per op for all states
    blocks[b]                    parent, owner op id (the op running it), box [x, y, w, h]
    edges[e]                     [writer op id, reader op id, variable, presence per state]
    vars[b]                      name -> [shape, dtype, persistable] of block b
    lines                        the text forms' lines other than ops (block headers, variables), each once
    failure                      None, or the pass that raised: label, message, the state it received
    trace                        None, or the run's spans (:mod:`blockir.viz.trace`)
    predicted                    None, or the schedule the last ``auto-place`` pass predicted (its
                                 record's ``schedule``): ``state`` (the pass's state), ``makespan`` (µs),
                                 ``lanes`` (devices), ``spans`` [lane, start µs, duration µs, op id, type],
                                 ``why`` (op id -> its ``op_placement``: the pass's reasoning)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from blockir.errors import PassError
from blockir.ir import Operator, Program, Variable
from blockir.ir.schema import Lowering, lowering_of
from blockir.ir.text import format_attr_value, program_lines
from blockir.passes.auto_place import PLACEMENT_ATTR, AutoPlace, Schedule
from blockir.passes.base import Pass, origin_key
from blockir.passes.manager import KeepPrograms, PassRecord, PassReport, expand, format_pass, parse_pipeline
from blockir.passes.manager import run as run_pipeline
from blockir.passes.place import find_var
from blockir.passes.streams import STREAM_ATTR
from blockir.viz.layout import layout
from blockir.viz.trace import Trace, match_trace

__all__ = ["ANNOTATIONS", "FORMAT", "VERSION", "Collected", "build", "collect"]

FORMAT = "blockir-viz"
VERSION = 2

#: Attributes that say where an op runs and what made it, not what it computes: a change of these alone is an
#: annotation, shown and counted apart from structural changes (inputs, outputs, type, other attributes, device).
ANNOTATIONS = frozenset({STREAM_ATTR, "op_pass", "op_origin", "op_namescope", "op_callstack"})

_KINDS = {Lowering.FEED: "feed", Lowering.FETCH: "fetch", Lowering.COPY: "copy", Lowering.CONTROL: "control"}


@dataclass
class Collected:
    """A pipeline's run with every program kept: ``programs[k]`` is the input (k = 0) or after pass k."""

    pipeline: str
    programs: list[Program]
    records: list[PassRecord]
    error: PassError | None  # the failing pass's error; its program is programs[-1], the one it received
    failed: str | None  # the failing pass in pipeline syntax


def collect(program: Program, pipeline: str | Sequence[Pass]) -> Collected:
    """Run ``pipeline`` on a clone of ``program`` keeping every program; a pass that raises ends the run.

    A pipeline that does not parse raises :class:`~blockir.errors.PipelineError`,
    an invalid input :class:`~blockir.errors.VerifyError`; a failing pass is
    kept in the result (``error``), not raised.
    """
    passes = parse_pipeline(pipeline) if isinstance(pipeline, str) else list(pipeline)
    keep = KeepPrograms()
    try:
        _, report = run_pipeline(program, passes, instruments=[keep])
    except PassError as e:
        done: PassReport = e.report
        failed = format_pass(expand(passes)[len(done.records)])
        return Collected(done.pipeline, keep.programs[: len(done.records) + 1], done.records, e, failed)
    return Collected(report.pipeline, keep.programs, report.records, None, None)


def build(collected: Collected, title: str, trace: Trace | None = None) -> dict[str, Any]:
    """The data model of ``collected`` (module docstring), with ``trace``'s spans linked to its ops."""
    programs = collected.programs
    count = len(programs)
    versions: dict[tuple[int, str], dict[str, Any]] = {}
    structures: dict[tuple[int, str], int] = {}  # (op id, structure) -> the model's "sv"
    edges: dict[tuple[int, int, str], list[str]] = {}
    first_seen: dict[int, tuple[int, int, int]] = {}  # op id -> (block, state, position) where it first appears
    keys_by_state: list[dict[str, int]] = []
    lines: dict[str, int] = {}  # the text form's lines other than ops, each once
    texts: list[list[Any]] = []  # per state: its text form, a version (dict) or -1 - a line's index per line
    ops_by_state: list[dict[int, dict[str, Any]]] = []
    for k, program in enumerate(programs):
        keys_by_state.append({origin_key(op): op.id for op in program.ops()})
        writers: dict[int, dict[str, int]] = {}  # block -> variable -> the op id writing it last
        positions: dict[int, int] = {}
        text_k: list[Any] = []
        here: dict[int, dict[str, Any]] = {}
        for line, op in program_lines(program):
            if op is None:
                text_k.append(-1 - lines.setdefault(line, len(lines)))
                continue
            block_idx = op.block.idx
            writer = writers.setdefault(block_idx, {})
            positions[block_idx] = pos = positions.get(block_idx, -1) + 1
            first_seen.setdefault(op.id, (block_idx, k, pos))
            text = line[2:]  # the op's line without the block's indent: format_op(op)
            version = versions.get((op.id, text))
            if version is None:
                version = versions[(op.id, text)] = _version(op, text, k, keys_by_state)
                version["sv"] = structures.setdefault((op.id, _structure(op)), len(structures))
                version["present"] = ["0"] * count
            version["present"][k] = "1"
            text_k.append(version)
            here[op.id] = version
            for name in op.input_names():
                if name in writer and writer[name] != op.id:
                    edges.setdefault((writer[name], op.id, name), ["0"] * count)[k] = "1"
            for name in op.output_names():
                writer[name] = op.id
        texts.append(text_k)
        ops_by_state.append(here)
    ops = list(versions.values())
    for v, entry in enumerate(ops):
        entry["v"] = v
        entry["present"] = "".join(entry["present"])
    edge_list = [[src, dst, name, "".join(p)] for (src, dst, name), p in edges.items()]
    blocks: list[dict[str, Any]] = [
        {"idx": b.idx, "parent": b.parent_idx, "owner": None, "box": None}
        for b in max(programs, key=lambda p: len(p.blocks)).blocks
    ]
    for entry in ops:
        for idx in entry.pop("sub_blocks"):
            if idx < len(blocks) and blocks[idx]["owner"] is None:
                blocks[idx]["owner"] = entry["id"]
    nodes, boxes = layout(ops, edge_list, first_seen, blocks)
    for b, box in zip(blocks, boxes):
        b["box"] = box
    states = [_state(k, program, collected) for k, program in enumerate(programs)]
    for k, state in enumerate(states):
        state["text"] = [entry if isinstance(entry, int) else entry["v"] for entry in texts[k]]
        state["structural"], state["annotated"] = _changes(ops_by_state[k - 1], ops_by_state[k]) if k else (None, None)
    devices = sorted({op["device"] for op in ops}, key=_device_order)
    streams = sorted({op["stream"] for op in ops if op["stream"]})
    linked = None if trace is None else match_trace(trace, programs, [s["digest"] for s in states])
    return {
        "format": FORMAT,
        "version": VERSION,
        "title": title,
        "pipeline": collected.pipeline,
        "devices": devices,
        "streams": streams,
        "states": states,
        "ops": ops,
        "nodes": {str(i): n for i, n in nodes.items()},
        "blocks": blocks,
        "edges": edge_list,
        "vars": [_vars(block) for block in max(programs, key=lambda p: len(p.blocks)).blocks],
        "lines": list(lines),
        "failure": _failure(collected),
        "trace": linked,
        "predicted": _predicted(collected),
    }


def _predicted(collected: Collected) -> dict[str, Any] | None:
    """The schedule the last ``auto-place`` pass predicted, for the timeline beside a run's (module docstring)."""
    for k in reversed(range(len(collected.records))):
        record = collected.records[k]
        schedule = record.details.get("schedule") if record.name == AutoPlace.name else None
        if isinstance(schedule, Schedule):
            lanes = sorted({o.device for o in schedule.ops}, key=_device_order)
            program = collected.programs[k + 1]
            return {
                "state": k + 1,
                "makespan": schedule.makespan * 1e6,
                "lanes": lanes,
                "spans": [
                    [
                        lanes.index(o.device),
                        o.start * 1e6,
                        (o.finish - o.start) * 1e6,
                        o.op_id,
                        o.type,
                    ]
                    for o in schedule.ops
                ],
                "why": {str(op.id): op.attrs[PLACEMENT_ATTR] for op in program.ops() if PLACEMENT_ATTR in op.attrs},
            }
    return None


def _structure(op: Operator) -> str:
    """What a structural change of ``op`` changes: all of it but its annotations (ANNOTATIONS), attributes in
    name order (a pass that only moves an attribute changes nothing)."""
    attrs = sorted((k, format_attr_value(v, op.attr_types[k])) for k, v in op.attrs.items() if k not in ANNOTATIONS)
    return repr((op.type, op.inputs, op.outputs, attrs, op.is_target))


def _changes(before: dict[int, dict[str, Any]], after: dict[int, dict[str, Any]]) -> tuple[int, int]:
    """(ops changed structurally, ops whose annotations alone changed) among the ops of both states."""
    structural = annotated = 0
    for op_id, version in after.items():
        was = before.get(op_id)
        if was is None or was is version:
            continue
        if was["sv"] != version["sv"]:
            structural += 1
        else:
            annotated += 1
    return structural, annotated


def _device_order(device: str) -> tuple[int, str, int]:
    kind, _, index = device.partition(":")
    return (0 if device else 1, kind, int(index) if index.isdigit() else -1)


def _kind(op: Operator) -> str:
    lowering = lowering_of(op.type)
    return "op" if lowering is None else _KINDS.get(lowering, "op")


def _shape_text(var: Variable | None) -> str:
    if var is None or var.shape is None:
        return ""
    return f"[{', '.join(map(str, var.shape))}] {var.dtype}"


def _find(op: Operator, name: str) -> Variable | None:
    return find_var(op.block, name)


def _version(op: Operator, text: str, state: int, keys_by_state: list[dict[str, int]]) -> dict[str, Any]:
    """One version of ``op`` (first seen in ``state``): what the page shows of it."""
    kind = _kind(op)
    outputs = op.output_names()
    persistable = [v for n in op.input_names() if (v := _find(op, n)) is not None and v.persistable]
    if outputs:
        line = f"{outputs[0]} {_shape_text(_find(op, outputs[0]))}".rstrip()
        line += f" +{len(outputs) - 1}" if len(outputs) > 1 else ""
    else:  # an op writing nothing (a send, a go): what it reads
        line = "reads " + ", ".join(op.input_names()) if op.input_names() else ""
    label = [op.type, line]
    params = [v.name for v in persistable if v.is_parameter]
    others = [v.name for v in persistable if not v.is_parameter]
    if params or others:
        label.append(
            " · ".join(f"{word} {', '.join(names)}" for word, names in (("param", params), ("state", others)) if names)
        )
    origin = list(op.attrs.get("op_origin", ()))
    made_by = op.attrs.get("op_pass")
    origin_ids = _resolve(origin, op.id, state, keys_by_state)
    return {
        "id": op.id,
        "block": op.block.idx,
        "type": op.type,
        "kind": kind,
        "text": text,
        "device": op.device,
        "stream": op.attrs.get("op_stream") or None,
        "attrs": [[k, format_attr_value(v, op.attr_types[k])] for k, v in op.attrs.items()],
        "label": label,
        "pass": made_by,
        "origin": origin,
        "origin_ids": origin_ids,
        "inputs": op.input_names(),
        "outputs": outputs,
        "lineage": _lineage(op, kind, made_by, origin) if made_by else None,
        "bytes": _copy_bytes(op) if kind == "copy" else None,
        "sub_blocks": op.sub_block_indices(),
        "present": None,
    }


def _resolve(origin: list[str], op_id: int, state: int, keys_by_state: list[dict[str, int]]) -> list[int | None]:
    """The ids of the ops ``origin`` names: in the program the creating pass received, else in this one."""
    found: list[int | None] = []
    for key in origin:
        candidates = [keys_by_state[k].get(key) for k in (state - 1, state) if k >= 0]
        found.append(next((i for i in candidates if i is not None and i != op_id), None))
    return found


def _lineage(op: Operator, kind: str, made_by: str, origin: list[str]) -> str:
    """``memcpy inserted by insert-copies for relu -> mul, cpu:1 -> cpu`` (or ``created by PASS from ...``)."""
    types = [key.split(":", 1)[0] for key in origin]
    if kind == "copy":
        source = op.input_names()[0] if op.input_names() else "?"
        var = _find(op, source)
        flow = " -> ".join(types if len(types) > 1 else [source, *types])
        src = var.device if var is not None and var.device else "?"
        return f"{op.type} inserted by {made_by} for {flow}, {src} -> {op.device or '?'}"
    return f"{op.type} created by {made_by}" + (f" from {', '.join(origin)}" if origin else "")


def _copy_bytes(op: Operator) -> list[int] | None:
    """[bytes of the known dims, number of -1 dims] of the value a copy moves (None when unknown)."""
    names = op.input_names()
    var = _find(op, names[0]) if names else None
    if var is None or var.shape is None or var.dtype is None:
        return None
    known = int(np.prod([d for d in var.shape if d != -1], dtype=np.int64)) * np.dtype(var.dtype).itemsize
    return [known, sum(d == -1 for d in var.shape)]


def bytes_text(terms: dict[int, int]) -> str:
    """``6,272 B × (-1) + 128 B``: bytes by how many -1 dims they are multiplied by, -1 shown as such."""
    parts = []
    for unknown in sorted(terms, reverse=True):
        factor = "".join(" × (-1)" for _ in range(unknown))
        parts.append(f"{terms[unknown]:,} B{factor}")
    return " + ".join(parts) or "0 B"


def _state(k: int, program: Program, collected: Collected) -> dict[str, Any]:
    per_device: dict[str, int] = {}
    copies = 0
    terms: dict[int, int] = {}
    for op in program.ops():
        per_device[op.device] = per_device.get(op.device, 0) + 1
        if _kind(op) == "copy":
            copies += 1
            moved = _copy_bytes(op)
            if moved is not None:
                terms[moved[1]] = terms.get(moved[1], 0) + moved[0]
    stats = {
        "devices": dict(sorted(per_device.items(), key=lambda item: _device_order(item[0]))),
        "copies": copies,
        "copy_bytes": bytes_text(terms),
    }
    state: dict[str, Any] = {"index": k, "ops": sum(per_device.values()), "stats": stats, "digest": program.digest()}
    if k == 0:
        state.update(label="input", name="input", changed=None, seconds=None, added=None, removed=None)
        state.update(modified=None, returned=None, notes=[])
    else:
        r = collected.records[k - 1]
        state.update(label=r.label, name=r.name, changed=r.changed, returned=r.returned, seconds=r.seconds)
        state.update(added=r.added, removed=r.removed, modified=r.modified, notes=list(r.notes))
        state["digest"] = r.digest
    return state


def _failure(collected: Collected) -> dict[str, Any] | None:
    """The step the page shows for a pass that raised: its label, message, and the state it received."""
    if collected.error is None:
        return None
    received = len(collected.programs) - 1
    return {
        "index": received + 1,
        "label": collected.failed,
        "message": str(collected.error),
        "received": received,
        "reproducer": collected.error.reproducer,
    }


def _vars(block: Any) -> dict[str, list[Any]]:
    return {
        v.name: [list(v.shape) if v.shape is not None else None, v.dtype, v.persistable] for v in block.vars.values()
    }
