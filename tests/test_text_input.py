"""Text input, route by route: csv, jsonl, Parquet, hf-disk and folders of train/test files train and audit on a
tiny text model; encodings are read (UTF-8 with or without a BOM, --encoding, recorded for audit and export); and a
bad file (no such column, empty, not UTF-8, a text column that holds no strings) is one line, exit 2, no checkpoint."""

from __future__ import annotations

import csv
import io
import json
import random

import pytest
import torch
from helpers import assert_user_error, invoke, run_laya

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

TOPICS = {
    "food": "bread cheese apple soup rice café crème".split(),
    "sport": "ball goal team match score player coach".split(),
}


def rows(n: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        topic = list(TOPICS)[i % len(TOPICS)]
        out.append((" ".join(rng.choices(TOPICS[topic], k=5)), topic))
    return out


def csv_text(data: list[tuple[str, str]], header=("text", "label")) -> str:
    buf = io.StringIO(newline="")
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(data)
    return buf.getvalue()


def write_jsonl(path, data, text="text", label="label"):
    path.write_text("".join(json.dumps({text: t, label: y}, ensure_ascii=False) + "\n" for t, y in data), "utf-8")
    return path


def write_parquet(path, data, **columns):
    table = {"text": [t for t, _ in data], "label": [y for _, y in data]}
    pq.write_table(pa.table({**table, **columns}), path)
    return path


def save_hf_disk(path, splits: dict, label="label", **features):
    datasets = pytest.importorskip("datasets")
    parts = {}
    for name, data in splits.items():
        table = {"text": [t for t, _ in data], label: [y for _, y in data], **features}
        parts[name] = datasets.Dataset.from_dict(table)
    (datasets.DatasetDict(parts) if len(parts) > 1 else parts["all"]).save_to_disk(str(path))
    return path


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    """A 3-layer BERT from a config, saved without a tokenizer (laya learns a word-level one)."""
    root = tmp_path_factory.mktemp("bert")
    config = transformers.BertConfig(
        vocab_size=200,
        hidden_size=16,
        num_hidden_layers=3,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=32,
    )
    torch.manual_seed(0)
    transformers.AutoModel.from_config(config).save_pretrained(root)
    return root


def train(bert, dataset, out, *extra):
    args = ["--backbone", f"hf:{bert}", "--dataset", dataset, "--max-length", "8", "--epochs", "1"]
    return invoke("train", *args, "--batch-size", "32", "--out", out, "-q", *extra)


def make_route(route: str, root):
    """(dataset, options, size of the official test split or None) for each text route."""
    data, test = rows(60, 0), rows(20, 1)
    root.mkdir()
    if route == "csv":
        (root / "t.csv").write_text(csv_text(data), "utf-8")
        return f"csv:{root / 't.csv'}", [], None
    if route == "csv-folder":
        (root / "train.csv").write_text(csv_text(data), "utf-8")
        (root / "test.csv").write_text(csv_text(test), "utf-8")
        return f"csv:{root}", [], 20
    if route == "jsonl":
        write_jsonl(root / "t.jsonl", data, text="sentence", label="topic")
        return f"jsonl:{root / 't.jsonl'}", ["--text-column", "sentence", "--label-column", "topic"], None
    if route == "parquet":  # a `text` column and no image column: text, as a csv is, without --text-column
        write_parquet(root / "t.parquet", data)
        return f"parquet:{root / 't.parquet'}", [], None
    if route == "parquet-folder":  # the hub's layout: data/train-0000k-of-00002.parquet, data/test-….parquet
        (root / "data").mkdir()
        write_parquet(root / "data" / "train-00000-of-00002.parquet", data[:30])
        write_parquet(root / "data" / "train-00001-of-00002.parquet", data[30:])
        write_parquet(root / "data" / "test-00000-of-00001.parquet", test)
        return f"parquet:{root}", ["--text-column", "text"], 20
    assert route == "hf-disk"
    save_hf_disk(root / "disk", {"train": data, "test": test})
    return f"hf-disk:{root / 'disk'}", ["--text-column", "text"], 20


ROUTES = ["csv", "csv-folder", "jsonl", "parquet", "parquet-folder", "hf-disk"]


@pytest.mark.parametrize("route", ROUTES)
def test_every_text_route_trains_then_audits(bert, tmp_path, route):
    dataset, options, n_test = make_route(route, tmp_path / "data")
    out = tmp_path / "m.pt"
    r = train(bert, dataset, out, *options)
    assert r.exit_code == 0, r.output
    ckpt = torch.load(out, weights_only=True)
    assert ckpt["classes"] == ["food", "sport"] and "encoding" not in ckpt["dataset"]
    r = invoke("audit", out, "--samples", "8", "--compare", "gradxact", "--json", tmp_path / "a.json", "-q")
    assert r.exit_code == 0, r.output
    n = json.loads((tmp_path / "a.json").read_text())["n_samples"]
    assert n == 8
    if n_test is not None:  # the official split: every test file's rows, every train shard's rows
        from laya_cli.data.datasets import load_dataset
        from laya_cli.data.settings import DataSettings

        d = load_dataset(DataSettings(name=dataset, text_column="text"))
        assert len(d.test) == n_test and len(d.train) + len(d.val) == 60


def test_parquet_shards_without_split_names_are_one_data_set(tmp_path):
    from laya_cli.data.datasets import load_dataset
    from laya_cli.data.settings import DataSettings

    (tmp_path / "data").mkdir()
    write_parquet(tmp_path / "data" / "part-0.parquet", rows(30, 0))
    write_parquet(tmp_path / "data" / "part-1.parquet", rows(30, 1))
    d = load_dataset(DataSettings(name=f"parquet:{tmp_path}"))
    assert len(d.train) + len(d.val) + len(d.test) == 60


# --------------------------------------------------------------------------- encodings


LATIN = csv_text(rows(60, 0))


def test_utf8_with_a_byte_order_mark_is_read_as_utf8(tmp_path):
    from laya_cli.data.datasets import load_dataset
    from laya_cli.data.settings import DataSettings

    (tmp_path / "plain.csv").write_bytes(LATIN.encode("utf-8"))
    (tmp_path / "bom.csv").write_bytes(LATIN.encode("utf-8-sig"))
    write_jsonl(tmp_path / "bom.jsonl", rows(60, 0))
    (tmp_path / "bom.jsonl").write_bytes(b"\xef\xbb\xbf" + (tmp_path / "bom.jsonl").read_bytes())
    plain = load_dataset(DataSettings(name=f"csv:{tmp_path / 'plain.csv'}"))
    for name, encoding in (("csv:bom.csv", None), ("jsonl:bom.jsonl", None), ("csv:bom.csv", "UTF8")):
        kind, _, file = name.partition(":")
        d = load_dataset(DataSettings(name=f"{kind}:{tmp_path / file}", encoding=encoding))
        assert d.test.texts == plain.test.texts and any("café" in t for t in d.test.texts)


@pytest.mark.parametrize("encoding", ["latin-1", "cp1252", "utf-16"])
def test_encoding_reads_the_file_and_is_recorded_for_audit_and_export(bert, tmp_path, encoding):
    path = tmp_path / "reviews.csv"
    path.write_bytes(LATIN.encode(encoding))
    out = tmp_path / "m.pt"
    r = train(bert, f"csv:{path}", out, "--encoding", encoding)
    assert r.exit_code == 0, r.output
    recorded = torch.load(out, weights_only=True)["dataset"]["encoding"]
    assert recorded == {"latin-1": "iso8859-1", "cp1252": "cp1252", "utf-16": "utf-16"}[encoding]
    assert f"encoding {recorded}" in invoke("info", out).output
    r = invoke("export", out, "--out", tmp_path / "export", "--no-plots", "-q")  # no --encoding: the recorded one
    assert r.exit_code == 0, r.output
    with open(tmp_path / "export" / "samples.csv", newline="", encoding="utf-8") as f:
        texts = [row["text"] for row in csv.DictReader(f)]
    assert any("café crème" in t for t in texts) and not any("Ã" in t for t in texts)


def test_the_recorded_encoding_is_for_the_recorded_file_only(bert, tmp_path):
    """Another file given to audit is UTF-8 unless --encoding says otherwise: latin-1 decodes any bytes, so
    carrying it over to a UTF-8 file would garble its texts silently."""
    (tmp_path / "latin.csv").write_bytes(LATIN.encode("latin-1"))
    (tmp_path / "utf8.csv").write_bytes(LATIN.encode("utf-8"))
    (tmp_path / "again.csv").write_bytes(LATIN.encode("latin-1"))
    out = tmp_path / "m.pt"
    assert train(bert, f"csv:{tmp_path / 'latin.csv'}", out, "--encoding", "latin-1").exit_code == 0
    r = invoke("audit", out, "--dataset", f"csv:{tmp_path / 'utf8.csv'}", "--samples", "4", "--compare", "gradxact")
    assert r.exit_code == 0, r.output
    r = invoke("audit", out, "--dataset", f"csv:{tmp_path / 'again.csv'}", "--samples", "4", "--compare", "gradxact")
    assert_user_error(r, "again.csv line", "0xe9 is not UTF-8", "--encoding")
    for command in (["audit", out], ["export", out, "--out", tmp_path / "x"], ["depth", out]):
        r = invoke(*command, "--dataset", f"csv:{tmp_path / 'again.csv'}", "--encoding", "latin-1", "--samples", "4")
        assert r.exit_code == 0, r.output
    r = invoke("diff", out, out, "--dataset", f"csv:{tmp_path / 'utf8.csv'}", "--encoding", "utf-8", "--samples", "4")
    assert r.exit_code == 0, r.output


# --------------------------------------------------------------------------- bad files: one line, exit 2


def bad_files(root) -> dict:
    """name -> (dataset, options, fragments the one line must hold)."""
    root.mkdir()
    good = rows(20, 0)
    (root / "latin.csv").write_bytes(csv_text(good).encode("latin-1"))
    (root / "utf16.csv").write_bytes(csv_text(good).encode("utf-16"))
    (root / "utf16le.csv").write_bytes(csv_text(good).encode("utf-16-le"))  # no byte-order mark
    (root / "empty.csv").write_bytes(b"")
    (root / "header.csv").write_text("text,label\n")
    (root / "nolabel.csv").write_text(csv_text(good, header=("text", "topic")))
    (root / "latin.jsonl").write_bytes(b'{"text": "ok", "label": "a"}\n{"text": "caf\xe9", "label": "b"}\n')
    (root / "empty.jsonl").write_bytes(b"\n")
    write_jsonl(root / "number.jsonl", good)
    with open(root / "number.jsonl", "a") as f:
        f.write(json.dumps({"text": 7, "label": "food"}) + "\n")
    write_parquet(root / "ints.parquet", good, text=list(range(len(good))))
    write_parquet(root / "bytes.parquet", good, text=[t.encode() for t, _ in good])
    write_parquet(root / "nolabel.parquet", good, label=[None] * len(good))
    pq.write_table(pa.table({"text": ["a b"] * 4, "topic": ["x", "y"] * 2}), root / "nolabelcol.parquet")
    pq.write_table(
        pa.table({"text": pa.array([], pa.string()), "label": pa.array([], pa.string())}), root / "0.parquet"
    )
    (root / "zero.parquet").write_bytes(b"")
    save_hf_disk(root / "hf-ints", {"all": good}, text=list(range(len(good))))
    save_hf_disk(root / "hf-nolabel", {"all": good}, label="topic")
    return {
        "not utf-8": (f"csv:{root / 'latin.csv'}", [], ["latin.csv line 2, byte", "0xe9 is not UTF-8", "--encoding"]),
        "utf-16": (f"csv:{root / 'utf16.csv'}", [], ["utf16.csv is UTF-16", "--encoding utf-16"]),
        "utf-16 without bom": (f"csv:{root / 'utf16le.csv'}", [], ["line 1, byte 1 of the file: 0x00", "utf-16-le"]),
        "wrong codec": (f"csv:{root / 'utf16.csv'}", ["--encoding", "ascii"], ["0xff", "is not ascii"]),
        "unknown codec": (f"csv:{root / 'latin.csv'}", ["--encoding", "latin-9000"], ["--encoding latin-9000"]),
        "no codec": (f"csv:{root / 'latin.csv'}", ["--encoding", "base64"], ["not a text encoding"]),
        "codec for parquet": (f"parquet:{root / 'ints.parquet'}", ["--encoding", "latin-1"], ["csv: and jsonl:"]),
        "jsonl not utf-8": (f"jsonl:{root / 'latin.jsonl'}", [], ["latin.jsonl line 2, byte 42 of the file", "0xe9"]),
        "empty csv": (f"csv:{root / 'empty.csv'}", [], ["empty.csv is empty", "header"]),
        "header only": (f"csv:{root / 'header.csv'}", [], ["header.csv has no rows"]),
        "empty jsonl": (f"jsonl:{root / 'empty.jsonl'}", [], ["empty.jsonl has no rows"]),
        "no text column": (f"csv:{root / 'latin.csv'}", ["--encoding", "cp1252", "--text-column", "body"], ["'body'"]),
        "no label column": (f"csv:{root / 'nolabel.csv'}", [], ["no column 'label'", "text, topic", "--label-column"]),
        "jsonl number": (f"jsonl:{root / 'number.jsonl'}", [], ["line 21", "JSON number, not a string"]),
        "parquet ints": (f"parquet:{root / 'ints.parquet'}", ["--text-column", "text"], ["'text' holds int64"]),
        "parquet bytes": (f"parquet:{root / 'bytes.parquet'}", ["--text-column", "text"], ["holds binary values"]),
        "parquet empty labels": (f"parquet:{root / 'nolabel.parquet'}", [], ["row 0", "empty 'label'"]),
        "parquet no label": (f"parquet:{root / 'nolabelcol.parquet'}", [], ["no column 'label'", "--label-column"]),
        "parquet no rows": (f"parquet:{root / '0.parquet'}", ["--text-column", "text"], ["has no rows"]),
        "parquet not parquet": (f"parquet:{root / 'zero.parquet'}", ["--text-column", "text"], ["not a readable"]),
        "hf-disk ints": (f"hf-disk:{root / 'hf-ints'}", ["--text-column", "text"], ["'text' holds int64"]),
        "hf-disk no label": (
            f"hf-disk:{root / 'hf-nolabel'}",
            ["--text-column", "text"],
            ["no column 'label'", "topic"],
        ),
    }


@pytest.fixture(scope="module")
def bad(tmp_path_factory):
    return bad_files(tmp_path_factory.mktemp("bad") / "files")


BAD = [
    "not utf-8",
    "utf-16",
    "utf-16 without bom",
    "wrong codec",
    "unknown codec",
    "no codec",
    "codec for parquet",
    "jsonl not utf-8",
    "empty csv",
    "header only",
    "empty jsonl",
    "no text column",
    "no label column",
    "jsonl number",
    "parquet ints",
    "parquet bytes",
    "parquet empty labels",
    "parquet no label",
    "parquet no rows",
    "parquet not parquet",
    "hf-disk ints",
    "hf-disk no label",
]


def test_every_bad_file_is_tested(bad):
    assert sorted(bad) == sorted(BAD)


@pytest.mark.parametrize("case", BAD)
def test_a_bad_text_file_is_one_line_and_writes_nothing(bert, bad, tmp_path, case):
    dataset, options, fragments = bad[case]
    out = tmp_path / "never.pt"
    assert_user_error(train(bert, dataset, out, *options), *fragments)
    assert not out.exists() and not out.with_name(out.name + ".state").exists()


def test_an_image_dataset_on_a_text_model_is_refused_before_decoding(bert, tmp_path):
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (4, 4)).save(buf, format="PNG")
    pq.write_table(pa.table({"image": [buf.getvalue()] * 4, "label": ["a", "b"] * 2}), tmp_path / "img.parquet")
    r = train(bert, f"parquet:{tmp_path / 'img.parquet'}", tmp_path / "x.pt")
    assert_user_error(r, "is a text model", "holds images")


def test_a_real_process_says_one_line_on_stderr(bert, bad, tmp_path):
    dataset = bad["not utf-8"][0]
    out = tmp_path / "never.pt"
    p = run_laya("train", "--backbone", f"hf:{bert}", "--dataset", dataset, "--epochs", "1", "--out", out, "-q")
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "0xe9 is not UTF-8" in lines[0], p.stderr
    assert "Traceback" not in p.stdout + p.stderr and not out.exists()
    p = run_laya("train", "--backbone", f"hf:{bert}", "--dataset", dataset, "--encoding", "latin-1", "--epochs", "1",
                 "--max-length", "8", "--out", out, "-q")  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert torch.load(out, weights_only=True)["dataset"]["encoding"] == "iso8859-1"
