"""hf: backbones and text data: taps against transformers' own hidden_states, mask-aware pooling against a
by-hand loop, the text sources, the whole pipeline on an encoder and a decoder, and the bad inputs."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import pytest
import torch
from helpers import assert_user_error, invoke

from laya_cli import backbones as bb
from laya_cli.backbones import hf
from laya_cli.backbones import tokenizers as tokenization
from laya_cli.backbones.pooling import TapFormat
from laya_cli.data.datasets import load_dataset
from laya_cli.data.settings import DataSettings
from laya_cli.runtime.errors import LayaError

transformers = pytest.importorskip("transformers")

SMALL = dict(num_hidden_layers=3, num_attention_heads=2, intermediate_size=64)
CONFIGS = {
    "bert": lambda: transformers.BertConfig(vocab_size=1000, hidden_size=32, max_position_embeddings=64, **SMALL),
    "gpt2": lambda: transformers.GPT2Config(vocab_size=1000, n_embd=32, n_layer=3, n_head=2, n_positions=64),
    "llama": lambda: transformers.LlamaConfig(
        vocab_size=1000, hidden_size=32, num_key_value_heads=1, max_position_embeddings=64, **SMALL
    ),
    "vit": lambda: transformers.ViTConfig(image_size=32, patch_size=8, hidden_size=32, **SMALL),
    # one layer shared across depth: its module runs three times (taps per call)
    "albert": lambda: transformers.AlbertConfig(
        vocab_size=1000, embedding_size=16, hidden_size=32, max_position_embeddings=64, **SMALL
    ),
}
WORDS = {
    "animal": "dog cat horse bird fish lion tiger bear wolf fox".split(),
    "food": "bread cheese apple rice soup cake milk meat egg salt".split(),
    "tool": "hammer saw drill knife axe spade wrench file lever chisel".split(),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Each small config saved with save_pretrained (no tokenizer: laya trains one on the training split)."""
    root = tmp_path_factory.mktemp("hf")
    out = {}
    for name, config in CONFIGS.items():
        torch.manual_seed(0)
        transformers.AutoModel.from_config(config()).save_pretrained(root / name)
        out[name] = root / name
    return out


def write_texts(path, rows=240, seed=0):
    rng = random.Random(seed)
    vocab = sum(WORDS.values(), [])
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["text", "label"])
        for _ in range(rows):
            label = rng.choice(list(WORDS))
            w.writerow([" ".join(rng.choices(WORDS[label], k=5) + rng.choices(vocab, k=2)), label])
    return path


@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    return write_texts(tmp_path_factory.mktemp("text") / "texts.csv")


def tapped(path, **kw) -> bb.TappedBackbone:
    """The saved model with its weights (pretrained: as ``laya train`` loads a frozen hf: backbone)."""
    return bb.build_backbone(bb.BackboneSpec(f"hf:{path}", pretrained=True, **kw))


def tokens(backbone, strings):
    tokenization.train_tokenizer(backbone.input_cfg, sum(WORDS.values(), []) * 3, "test words")
    return tokenization.encode(backbone.input_cfg, strings)


# --------------------------------------------------------------------------- taps


@pytest.mark.parametrize(
    "name,layers,pool",
    [
        ("bert", "encoder.layer.{}", "cls"),
        ("gpt2", "h.{}", "last"),
        ("albert", "encoder.albert_layer_groups.0#{}", "cls"),
    ],
)
def test_taps_are_the_layers_behind_hidden_states(models, name, layers, pool):
    backbone = tapped(models[name], max_length=12).eval()
    assert backbone.layer_names == [layers.format(i) for i in range(3)]
    assert backbone.pool == pool  # the decoder is found causal on a probe, the encoder not
    x = tokens(backbone, ["dog cat bread", "a saw and a drill and an axe"])
    hs = backbone.activations(x)
    n = hs[0].shape[1]  # the batch reaches the model cut after its longest text
    assert n == int(x[:, 1].sum(1).max())
    with torch.no_grad():
        ids, mask = x[:, 0, :n].long(), x[:, 1, :n].long()
        ref = backbone.model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    for i in range(2):
        torch.testing.assert_close(hs[i], ref.hidden_states[i + 1])
    if name == "gpt2":  # a decoder's last hidden state has its final norm on top of the last layer's output
        torch.testing.assert_close(backbone.model.ln_f(hs[2]), ref.hidden_states[3])
    else:
        torch.testing.assert_close(hs[2], ref.hidden_states[3])


def test_vision_transformer_taps_and_prefix(models):
    backbone = tapped(models["vit"]).eval()
    assert backbone.layer_names == [f"layers.{i}" for i in range(3)] and backbone.pool == "cls"
    feats = backbone(torch.rand(2, 3, 32, 32))
    assert backbone.tap_formats == ["NLC+1"] * 3 and [f.shape for f in feats] == [(2, 32)] * 3


def test_layer_index_ranges_and_globs(models):
    assert tapped(models["llama"], layers=["1-2"]).layer_names == ["layers.1", "layers.2"]
    assert tapped(models["llama"], layers=["model.layers.*"]).layer_names == [f"layers.{i}" for i in range(3)]
    assert tapped(models["bert"], layers=["encoder.layer.0", "encoder.layer.2"]).layer_names == [
        "encoder.layer.0",
        "encoder.layer.2",
    ]
    with pytest.raises(LayaError, match="layers 0-2"):
        tapped(models["bert"], layers=["1-5"])


# --------------------------------------------------------------------------- pooling


def test_masked_pooling_equals_a_by_hand_loop():
    torch.manual_seed(0)
    h = torch.randn(4, 7, 5)
    lengths = [7, 3, 1, 5]
    mask = torch.tensor([[1] * n + [0] * (7 - n) for n in lengths])
    fmt = TapFormat("NLC")
    mean, last, first = (fmt.pool(h, how, mask=mask) for how in ("mean", "last", "cls"))
    for b, n in enumerate(lengths):
        torch.testing.assert_close(mean[b], h[b, :n].mean(0))
        torch.testing.assert_close(last[b], h[b, n - 1])
        torch.testing.assert_close(first[b], h[b, 0])


@pytest.mark.parametrize("name,pool", [("bert", "mean"), ("gpt2", "last"), ("llama", "mean")])
def test_padding_never_enters_the_features(models, name, pool):
    """The same texts padded to 10 or to 24 tokens give the same r_i: padding is masked out of pooling."""
    short, long = tapped(models[name], max_length=10, pool=pool).eval(), tapped(models[name], max_length=24, pool=pool)
    long.eval()
    strings = ["dog cat", "bread cheese apple rice"]
    a = short(tokens(short, strings))
    long.input_cfg.tokenizer, long.input_cfg.pad_id = short.input_cfg.tokenizer, short.input_cfg.pad_id
    b = long(tokenization.encode(long.input_cfg, strings))
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5)


# --------------------------------------------------------------------------- data


def test_text_sources_read_the_same_rows(tmp_path, texts):
    rows = list(csv.DictReader(open(texts)))
    with open(tmp_path / "t.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps({"sentence": r["text"], "y": r["label"]}) + "\n")
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(
        pa.table({"sentence": [r["text"] for r in rows], "y": [r["label"] for r in rows]}), tmp_path / "t.parquet"
    )
    import datasets

    datasets.Dataset.from_dict({"sentence": [r["text"] for r in rows], "y": [r["label"] for r in rows]}).save_to_disk(
        str(tmp_path / "disk")
    )
    loaded = [load_dataset(DataSettings(name=f"csv:{texts}"))]
    for name in (f"jsonl:{tmp_path / 't.jsonl'}", f"parquet:{tmp_path / 't.parquet'}", f"hf-disk:{tmp_path / 'disk'}"):
        loaded.append(load_dataset(DataSettings(name=name, text_column="sentence", label_column="y")))
    for d in loaded:
        assert d.classes == ["animal", "food", "tool"]
        assert d.test.texts == loaded[0].test.texts and torch.equal(d.test.labels, loaded[0].test.labels)
        assert len(d.train) + len(d.val) + len(d.test) == len(rows)


def test_a_folder_with_train_and_test_files_is_the_official_split(tmp_path):
    write_texts(tmp_path / "train.csv", 90, seed=1)
    write_texts(tmp_path / "test.csv", 30, seed=2)
    d = load_dataset(DataSettings(name=f"csv:{tmp_path}"))
    assert len(d.test) == 30 and len(d.train) + len(d.val) == 90


WORDNET_LINES = {
    "data.noun": [
        "  1 This software and database is being provided to you, the LICENSEE, by",
        "00015388 05 n 01 animal 0 001 @ 00004475 n 0000 | a living organism characterized by voluntary movement",
        "01317541 05 n 01 dog 0 001 @ 01317541 n 0000 | a member of the genus Canis",
        "02084071 05 n 01 cat 0 001 @ 01317541 n 0000 | feline mammal usually having thick soft fur",
        "07555863 13 n 01 food 0 001 @ 00021265 n 0000 | any substance that can be metabolized by an animal",
        "07679356 13 n 01 bread 0 001 @ 07555863 n 0000 | food made from dough of flour or meal",
        "07850329 13 n 01 cheese 0 001 @ 07555863 n 0000 | a solid food prepared from the pressed curd of milk",
    ],
    "data.verb": [
        '01168468 34 v 01 eat 0 001 @ 01157517 v 0000 01 + 08 00 | take in solid food; "She was eating a banana"',
        "01170052 34 v 01 drink 0 001 @ 01157517 v 0000 01 + 08 00 | take in liquids",
        "01835496 38 v 01 run 0 001 @ 01835496 v 0000 01 + 02 00 | move fast by using one's feet",
        "01904930 38 v 01 walk 0 001 @ 01835496 v 0000 01 + 02 00 | use one's feet to advance; advance by steps",
    ],
}


def test_wordnet_supersenses_label_glosses_by_lexicographer_file(tmp_path):
    for name, lines in WORDNET_LINES.items():
        (tmp_path / name).write_text("\n".join(lines * 5) + "\n")
    d = load_dataset(DataSettings(name="wordnet-supersenses", data_dir=str(tmp_path)))
    assert d.classes == ["noun.animal", "noun.food", "verb.consumption", "verb.motion"]
    texts = d.train.texts + d.val.texts + d.test.texts
    assert len(texts) == 50 and "a member of the genus Canis" in texts
    by_text = dict(zip(texts, torch.cat([d.train.labels, d.val.labels, d.test.labels]).tolist()))
    assert d.classes[by_text["take in liquids"]] == "verb.consumption"


@pytest.mark.skipif(
    not (Path("/usr/share/wordnet/data.noun").is_file()), reason="Debian's wordnet-base is not installed"
)
def test_the_real_wordnet_has_45_supersenses():
    d = load_dataset(DataSettings(name="wordnet-supersenses"))
    assert len(d.classes) == 45 and len(d.train) + len(d.val) + len(d.test) == 117659


# --------------------------------------------------------------------------- the pipeline


@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_train_audit_depth_on_an_encoder_and_a_decoder(models, texts, tmp_path, name):
    out = tmp_path / "m.pt"
    args = ["--dataset", f"csv:{texts}", "--max-length", "16", "--epochs", "3", "--out", out, "-q"]
    r = invoke("train", "--backbone", f"hf:{models[name]}", *args)
    assert r.exit_code == 0, r.output
    ckpt = torch.load(out, weights_only=True)
    assert ckpt["backbone"]["input"]["kind"] == "tokens" and ckpt["backbone"]["input"]["max_length"] == 16
    assert "word-level vocabulary of the csv:" in ckpt["backbone"]["input"]["source"]
    r = invoke(
        "audit", out, "--scope", "both", "--compare", "ig,gradxact", "--samples", "16", "--json", tmp_path / "a.json"
    )
    assert r.exit_code == 0, r.output
    report = json.loads((tmp_path / "a.json").read_text())
    assert set(report["scopes"]) == {"head", "network"} if "scopes" in report else True
    r = invoke("depth", out, "--samples", "16")
    assert r.exit_code == 0, r.output
    assert "h.2" in r.output or "encoder.layer.2" in r.output


def test_the_checkpoint_refuses_changed_weights(models, texts, tmp_path):
    import shutil

    local = tmp_path / "bert"
    shutil.copytree(models["bert"], local)
    out = tmp_path / "m.pt"
    assert (
        invoke(
            "train",
            "--backbone",
            f"hf:{local}",
            "--dataset",
            f"csv:{texts}",
            "--max-length",
            "16",
            "--epochs",
            "1",
            "--out",
            out,
            "-q",
        ).exit_code
        == 0
    )
    torch.manual_seed(1)
    transformers.AutoModel.from_config(CONFIGS["bert"]()).save_pretrained(local)  # other weights, same place
    assert_user_error(invoke("audit", out, "--samples", "8"), "differ from those the checkpoint was trained with")


def test_weights_the_folder_lacks_do_not_make_the_model_unloadable(texts, tmp_path):
    """A BertModel saved without its pooler: AutoModel creates one at random on every load. Seeded, so the model
    (and its SHA-256) is the same at every load; recorded in the checkpoint, shown by laya info, one warning."""
    torch.manual_seed(0)
    transformers.BertModel(CONFIGS["bert"](), add_pooling_layer=False).save_pretrained(tmp_path / "bert")
    out = tmp_path / "m.pt"
    r = invoke("train", "--backbone", f"hf:{tmp_path / 'bert'}", "--dataset", f"csv:{texts}", "--max-length", "16",
               "--epochs", "1", "--out", out)  # fmt: skip
    assert r.exit_code == 0, r.output
    warned = [line for line in r.stderr.splitlines() if "lacks weights" in line]
    assert len(warned) == 1 and "pooler.dense.weight" in warned[0] and "on no tap's path" in warned[0]
    assert torch.load(out, weights_only=True)["backbone"]["initialised"] == ["pooler.dense.bias", "pooler.dense.weight"]
    r = invoke("audit", out, "--samples", "8", "-q")
    assert r.exit_code == 0, r.output
    info = invoke("info", out, "--json")
    assert json.loads(info.stdout)["backbone"]["initialised_weights"] == ["pooler.dense.bias", "pooler.dense.weight"]


@pytest.mark.parametrize("mode, pool", [("pooling_mode_mean_tokens", "mean"), ("pooling_mode_cls_token", "cls")])
def test_a_sentence_transformers_folder_pools_as_it_declares(models, tmp_path, mode, pool):
    """``1_Pooling/config.json`` (named by ``modules.json``) says how the model's sentence embedding pools: --pool
    auto takes it (MiniLM: mean), the checkpoint records where it came from; without it a BERT pools its CLS."""
    import shutil

    folder = tmp_path / "st"
    shutil.copytree(models["bert"], folder)
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]))  # fmt: skip
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 32, mode: True}))
    backbone = tapped(folder, max_length=12)
    assert backbone.pool == pool and backbone.spec.pool == pool
    assert (
        bb.checkpoint_extras(backbone, backbone.spec, None)["pool_declared_by"]
        == "1_Pooling/config.json (sentence-transformers)"
    )
    assert tapped(models["bert"], max_length=12).pool == "cls"  # a plain BERT folder: its first token
    assert tapped(folder, max_length=12, pool="cls" if pool == "mean" else "mean").pool != pool  # --pool wins


def test_a_layer_shared_across_depth_is_tapped_patched_and_truncated_per_call(models, texts, tmp_path):
    """ALBERT runs one layer module at every depth: a tap per call (``…#k``), recorded, patched (network scope,
    Grad×Act through one point per call), truncated (the layer run k times) and read back."""
    out, small = tmp_path / "m.pt", tmp_path / "small.pt"
    args = ["--dataset", f"csv:{texts}", "--max-length", "16", "--epochs", "2", "-q"]
    assert invoke("train", "--backbone", f"hf:{models['albert']}", *args, "--out", out).exit_code == 0
    layers = torch.load(out, weights_only=True)["layers"]
    assert layers == [f"encoder.albert_layer_groups.0#{k}" for k in range(3)]
    r = invoke(
        "audit", out, "--scope", "both", "--compare", "ig,gradxact", "--samples", "12", "--json", tmp_path / "a.json"
    )
    assert r.exit_code == 0, r.output
    network = json.loads((tmp_path / "a.json").read_text())["network"]
    assert network["methods"]["gradxact"]["faithfulness"] is not None
    r = invoke("depth", out, "--samples", "12", "--truncate", "2", "--out", small)
    assert r.exit_code == 0, r.output
    cut = torch.load(small, weights_only=True)
    assert cut["layers"] == layers[:2]
    assert invoke("audit", small, "--samples", "12", "-q").exit_code == 0


# --------------------------------------------------------------------------- bad input


def bad_train(*args):
    return invoke("train", "--epochs", "1", "-q", *map(str, args))


def test_bad_text_inputs_are_one_line_errors(models, texts, tmp_path):
    out = tmp_path / "never.pt"
    base = ["--out", out]
    data = ["--dataset", f"csv:{texts}"]
    bert = ["--backbone", f"hf:{models['bert']}"]
    assert_user_error(
        bad_train(*bert, "--dataset", f"csv:{texts}", "--text-column", "body", *base), "no column 'body'", "text, label"
    )
    empty = tmp_path / "empty.csv"
    empty.write_text("text,label\nhello,a\n ,b\nworld,a\n")
    assert_user_error(bad_train(*bert, "--dataset", f"csv:{empty}", *base), "row 1", "empty 'text'")
    assert_user_error(bad_train(*bert, *data, "--max-length", "0", *base), "--max-length")
    assert_user_error(bad_train(*bert, *data, "--max-length", "500", *base), "beyond", "64 positions")
    assert_user_error(bad_train(*bert, "--dataset", "digits", *base), "text model", "images")
    assert_user_error(bad_train("--backbone", "mlp", *data, *base), "holds text", "image model")
    assert_user_error(bad_train("--backbone", f"hf:{tmp_path}", *data, *base), "without config.json")
    assert_user_error(bad_train("--backbone", "hf:./no/such/dir", *data, *base), "no such folder")
    assert not out.exists()


def test_a_tokenizer_larger_than_the_vocabulary_is_refused(models, texts, tmp_path):
    import shutil

    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers import models as tm

    local = tmp_path / "bert"
    shutil.copytree(models["bert"], local)
    vocab = {f"w{i}": i for i in range(2000)} | {"[UNK]": 2000}
    tok = Tokenizer(tm.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[UNK]").save_pretrained(
        local
    )
    r = bad_train("--backbone", f"hf:{local}", "--dataset", f"csv:{texts}", "--out", tmp_path / "x.pt")
    assert_user_error(r, "2001 token ids", "embeds only 1000")


@pytest.mark.parametrize("task", ["classifier", "lm"])
def test_a_tokenizer_that_is_there_but_unreadable_is_refused(models, texts, tmp_path, task):
    """The word-level vocabulary is for a model folder with no tokenizer files; a corrupt tokenizer.json is an
    error, never a silently different tokenisation (issue 48)."""
    import shutil

    from helpers import make_lm_folder, sentences

    if task == "lm":
        root = make_lm_folder(tmp_path / "lm", sentences(60), 50)
        local, data = root / "model", ["--task", "lm", "--dataset", f"text:{root / 'corpus'}", "--block-size", "16"]
    else:
        local, data = tmp_path / "bert", ["--dataset", f"csv:{texts}"]
        shutil.copytree(models["bert"], local)
        transformers.PreTrainedTokenizerFast(
            tokenizer_object=_word_tokenizer(), unk_token="[UNK]", pad_token="[UNK]"
        ).save_pretrained(local)
    (local / "tokenizer.json").write_bytes(random.Random(0).randbytes(2000))
    r = bad_train("--backbone", f"hf:{local}", *data, "--device", "cpu", "--out", tmp_path / "x.pt")
    assert_user_error(r, f"hf:{local}'s tokenizer", "tokenizer.json", "cannot be read")
    assert not (tmp_path / "x.pt").exists()


def _word_tokenizer():
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers import models as tm

    tok = Tokenizer(tm.WordLevel({w: i for i, w in enumerate(["[UNK]", *sum(WORDS.values(), [])])}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return tok


def test_a_config_that_is_no_transformer_model(tmp_path, texts):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "no-such-model"}))
    assert_user_error(
        bad_train("--backbone", f"hf:{tmp_path}", "--dataset", f"csv:{texts}", "--out", tmp_path / "x.pt"),
        f"hf:{tmp_path}",
    )


def test_missing_transformers_names_the_extra(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(LayaError, match=r"pip install 'laya-audit\[hf\]'"):
        hf.transformers_module()


@pytest.mark.parametrize("name", ["bert", "gpt2", "llama"])
def test_batches_cut_after_their_longest_text_give_the_features_of_fixed_padding(models, name):
    """Each batch reaches the model cut after its last real token and texts are extracted grouped by length: the
    features (and network-scope total effects, whose reference is per position) equal those of every text padded
    to max_length, in the data's order."""
    from laya_cli.auditing.network.patching import NetworkScope
    from laya_cli.features.extraction import extract, length_order, tap_means
    from laya_cli.model.heads import build_head

    backbone = tapped(models[name], max_length=16).eval()
    texts = ["dog", "bread cheese apple rice soup cake milk", "saw axe", "fish lion tiger", "egg", "hammer saw drill"]
    x = tokens(backbone, texts)
    order = length_order(x)
    assert order.tolist() == [0, 4, 2, 3, 5, 1]  # shortest first, ties in the data's order
    dynamic = extract(backbone, x, torch.zeros(len(x)), batch_size=2)
    backbone.adapter.trim = False
    fixed = [f for f in backbone(x)]
    backbone.adapter.trim = True
    for a, b in zip(dynamic.feats, fixed):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    real = int(x[0, 1].sum())  # "dog" and its special tokens
    assert real < 16 and backbone.activations(x[:1])[0].shape[1] == real  # its tokens reach the model, not 16
    train = tokenization.encode(backbone.input_cfg, ["dog cat", "bread", "apple rice soup cake milk egg"])
    reference = tap_means(backbone, train)
    assert reference[0].shape[0] == 16  # per position, up to max_length
    torch.manual_seed(0)
    head = build_head("laya", [f.shape[-1] for f in fixed], 3).eval()
    scope = NetworkScope(backbone, head, reference)
    hs = scope.activations(x)
    feats = scope.pooled(hs)
    target = scope.probs(feats).argmax(-1)
    cut = scope.effects(x, hs, feats, target)
    with backbone.full_length():
        hs = scope.activations(x)
        whole = scope.effects(x, hs, scope.pooled(hs), target)
    torch.testing.assert_close(cut, whole, rtol=0, atol=1e-5)


# --------------------------------------------------------------------------- network scope


@pytest.mark.parametrize("name", ["bert", "gpt2", "llama", "vit", "albert"])
def test_continuing_from_a_layer_equals_full_passes(models, name):
    """Network scope on a transformer: re-calling the later layers with the arguments the batch gave them
    (prefix caching) gives the patched passes and IG of full forwards with a replacing hook."""
    from laya_cli.auditing.network.patching import NetworkScope
    from laya_cli.features.extraction import tap_means
    from laya_cli.model.heads import build_head

    backbone = tapped(models[name], **({} if name == "vit" else {"max_length": 12})).eval()
    if name == "vit":
        x, train = torch.rand(3, 3, 32, 32), torch.rand(8, 3, 32, 32)
    else:
        x = tokens(backbone, ["dog cat", "bread cheese apple rice soup", "saw"])
        train = tokenization.encode(backbone.input_cfg, ["dog", "cat bread", "apple rice soup cake"])
    assert backbone.can_continue
    with torch.no_grad():
        dims = [r.shape[-1] for r in backbone(x)]
    torch.manual_seed(0)
    head = build_head("laya", dims, 3).eval()
    scope = NetworkScope(backbone, head, tap_means(backbone, train))
    full = NetworkScope(backbone, head, scope.reference, prefix=False)
    assert scope.prefix
    hs = scope.activations(x)
    feats = scope.pooled(hs)
    target = scope.probs(feats).argmax(-1)
    torch.testing.assert_close(
        scope.effects(x, hs, feats, target), full.effects(x, hs, feats, target), rtol=0, atol=1e-6
    )
    hs = scope.activations(x)
    ours = scope.integrated_gradients(x, hs, feats, target, n_steps=8)
    theirs = full.integrated_gradients(x, hs, feats, target, n_steps=8)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5)
    chunked = scope.integrated_gradients(x, hs, feats, target, n_steps=8, internal_batch_size=6)
    torch.testing.assert_close(chunked, ours, rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", ["bert", "gpt2", "llama"])
def test_network_ig_refines_some_texts_of_a_batch_with_their_own_masks(models, name, monkeypatch):
    """IG's refinement re-runs only the samples that did not converge (ig_steps.adaptive_ig): a text model's
    attention mask (pooling) and the later layers' replayed arguments must follow those rows. Texts of unequal
    lengths; the odd ones are forced to refine: each sample's scores equal plain IG at the steps it ended on."""
    from laya_cli.auditing import ig_steps
    from laya_cli.auditing.network.patching import NetworkScope
    from laya_cli.features.extraction import tap_means
    from laya_cli.model.heads import build_head

    backbone = tapped(models[name], max_length=12).eval()
    texts = ["dog cat", "bread cheese apple rice soup", "saw", "fish lion tiger bear wolf fox dog", "milk egg", "axe"]
    x = tokens(backbone, texts)
    train = tokenization.encode(backbone.input_cfg, ["dog", "cat bread", "apple rice soup cake"])
    with torch.no_grad():
        dims = [r.shape[-1] for r in backbone(x)]
    torch.manual_seed(0)
    head = build_head("laya", dims, 3).eval()
    scope = NetworkScope(backbone, head, tap_means(backbone, train))
    hs = scope.activations(x)
    feats = scope.pooled(hs)
    target = scope.probs(feats).argmax(-1)
    effects = scope.effects(x, hs, feats, target)

    def odd_ones_need_more(delta, effect, tol):  # the first round: the odd rows do not converge
        return torch.arange(len(delta)) % 2 == 0 if len(delta) == len(texts) else torch.ones(len(delta), dtype=bool)

    monkeypatch.setattr(ig_steps, "converged", odd_ones_need_more)
    hs = scope.activations(x)
    ours, steps = scope.adaptive_integrated_gradients(x, hs, feats, target, effects, max_steps=32, tol=1e-3)
    first = ig_steps.NETWORK_FIRST_STEPS
    assert steps[0::2].eq(first).all() and steps[1::2].eq(2 * first).all()
    for n_steps, rows in ((first, slice(0, None, 2)), (2 * first, slice(1, None, 2))):
        hs = scope.activations(x)
        plain = scope.integrated_gradients(x, hs, feats, target, n_steps=n_steps)
        torch.testing.assert_close(ours[rows], plain[rows], rtol=0, atol=1e-6)


# --------------------------------------------------------------------------- vision, hub, Python API


def test_a_frozen_vision_transformer_trains_audits_and_exports(models, tmp_path):
    out = tmp_path / "vit.pt"
    r = invoke("train", "--backbone", f"hf:{models['vit']}", "--dataset", "digits", "--epochs", "2", "--out", out, "-q")
    assert r.exit_code == 0, r.output
    ckpt = torch.load(out, weights_only=True)
    assert ckpt["backbone"]["spec"]["formats"] == ["NLC+1"] * 3 and ckpt["backbone"]["weights"] is None
    r = invoke("audit", out, "--scope", "both", "--compare", "ig", "--samples", "16", "--steps", "4")
    assert r.exit_code == 0, r.output
    r = invoke("export", out, "--out", tmp_path / "export", "--samples", "16", "--no-plots")
    assert r.exit_code == 0 and (tmp_path / "export" / "report.html").is_file(), r.output


def test_the_image_processor_sets_the_input(models, tmp_path):
    import shutil

    local = tmp_path / "vit"
    shutil.copytree(models["vit"], local)
    transformers.ViTImageProcessor(image_mean=[0.1, 0.2, 0.3], image_std=[0.4, 0.5, 0.6], size=32).save_pretrained(
        local
    )
    cfg = tapped(local).input_cfg
    assert cfg.mean == (0.1, 0.2, 0.3) and cfg.std == (0.4, 0.5, 0.6) and cfg.size == (32, 32)


def test_a_hub_model_offline_without_a_cached_copy_is_one_line(texts, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hub"))
    r = invoke("train", "--backbone", "hf:someone/tiny-bert", "--dataset", f"csv:{texts}", "--out", tmp_path / "x.pt")
    assert_user_error(r, "hf:someone/tiny-bert", "--no-pretrained")
    assert not (tmp_path / "x.pt").exists()


def test_the_python_api_fits_strings_tokenizer_dicts_and_token_tensors(models, tmp_path):
    from tokenizers import Tokenizer, pre_tokenizers, trainers
    from tokenizers import models as tm

    import laya_cli

    model = transformers.AutoModel.from_pretrained(models["bert"])
    words = sum(WORDS.values(), [])
    tok = Tokenizer(tm.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(words * 3, trainers.WordLevelTrainer(special_tokens=["[PAD]", "[UNK]"]))
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]")
    rng = random.Random(0)
    labels = [rng.randrange(3) for _ in range(96)]
    samples = [(" ".join(rng.choices(WORDS[list(WORDS)[y]], k=4)), y) for y in labels]
    strings = torch.utils.data.DataLoader(
        samples, batch_size=16, collate_fn=lambda b: ([t for t, _ in b], torch.tensor([y for _, y in b]))
    )
    tapped = laya_cli.attach(model, tokenizer=fast, max_length=8)
    assert tapped.layers == [f"encoder.layer.{i}" for i in range(3)] and tapped.pool == "cls"
    fitted = laya_cli.fit(tapped, strings, epochs=2, progress=False)
    fitted.save(tmp_path / "api.pt")
    stored = torch.load(tmp_path / "api.pt", weights_only=True)["backbone"]["input"]
    assert stored["max_length"] == 8 and stored["tokenizer"] == fast.backend_tokenizer.to_str()
    assert laya_cli.audit(fitted, strings).n_samples == 96
    enc = fast([t for t, _ in samples], padding="max_length", max_length=8, truncation=True, return_tensors="pt")
    dicts = [
        {"input_ids": enc["input_ids"][i], "attention_mask": enc["attention_mask"][i], "labels": y}
        for i, y in enumerate(labels)
    ]
    by_dict = laya_cli.fit(
        laya_cli.attach(model, max_length=8),
        torch.utils.data.DataLoader(dicts, batch_size=16),
        epochs=2,
        progress=False,
    )
    as_tokens = [(torch.stack([enc["input_ids"][i], enc["attention_mask"][i]]), y) for i, y in enumerate(labels)]
    by_tensor = laya_cli.fit(
        laya_cli.attach(model, max_length=8),
        torch.utils.data.DataLoader(as_tokens, batch_size=16),
        epochs=2,
        progress=False,
    )
    for a, b in zip(by_dict.head.state_dict().values(), by_tensor.head.state_dict().values()):
        torch.testing.assert_close(a, b)  # the same batches, however they are spelled
    with pytest.raises(LayaError, match="tokenizer and max_length apply to text models"):
        laya_cli.attach(transformers.AutoModel.from_pretrained(models["vit"]), max_length=8)
