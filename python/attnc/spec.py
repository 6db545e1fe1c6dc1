"""attnc.Spec: an attention variant in Python, written out as docs/spec.md's YAML for the
compiler, or read from a YAML file whose text and path it keeps so that compiler messages point
into that file. Values are checked by the compiler (SpecError), types here (ArgumentError)."""
import hashlib
import os
import re
from typing import Any, Optional

from ._errors import ArgumentError

_FIELDS = ("name", "head_dim", "head_dim_v", "dtype", "heads", "scale", "mask", "score",
           "dropout", "inputs")
# A YAML plain scalar that reads back as the same string (no indicator, quote or flow character).
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")
_YAML_WORDS = {"true", "false", "null", "yes", "no", "on", "off", "y", "n", "~"}
_MASK_KEYWORDS = {"none", "causal"}
_SCORE_KEYWORDS = {"none", "alibi"}


def _check_type(arg: str, value: Any, types: tuple, expected: str) -> None:
    if value is not None and (not isinstance(value, types) or isinstance(value, bool)
                              and bool not in types):
        raise ArgumentError(f"{arg}: expected {expected}, got {value!r}")


def _normalize_heads(heads: Any) -> Optional[tuple]:
    if heads is None:
        return None
    if isinstance(heads, int) and not isinstance(heads, bool):
        return (heads, heads)
    if isinstance(heads, dict) and set(heads) <= {"q", "kv"} and "q" in heads:
        pair = (heads["q"], heads.get("kv", heads["q"]))
    elif isinstance(heads, (tuple, list)) and len(heads) == 2:
        pair = tuple(heads)
    else:
        raise ArgumentError(f"heads: expected an int, (q, kv) or {{'q': q, 'kv': kv}}, "
                            f"got {heads!r}")
    for n in pair:
        _check_type("heads", n, (int,), "integers")
    return pair


def _scalar(value: Any) -> str:
    """One YAML scalar: numbers and booleans as YAML writes them, identifiers plain, other
    strings single-quoted (no escapes, so the compiler's carets stay on the right column)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    text = str(value)
    if _PLAIN.match(text) and text.lower() not in _YAML_WORDS:
        return text
    return "'" + text.replace("'", "''") + "'"


def _flow(value: Any) -> str:
    """A value as YAML flow: {a: 1, b: x} mappings, [a, b] lists, scalars."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_scalar(k)}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    return _scalar(value)


def _variant(value: Any, keywords: set) -> str:
    """A mask or score: a keyword plain, a mapping in flow form, an expression quoted."""
    if isinstance(value, str) and value in keywords:
        return value
    return _flow(value)


_DICT = "__dict__"  # marks a frozen dict, so that _thaw tells it from a list of pairs
# marks a float frozen as its exact integer ratio: torch.compile with dynamic shapes traces a
# float as a symbol, and as_integer_ratio is what turns it back into constants there.
_FLOAT = "__float__"


def _freeze(value: Any) -> Any:
    """A hashable form of a field's value, made of str, ints, bools, None and tuples."""
    if isinstance(value, dict):
        return (_DICT,) + tuple((k, _freeze(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, float):
        return (_FLOAT,) + value.as_integer_ratio()
    return value


def _thaw(value: Any) -> Any:
    """The inverse of _freeze (tuples come back as lists)."""
    if isinstance(value, tuple):
        if value[:1] == (_DICT,):
            return {k: _thaw(v) for k, v in value[1:]}
        if value[:1] == (_FLOAT,):
            return value[1] / value[2]
        return [_thaw(v) for v in value]
    return value


class Spec:
    """An attention variant: the fields of docs/spec.md. Unset fields (None) take the compiler's
    defaults, or, through attention(), the values the tensors give.

    heads: int | (q, kv) | {"q": q, "kv": kv}; dtype: "bf16" | "fp16";
    mask: None | "none" | "causal" | {"causal": "top_left"} | {"window": W} | {"prefix": P}
          | {"document": "doc", "causal": True} | an expression string;
    score: None | {"softcap": C} | "alibi" | {"alibi": "slopes"} | an expression string;
    dropout: float | {"p": p, "rounds": r};
    inputs: {name: {"dtype": "i32" | "f32", "dims": ["b", "h", "pos"]}}.
    """

    __slots__ = _FIELDS + ("_text", "_path", "_yaml", "_key")

    def __init__(self, head_dim: Optional[int] = None, *, heads: Any = None,
                 head_dim_v: Optional[int] = None, dtype: Optional[str] = None,
                 scale: Optional[float] = None, mask: Any = None, score: Any = None,
                 dropout: Any = None, inputs: Optional[dict] = None,
                 name: Optional[str] = None) -> None:
        _check_type("head_dim", head_dim, (int,), "an int")
        _check_type("head_dim_v", head_dim_v, (int,), "an int")
        _check_type("dtype", dtype, (str,), "'bf16' or 'fp16'")
        _check_type("scale", scale, (int, float), "a number")
        _check_type("mask", mask, (str, dict), "a string or a dict")
        _check_type("score", score, (str, dict), "a string or a dict")
        _check_type("dropout", dropout, (int, float, dict), "a probability or a dict")
        _check_type("inputs", inputs, (dict,), "a dict {name: {'dtype': ..., 'dims': [...]}}")
        _check_type("name", name, (str,), "a string")
        self.head_dim = head_dim
        self.heads = _normalize_heads(heads)
        self.head_dim_v = head_dim_v
        self.dtype = dtype
        self.scale = scale
        self.mask = mask
        self.score = score
        self.dropout = dropout
        self.inputs = dict(inputs) if inputs is not None else None
        self.name = name
        self._text = None   # the YAML it was read from (from_yaml), compiled as written
        self._path = None   # that YAML's file, so messages say file:line:col of it
        self._yaml = None   # to_yaml's result, once made
        self._key = None    # key()'s result, once made

    def __setattr__(self, field: str, value: Any) -> None:
        object.__setattr__(self, field, value)
        if field in _FIELDS or field in ("_text", "_path"):
            object.__setattr__(self, "_yaml", None)
            object.__setattr__(self, "_key", None)

    @classmethod
    def from_yaml(cls, path_or_text: str) -> "Spec":
        """A spec from a .yaml file's path or from YAML text. The text is compiled as written,
        so compiler messages point at the file's lines; the fields are read with PyYAML when
        it is installed (they are only needed by replace() and attention(spec=...))."""
        if not isinstance(path_or_text, str):
            raise ArgumentError(f"path_or_text: expected a path or YAML text, got "
                                f"{type(path_or_text).__name__}")
        path = None
        if "\n" not in path_or_text and ":" not in path_or_text:
            if not os.path.isfile(path_or_text):
                raise ArgumentError(f"path_or_text: expected a YAML file or YAML text, got "
                                    f"'{path_or_text}', which is not a file")
            path = path_or_text
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
        else:
            text = path_or_text
        spec = cls()
        for field, value in _read_fields(text).items():
            setattr(spec, field, value)
        spec._text, spec._path = text, path
        return spec

    def to_yaml(self) -> str:
        """The spec as docs/spec.md's YAML (a from_yaml spec: the text it was read from)."""
        if self._text is not None:
            return self._text
        if self._yaml is None:
            self._yaml = self._write_yaml()
        return self._yaml

    def _write_yaml(self) -> str:
        body = []
        if self.head_dim is not None:
            body.append(f"head_dim: {_scalar(self.head_dim)}")
        if self.head_dim_v is not None:
            body.append(f"head_dim_v: {_scalar(self.head_dim_v)}")
        if self.dtype is not None:
            body.append(f"dtype: {_scalar(self.dtype)}")
        if self.heads is not None:
            q, kv = self.heads
            body.append(f"heads: {{q: {_scalar(q)}, kv: {_scalar(kv)}}}")
        if self.scale is not None:
            body.append(f"scale: {_scalar(self.scale)}")
        if self.mask is not None:
            body.append(f"mask: {_variant(self.mask, _MASK_KEYWORDS)}")
        if self.score is not None:
            body.append(f"score: {_variant(self.score, _SCORE_KEYWORDS)}")
        if self.dropout is not None:
            body.append(f"dropout: {_flow(self.dropout)}")
        if self.inputs:
            body.append("inputs:")
            for input_name, decl in self.inputs.items():
                body.append(f"  {_scalar(input_name)}: {_flow(decl)}")
        name = self.name
        if name is None:
            # Named by the rest, so that two specs share a kernel name only when they are equal.
            digest = hashlib.sha1("\n".join(body).encode()).hexdigest()[:10]
            name = f"attnc_{digest}"
        return "\n".join([f"name: {_scalar(name)}"] + body) + "\n"

    def replace(self, **fields: Any) -> "Spec":
        """A copy with the given fields changed (a from_yaml spec's copy is built from fields)."""
        unknown = sorted(set(fields) - set(_FIELDS))
        if unknown:
            raise ArgumentError(f"replace: unknown field '{unknown[0]}'; expected one of "
                                f"{', '.join(_FIELDS)}")
        if self._text is not None and self.head_dim is None:
            raise ArgumentError("replace: a spec read from YAML needs PyYAML to read its fields "
                                "(pip install pyyaml, or attnc[yaml])")
        values = {f: getattr(self, f) for f in _FIELDS}
        values.update(fields)
        return Spec(values.pop("head_dim"), **values)

    def key(self) -> tuple:
        """A hashable key, equal for specs that write the same YAML; Spec.from_key(key) makes
        the spec back. Only str, ints, bools, None and tuples, so torch.compile takes it as a
        constant."""
        if self._key is None:
            if self._text is not None:
                key = ("text", self._text, self._path)
            else:
                key = ("fields",) + tuple(_freeze(getattr(self, f)) for f in _FIELDS)
            object.__setattr__(self, "_key", key)
        return self._key

    @classmethod
    def from_key(cls, key: tuple) -> "Spec":
        """The spec whose key() is `key`."""
        spec = cls()
        if key[0] == "text":
            for field, value in _read_fields(key[1]).items():
                setattr(spec, field, value)
            spec._text, spec._path = key[1], key[2]
            return spec
        values = {f: _thaw(v) for f, v in zip(_FIELDS, key[1:])}
        if values["heads"] is not None:
            values["heads"] = tuple(values["heads"])
        return cls(values.pop("head_dim"), **values)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Spec) and self.key() == other.key()

    def __hash__(self) -> int:
        return hash(self.key())

    def __repr__(self) -> str:
        given = ", ".join(f"{f}={getattr(self, f)!r}" for f in _FIELDS
                          if getattr(self, f) is not None)
        where = f", from {self._path!r}" if self._path else ""
        return f"Spec({given}{where})"


def _read_fields(text: str) -> dict:
    """The fields of a spec's YAML text, as Spec keeps them; {} when PyYAML is missing or the
    text does not parse (the compiler then reports what is wrong, at its line)."""
    try:
        import yaml
        data = yaml.safe_load(text)
    except Exception:  # ImportError, or any YAML error: the compiler's message is the better one
        return {}
    if not isinstance(data, dict):
        return {}
    fields = {f: data[f] for f in _FIELDS if f in data}
    try:
        fields["heads"] = _normalize_heads(fields.get("heads"))
    except ArgumentError:
        fields.pop("heads")
    if fields.get("scale") == "auto":
        fields["scale"] = None
    return fields
