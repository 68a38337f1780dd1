"""The JSON contract of an analysis, generated from the result types in ``analysis.results``.

``json_schema()`` walks the dataclasses' type hints (and the ``json`` metadata of their fields: the
key a field is written under, whether it is left out when empty, whether its mapping (open) or its dataclass
(closed: its keys join the holder's) is written flat beside the fixed keys; a TypedDict part, written as built, is a closed object of its keys) and returns a JSON Schema (draft 2020-12) of ``AnalysisResult.to_json()``.
``goodput schema`` prints it; the committed copy (``analysis/result.schema.json``) is kept equal to
it by a test, and every analysis the tests make is validated against it. ``SCHEMA_VERSION`` is written
into every result and bumps whenever the schema changes in a way a reader must know about.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypedDict

from analysis import results

# A JSON Schema (draft 2020-12) as this module writes it: the keywords it uses, each typed.
Schema = TypedDict("Schema", {
    "$schema": str, "$id": str, "$ref": str, "$defs": "dict[str, Schema]", "title": str, "description": str,
    "type": str, "enum": "list[Any]", "const": str, "anyOf": "list[Schema]", "allOf": "list[Schema]",
    "if": "Schema", "then": "Schema", "items": "Schema", "properties": "dict[str, Schema]", "required": "list[str]",
    "additionalProperties": "bool | Schema", "patternProperties": "dict[str, bool]",
}, total=False)

SCHEMA_VERSION = results.SCHEMA_VERSION
SCHEMA_FILE = Path(__file__).with_name("result.schema.json")
_ROOT = results.AnalysisResult
# The type each definition name stands for (a ``$defs`` name is a type's name: it must be one type's).
_NAMED: dict[str, type] = {}
_SCALARS: dict[object, Schema] = {int: {"type": "integer"}, float: {"type": "number"}, str: {"type": "string"},
                                  bool: {"type": "boolean"}, type(None): {"type": "null"}}


def _schema_of(tp: Any, defs: dict[str, Schema]) -> Schema:
    origin = typing.get_origin(tp)
    if tp is Any:
        return {}
    if tp in _SCALARS:
        scalar: Schema = {**_SCALARS[tp]}
        return scalar
    if origin is typing.Literal:
        return {"enum": list(typing.get_args(tp))}
    if origin in (typing.Union, types.UnionType):
        options = [_schema_of(a, defs) for a in typing.get_args(tp)]
        return options[0] if len(options) == 1 else {"anyOf": options}
    if origin is tuple or origin is list:
        args = typing.get_args(tp)
        item = args[0] if args else Any
        return {"type": "array", "items": _schema_of(item, defs)}
    if origin in (dict, Mapping, typing.Mapping) or tp in (dict, Mapping):
        args = typing.get_args(tp)
        value = args[1] if len(args) == 2 else Any
        return {"type": "object", "additionalProperties": _schema_of(value, defs)}
    if typing.is_typeddict(tp) or isinstance(tp, type) and dataclasses.is_dataclass(tp):
        name = tp.__name__
        if _NAMED.setdefault(name, tp) is not tp:  # two types of one name would share one definition
            raise TypeError(f"two result types are named {name}: {_NAMED[name]!r} and {tp!r}")
        if name not in defs:
            defs[name] = {}  # placeholder: a type may refer to itself
            defs[name] = _object_schema(tp, defs)
        return {"$ref": f"#/$defs/{name}"}
    raise TypeError(f"no JSON Schema for {tp!r}")


def _object_schema(cls: type, defs: dict[str, Schema]) -> Schema:
    if typing.is_typeddict(cls):  # a JSON part written as built: its keys, NotRequired ones optional; closed
        hints = typing.get_type_hints(cls, vars(sys.modules[cls.__module__]), include_extras=True)
        # Required or not from the hints (``__required_keys__`` misses NotRequired under postponed annotations on 3.11).
        optional = {k for k, t in hints.items() if typing.get_origin(t) is typing.NotRequired
                    or (not getattr(cls, "__total__", True) and typing.get_origin(t) is not typing.Required)}
        bare = {k: typing.get_args(t)[0] if typing.get_origin(t) in (typing.NotRequired, typing.Required) else t
                for k, t in hints.items()}
        return {"type": "object", "description": (cls.__doc__ or "").strip().split("\n\n")[0],
                "properties": {k: _schema_of(t, defs) for k, t in bare.items()},
                "required": [k for k in hints if k not in optional], "additionalProperties": False}
    hints = typing.get_type_hints(cls, vars(sys.modules[cls.__module__]))
    props: dict[str, Schema] = {}
    required: list[str] = []
    open_object = False
    for f in dataclasses.fields(cls):
        meta = f.metadata.get("json", {})
        if meta.get("omit"):
            continue
        if meta.get("flat"):  # its keys sit beside the fixed ones: a dataclass's, or any (a mapping's)
            if dataclasses.is_dataclass(hints[f.name]):
                inner = _object_schema(hints[f.name], defs)
                props.update(inner["properties"])
                required += inner["required"]
            else:
                open_object = True
            continue
        key = meta.get("key", f.name)
        schema = _schema_of(hints[f.name], defs)
        if f.metadata.get("doc"):
            schema = {**schema, "description": f.metadata["doc"]}
        props[key] = schema
        if not meta.get("optional"):
            required.append(key)
    out: Schema = {"type": "object", "description": (cls.__doc__ or "").strip().split("\n\n")[0],
                   "properties": props, "required": required}
    out["additionalProperties"] = open_object
    return out


def _finding_extras(defs: dict[str, Schema], extras: Mapping[str, type]) -> None:
    """A finding's ``extra`` beside its fixed keys: the engine's keys typed on every finding, and the shape of
    each rule of ``extras`` where the finding is that rule's. A typed extra is closed (``additionalProperties``
    false): such a finding holds its fixed keys, the engine's and its type's, nothing else; the findings of a rule
    that declares no type stay open."""
    finding = defs["FindingResult"]
    finding["properties"].update(_object_schema(results.EngineExtra, defs)["properties"])
    # The fixed and engine keys, typed (and checked) by FindingResult itself.
    beside = {"^(" + "|".join(sorted(finding["properties"])) + ")$": True}
    cases: list[Schema] = []
    for rule_id, cls in sorted(extras.items()):
        name = cls.__name__
        if name not in defs:
            defs[name] = _object_schema(cls, defs)
        own = defs[name]
        cases.append({"if": {"properties": {"rule_id": {"const": rule_id}}, "required": ["rule_id"]},
                      "then": {"properties": {k: {"$ref": f"#/$defs/{name}/properties/{k}"} for k in own["properties"]},
                               "patternProperties": beside, "required": own["required"],
                               "additionalProperties": False}})
    finding["allOf"] = cases


def json_schema(extras: Mapping[str, type]) -> Schema:
    """The JSON Schema of ``AnalysisResult.to_json()``; ``extras``: rule id -> the typed shape of its findings'
    ``extra`` (each rule's ``extra_type``, as the rule registry lists them: ``analysis.api.result_schema`` passes
    them, since this module imports no pipeline layer)."""
    defs: dict[str, Schema] = {}
    root = _object_schema(_ROOT, defs)
    _finding_extras(defs, extras)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"https://goodput.dev/schemas/analysis-result-v{SCHEMA_VERSION}.json",
            "title": "Goodput analysis result", **root, "$defs": dict(sorted(defs.items()))}


def schema_text(extras: Mapping[str, type]) -> str:
    """The schema as committed: sorted keys, two-space indent, a final newline."""
    return json.dumps(json_schema(extras), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
