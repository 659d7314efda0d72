"""``--task lm``: a causal LM's readout, text corpora, the LAYA head and the lenses per position, early exit per
token — each checked against an independent computation (the model's own loss, an unchunked loss, the tokenizer)."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

from laya_cli.backbones.lm import build_language_model
from laya_cli.backbones.spec import BackboneSpec
from laya_cli.data.corpus import block_batches, open_corpus, token_blocks
from laya_cli.depthing import lm_exit
from laya_cli.features.lm_positions import batches, token_states
from laya_cli.model import lm_heads
from laya_cli.model.checkpoint import read_checkpoint
from laya_cli.model.lm_heads import lm_from_checkpoint
from laya_cli.runtime.errors import LayaError
from laya_cli.training.lm import evaluate, train_lm
from tests.helpers import assert_close_tree, assert_user_error, invoke, lm_request, make_lm_folder, sentences

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module")
def lm_dir(tmp_path_factory):
    return make_lm_folder(tmp_path_factory.mktemp("lm"), sentences(600), 500)


@pytest.fixture(scope="module")
def trained(lm_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("lmckpt") / "lm.pt"
    req = lm_request(f"hf:{lm_dir / 'model'}", f"text:{lm_dir / 'corpus'}", out, block_size=24, batch_size=8,
                    epochs=2, lr=3e-3, eval_tokens=2000, layer_dropout=0.2)  # fmt: skip
    return train_lm(req), out


def _lm(lm_dir):
    return build_language_model(BackboneSpec(f"hf:{lm_dir / 'model'}", pretrained=True, task="lm"))


def test_the_readout_of_the_last_layer_is_the_models_own_logits(lm_dir):
    from transformers import AutoModelForCausalLM

    lm = _lm(lm_dir)
    causal = AutoModelForCausalLM.from_pretrained(lm_dir / "model").eval()
    ids = torch.randint(0, lm.readout.vocabulary, (3, 11), generator=torch.Generator().manual_seed(1))
    x = torch.stack([ids, torch.ones_like(ids)], 1)
    with torch.no_grad():
        got = lm.readout(lm.backbone.activations(x)[-1])
        want = causal(input_ids=ids).logits
    assert lm.num_layers == 4 and type(lm.readout.norm).__name__ == "LayerNorm"  # GPT-2's ln_f, found by probing
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_a_model_whose_logits_are_not_its_readout_is_refused(lm_dir, monkeypatch):
    from laya_cli.backbones import lm as causal_mod

    monkeypatch.setattr(causal_mod, "_norm_candidates", lambda base, layers: [("", torch.nn.Identity())])
    with pytest.raises(LayaError, match="soft-capped or scaled"):
        _lm(lm_dir)


def test_the_models_cross_entropy_is_its_own_loss_on_the_same_blocks(lm_dir):
    from transformers import AutoModelForCausalLM

    lm = _lm(lm_dir)
    corpus = open_corpus(str(lm_dir / "corpus"))
    blocks = list(batches(lm, corpus, "test", 16, 4))[:3]
    laya = lm_heads.LayaLMHead(4, 32, lm.readout, lm_heads.HeadSettings())
    tuned = lm_heads.TunedLens(4, 32, lm.readout)
    metrics = evaluate(lm, laya, tuned, iter(blocks), 10**9)
    causal = AutoModelForCausalLM.from_pretrained(lm_dir / "model").eval()
    with torch.no_grad():
        losses = [causal(input_ids=x[:, 0], labels=x[:, 0]).loss for x in blocks]
    assert metrics["tokens"] == 3 * 4 * 15
    assert metrics["heads"]["last"]["ce"] == pytest.approx(float(torch.stack(losses).mean()) / math.log(2), rel=1e-4)
    # the logit lens at the last layer is the model: KL 0, the same CE; an untrained tuned lens is the logit lens
    last = metrics["layers"][-1]
    assert last["logit_kl"] == pytest.approx(0, abs=1e-6)
    assert last["logit_ce"] == pytest.approx(metrics["heads"]["last"]["ce"], rel=1e-6)
    for row in metrics["layers"]:
        assert row["tuned_kl"] == pytest.approx(row["logit_kl"], rel=1e-5, abs=1e-7)


def test_losses_in_chunks_equal_the_loss_in_one_piece(lm_dir, monkeypatch):
    lm = _lm(lm_dir)
    blocks = list(batches(lm, open_corpus(str(lm_dir / "corpus")), "test", 16, 4))[:2]
    laya = lm_heads.LayaLMHead(4, 32, lm.readout, lm_heads.HeadSettings())
    tuned = lm_heads.TunedLens(4, 32, lm.readout)
    whole = evaluate(lm, laya, tuned, iter(blocks), 10**9)
    monkeypatch.setattr(lm_heads, "LOGITS_PER_CHUNK", lm.readout.vocabulary * 7)  # 7 positions per chunk
    assert len(list(lm_heads.chunks(120, lm.readout.vocabulary))) == 18
    parts = evaluate(lm, laya, tuned, iter(blocks), 10**9)
    assert_close_tree(parts["heads"], whole["heads"], 1e-5)
    # (abs: the last layer's KL is 0 up to float32's rounding, which differs between chunkings)
    assert [r["logit_kl"] for r in parts["layers"]] == pytest.approx(
        [r["logit_kl"] for r in whole["layers"]], rel=1e-5, abs=1e-6
    )


def test_kl_is_the_definition():
    ref, logits = torch.randn(5, 9), torch.randn(5, 9)
    p, logq = F.softmax(ref, -1), F.log_softmax(logits, -1)
    want = (p * (p.log() - logq)).sum(-1)
    torch.testing.assert_close(lm_heads.kl_to(F.log_softmax(ref, -1), logits), want)


def test_training_fits_both_heads_and_the_checkpoint_reloads(trained, lm_dir):
    ckpt, path = trained
    m = ckpt["metrics"]
    assert ckpt["task"] == "lm" and len(m["layers"]) == 4 and m["tokens"] >= 1000
    # trained towards the model's distribution: the tuned lens is no further from it than the logit lens, per layer
    for row in m["layers"][:-1]:
        assert row["tuned_kl"] <= row["logit_kl"] + 1e-6
    assert m["heads"]["laya"]["kl"] < m["layers"][0]["logit_kl"]
    assert sum(r["alpha"] for r in m["layers"]) == pytest.approx(1, abs=1e-5)
    model = lm_from_checkpoint(read_checkpoint(path))
    corpus = open_corpus(str(lm_dir / "corpus"))
    again = evaluate(model.lm, model.laya, model.tuned, batches(model.lm, corpus, "test", 24, 8), 2000)
    assert_close_tree(again["heads"], m["heads"], 1e-5)
    assert not any(k.startswith("readout.") for k in ckpt["head"]["weights"])  # the model's own, not stored


def test_corpus_formats_give_the_same_documents(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = sentences(30)
    (tmp_path / "a.txt").write_text("\n".join(texts) + "\n\n")
    (tmp_path / "a.jsonl").write_text("\n".join(json.dumps({"text": t, "n": i}) for i, t in enumerate(texts)) + "\n")
    pq.write_table(pa.table({"text": texts}), tmp_path / "a.parquet")
    for name in ("a.txt", "a.jsonl", "a.parquet"):
        corpus = open_corpus(str(tmp_path / name))
        train, test = list(corpus.documents("train")), list(corpus.documents("test"))
        assert test == texts[9::10] and len(train) + len(test) == 30, name
    folder = tmp_path / "f"
    folder.mkdir()
    (folder / "train.txt").write_text("\n".join(texts[:20]))
    (folder / "test.txt").write_text("\n".join(texts[20:]))
    corpus = open_corpus(str(folder))
    assert list(corpus.documents("train")) == texts[:20] and list(corpus.documents("test")) == texts[20:]


def test_hf_disk_corpus_keeps_its_splits(tmp_path):
    datasets = pytest.importorskip("datasets")
    texts = sentences(20)
    dd = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict({"text": texts[:15]}),
            "test": datasets.Dataset.from_dict({"text": texts[15:]}),
        }
    )
    dd.save_to_disk(str(tmp_path / "d"))
    corpus = open_corpus(str(tmp_path / "d"))
    assert list(corpus.documents("train")) == texts[:15] and list(corpus.documents("test")) == texts[15:]


def test_blocks_pack_documents_end_to_end_with_the_end_of_text_token(lm_dir):
    from tokenizers import Tokenizer

    lm = _lm(lm_dir)
    docs = sentences(40)
    tok_json = lm.backbone.adapter.text.tokenizer
    blocks = list(token_blocks(iter(docs), tok_json, 10, lm.eos_id))
    stream = [i for d in docs for i in Tokenizer.from_str(tok_json).encode(d).ids + [lm.eos_id]]
    assert torch.cat(blocks).tolist() == stream[: 10 * len(blocks)] and len(stream) - 10 * len(blocks) < 10
    shuffled = list(block_batches(iter(blocks), 3, seed=0))
    assert sorted(map(tuple, torch.cat([b[:, 0] for b in shuffled]).tolist())) == sorted(
        map(tuple, torch.stack(blocks).tolist())
    )
    assert all(b[:, 1].eq(1).all() for b in shuffled)


def test_text_that_is_not_utf8_is_one_line_naming_the_line(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"fine\nalso fine\ncaf\xe9\n")
    with pytest.raises(LayaError, match=r"line 3 is not UTF-8 \(byte 0xe9 at column 4\)"):
        list(open_corpus(str(path)).documents("train"))
    assert list(open_corpus(str(path), encoding="latin-1").documents("test")) == []
    assert list(open_corpus(str(path), encoding="latin-1").documents("train"))[-1] == "café"


def test_truncated_laya_at_full_depth_is_the_head(trained):
    ckpt, path = trained
    model = lm_from_checkpoint(read_checkpoint(path))
    hs = torch.randn(6, 4, 32)
    logits, mass = lm_exit.truncated_laya(model, hs, 4)
    torch.testing.assert_close(logits, model.laya(hs)[0])
    torch.testing.assert_close(mass, torch.ones(6))
    _, mass1 = lm_exit.truncated_laya(model, hs, 1)
    assert (mass1 < 1).all()


def test_exit_sweep_on_a_hand_made_table():
    ce = torch.tensor([[2.0, 1.0, 1.0], [3.0, 3.0, 1.0]])  # two tokens, three layers
    scores = torch.tensor([[0.2, 0.9, 1.0], [0.1, 0.2, 1.0]])
    argmax = torch.tensor([[5, 7, 7], [1, 2, 3]])
    tables = lm_exit.ExitTables({p: ce for p in lm_exit.POLICIES}, argmax,
                                   {p: scores for p in lm_exit.POLICIES}, torch.ones(2))  # fmt: skip
    points = lm_exit.exit_sweep(tables, (0.5,))
    alpha = next(p for p in points if p.policy == "alpha_mass")
    # token 0 stops at layer 2 (CE 1), token 1 runs to layer 3 (CE 1): mean 2.5 layers of 3, no CE increase
    assert alpha.mean_layers == 2.5 and alpha.saving == pytest.approx(1 / 6) and alpha.ce_increase == 0
    oracle = points[-1]
    assert oracle.policy == "oracle" and oracle.mean_layers == 2.5  # token 0 agrees from layer 2, token 1 at 3


def test_the_exit_goals_read_the_models_cross_entropy_not_the_heads_own():
    """A head 10 % worse than the model at full depth: exiting at layer 1 costs 0.5 % of its own CE but 10.5 % of
    the model's, so it is within 1 % only by the first reading, and the goals read the second."""
    ce = torch.tensor([[1.105, 1.1], [1.105, 1.1]])  # two tokens, two layers (nats)
    scores = torch.tensor([[0.9, 1.0], [0.9, 1.0]])  # α mass high at layer 1: every threshold exits there
    argmax = torch.tensor([[3, 3], [4, 4]])
    tables = lm_exit.ExitTables({p: ce for p in lm_exit.POLICIES}, argmax,
                                   {p: scores for p in lm_exit.POLICIES}, torch.ones(2))  # fmt: skip
    result = lm_exit.token_exit_result(tables, ["h.0", "h.1"], (0.5,))
    assert result.best["alpha_mass"]["saving"] == 0.5 and result.best["alpha_mass"]["ce_increase"] < 0.01
    at_layer_1 = next(p for p in result.points if p.policy == "alpha_mass")
    assert at_layer_1.ce_over_model == pytest.approx(0.105)
    assert result.best_vs_model["alpha_mass"] is None  # no point of the sweep is within 1 % of the model
    assert result.goals["alpha_saving"] == 0 and result.goals["alpha_saving_own"] == 0.5
    assert not result.goals["alpha_saves_20pc_within_1pc"]


def test_early_exit_flags_a_uniform_alpha_and_a_model_at_chance_as_a_classifiers_depth_does():
    """The flags of auditing/flags.py on a language model's tokens: α uniform within noise (the full head's α), the
    model's next-token accuracy within noise of the most frequent next token's share; neither for a spread α and a
    model well above it."""
    targets = torch.tensor([7] * 50 + list(range(50)))  # token 7: half the positions
    at_chance = lm_exit.next_token_chance(torch.rand(100) < 0.5, targets)
    assert at_chance["most_frequent_share"] == pytest.approx(0.51) and at_chance["most_frequent_token"] == 7
    learnt = lm_exit.next_token_chance(torch.arange(100) < 95, targets)  # 95 % right
    uniform, spread = torch.full((100, 4), 0.25), torch.softmax(torch.randn(100, 4) * 4, -1)
    flags = lm_exit.token_flags(uniform, at_chance)
    assert [f.split(" (")[0] for f in flags] == [
        "flag: α is uniform within noise",
        "flag: the model is within noise of chance",
    ]
    assert lm_exit.token_flags(spread, learnt) == []


def test_cli_train_info_depth_on_a_language_model(lm_dir, tmp_path):
    out = tmp_path / "m.pt"
    r = invoke("train", "--task", "lm", "--backbone", f"hf:{lm_dir / 'model'}", "--dataset",
               f"text:{lm_dir / 'corpus'}", "--epochs", "1", "--block-size", "16", "--eval-tokens", "500",
               "--out", out, "--quiet")  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "tuned lens" in r.output and out.is_file()
    info = json.loads(invoke("info", out, "--json").stdout)
    assert info["task"] == "lm" and len(info["metrics"]["layers"]) == 4
    assert "language model" in invoke("info", out).output
    # the checkpoint's own held-out figures earn the flags, as a classifier's do (train's end, info, the card):
    # a random-weight GPT-2 guesses no better than its most frequent next token, and α's summary is recorded
    said = info["metrics"]["next_token"]
    assert said["positions"] == info["metrics"]["tokens"] and 0 <= said["model_accuracy"] <= 1
    assert info["metrics"]["alpha_collapse"]["layers"] == 4
    assert any(f.startswith("flag: the model is within noise of chance") for f in info["flags"]), info["flags"]
    assert "within noise of chance" in " ".join(invoke("info", out).output.split())
    # the network-scope audit (a language model's question) summarises α too, so its uniform-α flag can be said
    r = invoke("audit", out, "--scope", "network", "--samples", "48", "--json", tmp_path / "a.json")
    assert r.exit_code in (0, 1), r.output
    audit = json.loads((tmp_path / "a.json").read_text())
    assert audit["alpha_collapse"]["samples"] == 48 and audit["alpha_collapse"]["layers"] == 4
    # and its model-at-chance flag, as its head scope says it (its next tokens: the most frequent one's share)
    at_chance = [f for f in audit["flags"] if f.startswith("flag: the model is within noise of chance")]
    assert len(at_chance) == 1 and "on 48 positions" in at_chance[0], audit["flags"]
    assert audit["verdict_text"].startswith("No verdict: the model is within noise of chance")
    r = invoke("depth", out, "--samples", "300", "--json", tmp_path / "d.json", "--markdown", tmp_path / "d.md")
    assert r.exit_code == 0, r.output
    doc = json.loads((tmp_path / "d.json").read_text())
    assert doc["tokens"] == 300 and {p["policy"] for p in doc["points"]} == {*lm_exit.POLICIES, "oracle"}
    assert "threshold sweep" in (tmp_path / "d.md").read_text()
    # a random-weight GPT-2 predicts the next token no better than its most frequent one: flagged, as a classifier's
    # depth flags a model at chance (its savings mean nothing), in the terminal, the JSON and the Markdown
    said = doc["next_token"]
    assert said["positions"] == 300 and said["model_accuracy"] <= said["most_frequent_share"] + 0.05
    assert any(n.startswith("flag: the model is within noise of chance") for n in doc["notes"]), doc["notes"]
    assert "within noise of chance" in " ".join(r.output.split())
    assert "within noise of chance" in (tmp_path / "d.md").read_text()
    r = invoke("depth", out, "--truncate", "2", "--out", tmp_path / "s.pt")
    assert_user_error(r, "--truncate only applies to classifiers")


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--backbone", "mlp"], "causal language model"),
        (["--dataset", "digits"], "text:PATH"),
        (["--block-size", "500"], "2 to 64 positions"),
        (["--objective", "mse"], "--objective"),
        (["--task", "segment"], "--task"),
        (["--dataset", "text:/nonexistent/corpus"], "no such file"),
    ],
)
def test_bad_language_model_input_is_one_line_and_writes_nothing(lm_dir, tmp_path, args, fragment):
    out = tmp_path / "m.pt"
    base = {"--task": "lm", "--backbone": f"hf:{lm_dir / 'model'}", "--dataset": f"text:{lm_dir / 'corpus'}"}
    for flag, value in zip(args[::2], args[1::2]):
        base[flag] = value
    r = invoke("train", *[x for kv in base.items() for x in kv], "--epochs", "1", "--out", out, "--quiet")
    assert_user_error(r, fragment)
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_a_corpus_shorter_than_one_block_is_refused(lm_dir, tmp_path):
    (tmp_path / "tiny.txt").write_text("the cat\n")
    out = tmp_path / "m.pt"
    r = invoke("train", "--task", "lm", "--backbone", f"hf:{lm_dir / 'model'}", "--dataset",
               f"text:{tmp_path / 'tiny.txt'}", "--block-size", "32", "--out", out, "--quiet")  # fmt: skip
    assert_user_error(r, "shorter than one block")
    assert not out.exists()


def test_audit_of_a_language_model_at_both_scopes(trained, tmp_path):
    _, path = trained
    out = tmp_path / "a.json"
    r = invoke("audit", path, "--samples", "100", "--scope", "both", "--compare", "laya,ig,gradxact,atp",
               "--json", out, "--quiet")  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert doc["n_samples"] == 100 and doc["settings"]["task"] == "lm"
    assert set(doc["methods"]) >= {"laya", "ig", "gradxact", "atp"}
    net = doc["network"]["methods"]
    assert net["ig"]["faithfulness"] is None and any("not built at network scope" in n for n in doc["network"]["notes"])
    assert all(net[m]["faithfulness"] is not None for m in ("laya", "gradxact", "atp"))
    for scope in ("head", "network"):
        assert sum(doc["by_position"][scope]["n"]) == 100


def test_network_effects_are_the_model_without_the_layer(trained):
    """Δ_i(t) against an independent bypass: the layer deleted from the model's own layer list."""
    import copy

    from laya_cli.auditing import lm as lm_audit
    from laya_cli.auditing.metrics import target_probability

    _, path = trained
    model = lm_from_checkpoint(read_checkpoint(path))
    x = next(iter(batches(model.lm, open_corpus(model.ckpt["dataset"]["source"]), "test", 24, 2)))
    with torch.no_grad():
        hs, _ = token_states(model.lm, x)
        target = model.laya(hs).logits.argmax(-1).reshape(2, -1)
        base = lm_audit._probabilities(model.laya, model.lm.backbone.activations(x), target)
        delta = lm_audit._bypass_effects(model, x, target, base)
        for i in (0, 2):
            cut = copy.deepcopy(model.lm.backbone.model)
            cut.h = torch.nn.ModuleList([b for j, b in enumerate(cut.h) if j != i])
            states = _block_outputs(cut, x)
            states.insert(i, states[i - 1] if i else cut.drop(cut.wte(x[:, 0]) + cut.wpe(torch.arange(x.shape[2]))))
            logits = model.laya(torch.stack([s[:, :-1] for s in states], 2).flatten(0, 1)).logits
            p = target_probability(logits, target.reshape(-1)).reshape(target.shape)
            torch.testing.assert_close(delta[..., i], base - p, atol=1e-5, rtol=1e-4)


def test_bypassed_states_from_the_prefix_are_the_full_passes(trained):
    """Each layer bypassed by re-running only the layers after it (the recorded calls replayed) gives the states of
    a full forward with that layer bypassed, at every layer (the floor of the network scope, not an estimate)."""
    from laya_cli.auditing import lm as lm_audit

    _, path = trained
    model = lm_from_checkpoint(read_checkpoint(path))
    backbone = model.lm.backbone
    assert backbone.can_continue  # the prefix route is the one tested (else each_bypassed runs full passes)
    x = next(iter(batches(model.lm, open_corpus(model.ckpt["dataset"]["source"]), "test", 24, 2)))
    for i, states in lm_audit.each_bypassed(backbone, x):
        for got, want in zip(states, lm_audit.bypassed_states(backbone, x, i)):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def _block_outputs(model, x) -> list:
    """Each block's output (GPT-2's hidden_states[-1] has the final norm applied: read the blocks instead)."""
    seen = []
    hooks = [b.register_forward_hook(lambda m, a, o: seen.append(o[0] if isinstance(o, tuple) else o)) for b in model.h]
    model(input_ids=x[:, 0])
    for h in hooks:
        h.remove()
    return seen


def test_a_gate_on_a_language_models_audit_fails_the_build(trained, tmp_path):
    _, path = trained
    ok = invoke("audit", path, "--samples", "60", "--compare", "laya", "--fail-under", "laya:faithfulness=-1", "-q")
    assert ok.exit_code == 0, ok.output
    missed = invoke("audit", path, "--samples", "60", "--compare", "laya", "--fail-under", "laya:faithfulness=1.01")
    assert missed.exit_code == 1 and "FAIL" in missed.output


def test_an_eos_token_outside_the_vocabulary_is_one_line(lm_dir, tmp_path):
    """A config whose eos_token_id the model cannot embed (GPT-Neo's default 50256 on a small vocabulary)."""
    import shutil

    from transformers import AutoConfig

    folder = tmp_path / "model"
    shutil.copytree(lm_dir / "model", folder)
    config = AutoConfig.from_pretrained(folder)
    config.eos_token_id = 50256
    config.save_pretrained(folder)
    out = tmp_path / "m.pt"
    r = invoke("train", "--task", "lm", "--backbone", f"hf:{folder}", "--dataset", f"text:{lm_dir / 'corpus'}",
               "--block-size", "16", "--epochs", "1", "--out", out, "--quiet")  # fmt: skip
    assert_user_error(r, "token id 50256 is outside the model's vocabulary")
    assert not out.exists()


@pytest.mark.parametrize("family", ["llama", "cohere", "gemma2", "opt"])
def test_the_readout_is_the_models_logits_across_families(lm_dir, tmp_path, family):
    """Declared logit scales (Cohere) and soft caps (Gemma 2, a cap small enough to bite) are part of the readout."""
    import transformers as T

    small = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=2, intermediate_size=64, vocab_size=320,
                 max_position_embeddings=64, initializer_range=0.5)  # fmt: skip
    configs = {
        "llama": lambda: T.LlamaConfig(num_key_value_heads=2, **small),
        "cohere": lambda: T.CohereConfig(num_key_value_heads=2, logit_scale=0.3, **small),
        "gemma2": lambda: T.Gemma2Config(num_key_value_heads=2, head_dim=16, final_logit_softcapping=2.0, **small),
        "opt": lambda: T.OPTConfig(
            hidden_size=32,
            num_hidden_layers=3,
            num_attention_heads=2,
            ffn_dim=64,
            vocab_size=320,
            max_position_embeddings=64,
            word_embed_proj_dim=32,
        ),  # fmt: skip
    }
    torch.manual_seed(0)
    causal = T.AutoModelForCausalLM.from_config(configs[family]()).eval()
    causal.save_pretrained(tmp_path / family)
    T.AutoTokenizer.from_pretrained(lm_dir / "model").save_pretrained(tmp_path / family)
    lm = build_language_model(BackboneSpec(f"hf:{tmp_path / family}", pretrained=True, task="lm"))
    ids = torch.randint(0, 320, (2, 10), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        got = lm.readout(lm.backbone.activations(torch.stack([ids, torch.ones_like(ids)], 1))[-1])
        want = T.AutoModelForCausalLM.from_pretrained(tmp_path / family).eval()(input_ids=ids).logits
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-3)


def test_network_faithfulness_by_position_leaves_out_degenerate_positions_and_no_chance_warning(trained):
    """Issue 48: the network scope's by-position faithfulness excludes the positions whose effects are degenerate,
    as its overall figure does; the accuracy is held against the most frequent next token, not 'chance' over the
    vocabulary."""
    from laya_cli.auditing.lm import token_audit_job
    from laya_cli.auditing.metrics import degenerate_effects
    from laya_cli.auditing.settings import AuditSettings

    _, path = trained
    model = lm_from_checkpoint(read_checkpoint(path))
    settings = AuditSettings(tie_tol=0.02, ci=0.0).validate()  # a tolerance that makes some positions degenerate
    result = token_audit_job(model, ["laya", "gradxact"], settings, "both", None, 120)
    net = result.network.samples
    degenerate = degenerate_effects(net["delta"], 0.02)
    assert degenerate.any() and not degenerate.all()
    for m, rho in net["faithfulness"].items():
        assert rho[degenerate].isnan().all()
        assert result.network.methods[m].faithfulness == pytest.approx(float(rho.nanmean()), abs=1e-6)
    assert not any("chance" in n for n in result.notes)


def test_a_head_below_the_most_frequent_next_token_is_warned_about_in_those_words():
    from laya_cli.auditing.head_scope import _lm_baseline_warning

    labels = torch.tensor([7] * 40 + list(range(160)))  # token 7: 41 of 200 positions
    (warning,) = _lm_baseline_warning(0.03, labels, 200)
    assert "most frequent next token" in warning and "token id 7: 0.205" in warning
    assert "chance" not in warning and "classes" not in warning
    assert _lm_baseline_warning(0.6, labels, 200) == []  # well above it: nothing to say


def test_the_early_exit_caption_says_whose_goals_it_reads():
    from laya_cli.report.lm import exit_caption

    goals = {"alpha_saving": 0.25, "alpha_saving_own": 0.4, "oracle_saving": 0.5, "alpha_saves_20pc_within_1pc": True,
             "alpha_reaches_80pc_of_oracle": False}  # fmt: skip
    text = exit_caption({"tokens": 100, "model_ce_bits": 3.0, "laya_ce_bits": 3.1, "goals": goals})
    assert "laya's own design goals for α-guided exit" in text and "≥ 20 % saved, reached" in text
    assert "≥ 80 % of the oracle's saving, not reached" in text and "(goal ≥" not in text
    assert "not a verdict on this model" in text and "not a bound" in text  # issue 71: no verdict, no "bound"
    assert "25.0 % of layer computations within 1 % of the model's CE (40.0 % within 1 % of the head's own" in text
