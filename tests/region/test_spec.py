from __future__ import annotations

from pathlib import Path

import pytest

from arbiter import AttentionRegion, FusedRegion, RowwiseRegion, SpecError, load_spec, parse_spec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "regions.toml"


def test_example_spec_covers_the_classic_chains():
    spec = load_spec(EXAMPLES)
    kinds = [type(r) for r in spec]
    assert kinds.count(FusedRegion) >= 7 and RowwiseRegion in kinds and AttentionRegion in kinds
    fused = [r for r in spec if isinstance(r, FusedRegion)]
    ops = {op.value for r in fused for op in r.epilogue}
    assert {"relu", "gelu", "silu", "bias"} <= ops
    assert {r.reduction.value for r in fused if r.reduction} == {"softmax", "rmsnorm", "layer_norm"}
    assert any(r.prologue for r in fused)


def test_parse_all_fields():
    spec = parse_spec(
        """
        [[region]]
        name = "a"
        M = 4
        N = 8
        K = 2
        prologue = ["tanh"]
        epilogue = ["bias", "silu"]
        residual = true
        reduction = "layer_norm"
        eps = 1e-6
        budget = 0.01

        [[region]]
        name = "b"
        kind = "attention"
        batch = 2
        heads = 3
        seq_q = 5
        seq_k = 7
        head_dim = 16
        causal = true
        scale = 0.5
        """
    )
    a, b = spec.regions
    assert a == FusedRegion(
        4,
        8,
        2,
        prologue=("tanh",),
        epilogue=("bias", "silu"),
        residual=True,
        reduction="layer_norm",
        eps=1e-6,
    )
    assert a.budget == 0.01 and a.name == "a"
    assert b == AttentionRegion(2, 3, 5, 16, seq_k=7, causal=True, scale=0.5)
    assert spec.get("b") is b


@pytest.mark.parametrize(
    "body, needle",
    [
        (
            'name = "r"\nM = 4\nN = 4\nK = 4\nepilogue = ["swish"]',
            "region 'r': epilogue[0]: unknown op 'swish'",
        ),
        ('name = "r"\nM = 4\nN = 4', "region 'r': field 'K': required"),
        ('name = "r"\nM = "4"\nN = 4\nK = 4', "region 'r': field 'M': expected integer, got str"),
        ('name = "r"\nM = 4\nN = 4\nK = 4\nresidual = 1', "field 'residual': expected boolean"),
        ('name = "r"\nM = true\nN = 4\nK = 4', "field 'M': expected integer, got boolean"),
        (
            'name = "r"\nM = 4\nN = 4\nK = 4\nhead_dim = 3',
            "field 'head_dim': not a field of a fused",
        ),
        ('name = "r"\nkind = "conv"\nM = 4', "field 'kind': unknown kind 'conv'"),
        ("M = 4\nN = 4\nK = 4", "region #1: field 'name': required"),
        ('name = "a b"\nM = 4\nN = 4\nK = 4', "field 'name': use letters"),
        ('name = "r"\nM = 0\nN = 4\nK = 4', "region 'r': M must be a positive integer"),
        (
            'name = "r"\nkind = "attention"\nbatch = 1\nheads = 1\nseq_q = 4',
            "field 'head_dim': required",
        ),
    ],
)
def test_bad_regions_name_file_region_and_field(body, needle):
    with pytest.raises(SpecError) as e:
        parse_spec("[[region]]\n" + body, "my.toml")
    msg = str(e.value)
    assert msg.startswith("my.toml: ") and needle in msg and "\n" not in msg


def test_duplicate_names_and_file_level_errors(tmp_path):
    dup = '[[region]]\nname="r"\nkind="rowwise"\nM=1\nN=2\nreduction="softmax"\n' * 2
    with pytest.raises(SpecError, match="region 'r': field 'name': duplicate name"):
        parse_spec(dup, "d.toml")
    with pytest.raises(SpecError, match="not valid TOML"):
        parse_spec("[[region]\n", "bad.toml")
    with pytest.raises(SpecError, match="no \\[\\[region\\]\\] tables"):
        parse_spec("", "empty.toml")
    with pytest.raises(SpecError, match="unknown top-level key 'regions'"):
        parse_spec("[[regions]]\nname='x'", "t.toml")
    with pytest.raises(SpecError, match="no such spec file"):
        load_spec(tmp_path / "missing.toml")
    with pytest.raises(SpecError, match="no region named 'zz'"):
        load_spec(EXAMPLES).get("zz")


def test_a_size_range_expands_into_its_powers_of_two_and_ends():
    from arbiter.region import parse_spec

    spec = parse_spec('[[region]]\nname = "mm"\nM = [3, 40]\nN = [16, 32]\nK = 8\n'
                      'epilogue = ["relu"]\n')
    assert spec.names() == [f"mm-M{m}-N{n}" for m in (3, 4, 8, 16, 32, 40) for n in (16, 32)]
    assert {(r.M, r.N, r.K) for r in spec} == {(m, n, 8) for m in (3, 4, 8, 16, 32, 40)
                                               for n in (16, 32)}


@pytest.mark.parametrize("value,says", [
    ("[0, 8]", "a range is [low, high]"),
    ("[9, 8]", "a range is [low, high]"),
    ("[1, 2, 3]", "a range is [low, high]"),
    ('["a", 8]', "a range is [low, high]"),
    ("[true, 8]", "a range is [low, high]"),
])
def test_a_bad_size_range_is_one_line_naming_region_and_field(value, says):
    from arbiter import SpecError
    from arbiter.region import parse_spec

    with pytest.raises(SpecError) as e:
        parse_spec(f'[[region]]\nname = "mm"\nM = {value}\nN = 8\nK = 8\n', "s.toml")
    assert str(e.value).startswith("s.toml: region 'mm': field 'M'")
    assert says in str(e.value) and "\n" not in str(e.value)


def test_ranges_that_make_too_many_regions_are_refused():
    from arbiter.region import parse_spec

    with pytest.raises(SpecError, match="its ranges make 121 regions, more than 64"):
        parse_spec('[[region]]\nname = "mm"\nM = [1, 1024]\nN = [1, 1024]\nK = 8\n')


def test_a_bucket_region_is_its_buckets_top_in_the_sizes_a_model_changes():
    spec = parse_spec('[[region]]\nname = "mm"\nM = 300\nN = 100\nK = 24\nshapes = "bucket"\n'
                      '[[region]]\nname = "att"\nkind = "attention"\nbatch = 3\nheads = 6\n'
                      'seq_q = 1\nseq_k = 3000\nhead_dim = 80\nshapes = "bucket"\n')
    mm, att = spec
    assert (mm.M, mm.N, mm.K) == (512, 100, 24)  # N and K are the model's: kept
    assert (att.batch, att.heads, att.seq_q, att.seq_k, att.head_dim) == (4, 6, 1, 4096, 80)
    # any shape of the bucket is the same region: one tuning answers them all
    same = parse_spec('[[region]]\nname = "x"\nM = 257\nN = 100\nK = 24\nshapes = "bucket"\n')
    assert same.get("x").key == mm.key
    with pytest.raises(SpecError, match="field 'shapes': 'static' \\(default\\) or 'bucket'"):
        parse_spec('[[region]]\nname = "mm"\nM = 3\nN = 1\nK = 1\nshapes = "dynamic"\n')


def test_causal_alignment_is_spelled_in_the_spec():
    spec = parse_spec('[[region]]\nname = "a"\nkind = "attention"\nbatch = 1\nheads = 1\n'
                      'seq_q = 4\nseq_k = 9\nhead_dim = 8\ncausal = "top_left"\n'
                      '[[region]]\nname = "b"\nkind = "attention"\nbatch = 1\nheads = 1\n'
                      'seq_q = 4\nseq_k = 9\nhead_dim = 8\ncausal = "bottom_right"\n')
    assert spec.get("a").causal_offset == 0 and spec.get("b").causal_offset == 5
    assert spec.get("b").causal is True  # the same region as `causal = true`
    with pytest.raises(SpecError, match="region 'c': causal must be true, false"):
        parse_spec('[[region]]\nname = "c"\nkind = "attention"\nbatch = 1\nheads = 1\n'
                   'seq_q = 4\nhead_dim = 8\ncausal = "diagonal"\n')
