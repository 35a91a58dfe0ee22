"""``from_spec("topk:ratio=0.01,selection=exact")``: compressors from one string, for command lines.

Grammar: ``NAME`` or ``NAME:KEY=VALUE[,KEY=VALUE...]``. Values are read as int, float,
true/false, none, or else kept as strings. ``none`` and ``fp16`` give Horovod's own compressors
(where Horovod is installed).
"""
from typing import Any

from .methods import METHODS as COMPRESSORS
from .options import horovod_installed

HOROVOD_COMPRESSIONS = {}
if horovod_installed():
    from horovod.torch import Compression

    HOROVOD_COMPRESSIONS = {"none": Compression.none, "fp16": Compression.fp16}


def _value(text: str) -> Any:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered == "none":
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def known() -> list[str]:
    return sorted([*COMPRESSORS, *HOROVOD_COMPRESSIONS])


def from_spec(spec: str) -> Any:
    """Builds the compressor ``spec`` names; a ValueError lists the known names otherwise."""
    if not isinstance(spec, str):
        raise ValueError(f"spec must be a string like 'topk:ratio=0.01', got {spec!r}")
    name, _, args = spec.strip().partition(":")
    name = name.strip().lower()
    if name in HOROVOD_COMPRESSIONS and not args:
        return HOROVOD_COMPRESSIONS[name]
    if name not in COMPRESSORS:
        raise ValueError(f"unknown compressor {name!r} in spec {spec!r}; known: {', '.join(known())}")
    kwargs = {}
    for item in filter(None, (part.strip() for part in args.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"malformed option {item!r} in spec {spec!r}; expected KEY=VALUE")
        kwargs[key.strip()] = _value(value.strip())
    options = sorted(COMPRESSORS[name]().options())
    unknown = sorted(set(kwargs) - set(options))
    if unknown:
        raise ValueError(f"unknown option {unknown[0]!r} for {name} in spec {spec!r}; "
                         f"options: {', '.join(options)}")
    return COMPRESSORS[name](**kwargs)
