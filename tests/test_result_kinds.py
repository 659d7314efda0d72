"""One result type per function, whichever the task: ``export`` returns an ``Export`` and ``depth`` a
``DepthResult``; their ``kind`` says what the tables hold, and the command line and the notebook display choose their
renderers from it (built by hand here: tests/test_lm_export.py and tests/test_api_lm.py run the real jobs)."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pandas as pd

import laya_cli
from laya_cli import DepthResult, Export, TokenExitResult, TokenExport
from laya_cli.cli.depth import RENDER_ANALYSIS
from laya_cli.cli.export import EXPORTED_LINES, exported_lines
from laya_cli.depthing.analysis import LayerDepthResult
from laya_cli.depthing.lm_exit import POLICIES, TokenExitPoint
from laya_cli.exporting.folder import ClassExport

LAYERS = ["l0", "[b]l1"]  # a name rich would read as markup: shown as text


def token_export() -> TokenExport:
    table = pd.DataFrame(
        {"block": [0, 0, 1], "position": [0, 1, 0], "token": [1, 2, 3], "token_text": ["a", "b", "c"],
         "next_token": [2, 3, 4], "next_text": ["b", "c", "d"], "predicted": [2, 1, 4],
         "predicted_text": ["b", "a", "d"], "p_predicted": [0.5, 0.4, 0.3], "p_next": [0.5, 0.1, 0.3],
         "alpha[l0]": [0.2, 0.5, 0.9], "alpha[[b]l1]": [0.8, 0.5, 0.1], "dominant_layer": [2, 1, 1]}
    )  # fmt: skip
    return TokenExport(table, LAYERS, "", {}, out=Path("lm-export"), files=["tokens.csv"])


def token_exit() -> TokenExitResult:
    points = [TokenExitPoint(p, 0.9, 1.0, 0.01, 1.5, 0.25, 0.02) for p in POLICIES]
    points.append(TokenExitPoint("oracle", None, 1.0, 0.0, 1.2, 0.4, 0.0))
    best = {p: points[0].to_dict() for p in POLICIES}
    goals = {"alpha_saves_20pc_within_1pc": True, "alpha_reaches_80pc_of_oracle": False, "alpha_saving": 0.25,
             "alpha_saving_own": 0.25, "oracle_saving": 0.4}  # fmt: skip
    return TokenExitResult(100, LAYERS, 1.0, 1.1, points, best, dict(best), points[-1].to_dict(), goals)


def test_the_api_returns_one_type_per_function():
    assert inspect.signature(laya_cli.export).return_annotation == "Export"
    assert inspect.signature(laya_cli.depth).return_annotation == "DepthResult"
    assert issubclass(ClassExport, Export) and issubclass(TokenExport, Export)
    assert issubclass(LayerDepthResult, DepthResult) and issubclass(TokenExitResult, DepthResult)
    assert (ClassExport.kind, TokenExport.kind) == ("classes", "tokens")
    assert (LayerDepthResult.kind, TokenExitResult.kind) == ("layers", "tokens")
    # every kind has its renderer on the command line
    assert set(EXPORTED_LINES) == {ClassExport.kind, TokenExport.kind}
    assert set(RENDER_ANALYSIS) == {LayerDepthResult.kind, TokenExitResult.kind}


def test_a_language_model_export_shows_by_its_kind():
    exp = token_export()
    text = repr(exp)
    assert text.startswith("Export · 3 tokens in 2 blocks · LAYA next-token accuracy 0.6667")
    assert "[b]l1" in text and "0.467" in text  # the layer's name as written, its mean α
    page = exp._repr_html_()
    assert "<td>[b]l1</td>" in page and "0.533" in page
    lines = exported_lines(exp)
    assert "exported 3 tokens[/] in 2 blocks" in lines[-1] and "1 files" in lines[-1]


def test_a_language_model_depth_shows_and_tabulates_by_its_kind():
    result = token_exit()
    assert "kind" not in result.to_dict() and json.loads(result.to_json()) == result.to_dict()
    table = result.to_pandas()
    assert table.index.names == ["policy", "threshold"] and len(table) == len(POLICIES) + 1
    assert table.loc[("alpha_mass", 0.9), "saving"] == 0.25
    text = repr(result)
    assert text.startswith("DepthResult · early exit per token · 100 positions") and "threshold sweep" in text
    assert "early exit per token" in result._repr_html_()
