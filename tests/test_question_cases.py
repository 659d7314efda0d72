"""benchmarks/question_cases.py reads what an audit JSON says (no laya run here: the cases themselves take minutes)."""

from benchmarks.question_cases import audit_summary, removal_asked, summary_markdown, train_flags


def audit_doc(scope: str, fail_under: list[str], question: dict | None = None) -> dict:
    doc = {
        "settings": {"scope": scope, "ablation": "mean", "fail_under": fail_under},
        "accuracy": 0.75,
        "methods": {} if scope == "network" else {"laya": {"faithfulness": 0.9}},
        "network": None if scope == "head" else {"reference": "bypass", "methods": {"laya": {"faithfulness": 0.3}}},
        "verdict": {"passed": scope == "head"},
    }
    if question:
        doc |= {"question": question, "verdict_text": "α wins.", "flags": ["α is uniform."]}
    return doc


def test_a_network_gate_reads_the_network_value_and_its_removal():
    row = audit_summary(
        audit_doc(
            "network",
            ["network:laya:faithfulness=0.7"],
            {"scope": "network", "removal": "bypass", "source": "recorded"},
        )
    )
    assert (row["gate_scope"], row["gate_value"], row["audit_removal"]) == ("network", 0.3, "bypass")
    assert row["question"] == {"scope": "network", "removal": "bypass", "source": "recorded"}
    assert row["flags"] == ["α is uniform."] and row["gate_passed"] is False


def test_an_older_audit_without_a_question_is_read_at_head_scope():
    row = audit_summary(audit_doc("head", []))
    assert (row["gate_scope"], row["gate_value"], row["question"], row["verdict"]) == ("head", 0.9, None, None)
    assert row["network_laya"] is None


def test_both_scopes_name_both_removals():
    assert removal_asked("both", "mean", "bypass") == "mean; network bypass"
    assert removal_asked("head", "mean", None) == "mean"


def test_summary_has_a_row_per_case_and_a_skipped_case_says_so():
    rows = [
        {"case": "demo", "gate_exit": 0, "test_accuracy": 0.98, **audit_summary(audit_doc("head", []))},
        {"case": "cnn", "skipped": True},
    ]
    text = summary_markdown(rows, "here")
    assert "| demo | 0.9800 |" in text and "| cnn | skipped |" in text


def test_train_flags_keep_the_warning_lines_only():
    assert train_flags("epoch 1\nwarning: at chance\ntest accuracy 0.1") == ["warning: at chance"]


def test_a_command_already_run_is_read_back_not_run_again(tmp_path):
    from benchmarks.question_cases import laya

    (tmp_path / "01-train.txt").write_text("$ laya train --out m.pt\n# exit 0, 12.5 s\ntest accuracy 0.5\n")
    assert laya(tmp_path, tmp_path / "log", "01-train", "train", "--out", "m.pt") == (0, "test accuracy 0.5\n", 12.5)
    assert not (tmp_path / "log").exists()


def test_an_audit_that_recorded_no_scope_was_at_head_scope():
    doc = audit_doc("head", ["laya:faithfulness=0.7"])
    doc["settings"]["scope"] = None
    assert audit_summary(doc)["audit_scope"] == "head"
