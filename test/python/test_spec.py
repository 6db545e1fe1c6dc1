"""attnc.Spec: the YAML it writes for each field and variant, that the compiler accepts it (for
sm_90a and sm_80, through NVRTC, no GPU), from_yaml's file:line:col messages, replace and keys."""
import pytest

import attnc

# Each variant the contract names, written through Python (mask, score, inputs).
VARIANTS = {
    "causal": dict(mask="causal"),
    "top_left": dict(mask={"causal": "top_left"}),
    "window": dict(mask={"window": 128}),
    "prefix": dict(mask={"prefix": 64}),
    "document": dict(mask={"document": "doc", "causal": True},
                     inputs={"doc": {"dtype": "i32", "dims": ["b", "pos"]}}),
    "expression": dict(mask="k <= q && q - k < 100"),
    "softcap": dict(score={"softcap": 30.0}),
    "softcap_expr": dict(score="30 * tanh(score / 30)"),
    "alibi": dict(score="alibi"),
    "alibi_input": dict(score={"alibi": "slopes"},
                        inputs={"slopes": {"dtype": "f32", "dims": ["h"]}}),
    "dropout_rounds": dict(dropout={"p": 0.1, "rounds": 10}),
}


def test_to_yaml_writes_every_given_field():
    spec = attnc.Spec(128, heads=(32, 8), head_dim_v=64, dtype="fp16", scale=0.5,
                      mask={"window": 256}, score="30 * tanh(score / 30)", dropout=0.1,
                      inputs={"doc": {"dtype": "i32", "dims": ["pos"]}}, name="my_kernel")
    lines = spec.to_yaml().splitlines()
    assert lines == ["name: my_kernel", "head_dim: 128", "head_dim_v: 64", "dtype: fp16",
                     "heads: {q: 32, kv: 8}", "scale: 0.5", "mask: {window: 256}",
                     "score: '30 * tanh(score / 30)'", "dropout: 0.1", "inputs:",
                     "  doc: {dtype: i32, dims: [pos]}"]


def test_default_name_is_an_identifier_that_follows_the_fields():
    a = attnc.Spec(64, heads=4, mask="causal")
    b = attnc.Spec(64, heads=4, mask="causal")
    c = attnc.Spec(64, heads=4)
    name = a.to_yaml().splitlines()[0].split(": ")[1]
    assert name.isidentifier() and len(name) <= 64
    assert a.to_yaml() == b.to_yaml()
    assert c.to_yaml().splitlines()[0] != a.to_yaml().splitlines()[0]


@pytest.mark.parametrize("heads, written", [(8, "{q: 8, kv: 8}"), ((8, 2), "{q: 8, kv: 2}"),
                                            ({"q": 8, "kv": 4}, "{q: 8, kv: 4}")])
def test_heads_forms(heads, written):
    assert f"heads: {written}" in attnc.Spec(64, heads=heads).to_yaml().splitlines()


def test_quotes_survive_in_expressions():
    spec = attnc.Spec(64, heads=1, mask="k <= q || k == 0", name="quoted")
    assert "mask: 'k <= q || k == 0'" in spec.to_yaml()
    assert attnc.compile(spec, target="sm_80").info.name == "quoted"


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_compiler_accepts_each_variant_for_sm90a(variant):
    spec = attnc.Spec(64, heads=(4, 2), **VARIANTS[variant])
    kernel = attnc.compile(spec, target="sm_90a")
    assert kernel.info.target == "sm_90a"
    assert kernel.info.input_names == tuple((VARIANTS[variant].get("inputs") or {}).keys())


def test_compiler_accepts_sm80_with_backward():
    spec = attnc.Spec(64, heads=2, **VARIANTS["document"])
    kernel = attnc.compile(spec, target="sm_80", backward=True)
    assert kernel.info.target == "sm_80" and kernel.info.has_backward


def test_from_yaml_file_errors_point_into_the_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: bad\nheads: 4\nhead_dim: 100\n")
    spec = attnc.Spec.from_yaml(str(path))
    with pytest.raises(attnc.SpecError) as error:
        attnc.compile(spec, target="sm_80")
    assert str(error.value).startswith(f"{path}:3:11: error: head_dim:")
    assert "^" in str(error.value)


def test_expression_errors_show_a_caret(tmp_path):
    path = tmp_path / "expr.yaml"
    path.write_text("name: e\nhead_dim: 64\nheads: 4\nmask: q >= kk\n")
    with pytest.raises(attnc.SpecError) as error:
        attnc.compile(attnc.Spec.from_yaml(str(path)), target="sm_80")
    message = str(error.value)
    assert message.startswith(f"{path}:4:12: error: mask: unknown identifier 'kk'")
    assert message.splitlines()[1:3] == ["mask: q >= kk", "           ^"]


def test_python_spec_errors_name_the_field():
    with pytest.raises(attnc.SpecError) as error:
        attnc.compile(attnc.Spec(100, heads=4), target="sm_80")
    assert "head_dim: must be a multiple of 8" in str(error.value)


def test_from_yaml_text_reads_fields_and_compiles_as_written():
    text = "name: from_text\nhead_dim: 64\nheads: {q: 8, kv: 2}\nmask: causal\n"
    spec = attnc.Spec.from_yaml(text)
    assert spec.to_yaml() == text
    assert attnc.compile(spec, target="sm_80").info.name == "from_text"
    pytest.importorskip("yaml", reason="reading a YAML spec's fields back needs PyYAML")
    assert (spec.head_dim, spec.heads, spec.mask) == (64, (8, 2), "causal")


def test_from_yaml_missing_file_is_an_argument_error(tmp_path):
    with pytest.raises(attnc.ArgumentError, match="path_or_text"):
        attnc.Spec.from_yaml(str(tmp_path / "missing.yaml"))


def test_replace_changes_only_the_given_fields():
    spec = attnc.Spec(64, heads=(8, 2), mask="causal", name="a")
    other = spec.replace(mask={"window": 32})
    assert other.mask == {"window": 32} and spec.mask == "causal"
    assert (other.head_dim, other.heads, other.name) == (64, (8, 2), "a")
    with pytest.raises(attnc.ArgumentError, match="replace: unknown field 'window'"):
        spec.replace(window=3)


def test_key_round_trips():
    for fields in VARIANTS.values():
        spec = attnc.Spec(64, heads=(4, 2), **fields)
        back = attnc.Spec.from_key(spec.key())
        assert back == spec and back.to_yaml() == spec.to_yaml()
    text = attnc.Spec.from_yaml("name: t\nhead_dim: 64\nheads: 2\n")
    assert attnc.Spec.from_key(text.key()).to_yaml() == text.to_yaml()


@pytest.mark.parametrize("field, value", [("head_dim", "64"), ("head_dim_v", 6.5),
                                          ("heads", "four"), ("dtype", 16), ("mask", 3),
                                          ("score", ["alibi"]), ("inputs", ["doc"]),
                                          ("name", 7), ("scale", "auto")])
def test_wrong_python_types_name_the_field(field, value):
    fields = {"head_dim": 64, "heads": 4, field: value}
    with pytest.raises(attnc.ArgumentError, match=f"^{field}: expected"):
        attnc.Spec(fields.pop("head_dim"), **fields)
