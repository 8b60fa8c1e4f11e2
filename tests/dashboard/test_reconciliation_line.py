"""The run page's reconciliation line says what each side counted, or that it was not."""

from tpmledger.dashboard.components.reconciliation_line import reconciliation_text


def test_missing_metrics_read_not_measured_never_zero() -> None:
    text = reconciliation_text({"tokens_by_spans": 140, "tokens_by_metrics": None, "gap": None})
    assert text.startswith("Tokens by spans 140 · by GenAI token-usage metrics: not measured")


def test_a_positive_gap_names_the_lost_spans() -> None:
    text = reconciliation_text({"tokens_by_spans": 140, "tokens_by_metrics": 150, "gap": 10})
    assert text.endswith("gap 10: tokens in spans that never arrived")
    assert "gap 0" in reconciliation_text({"tokens_by_spans": 5, "tokens_by_metrics": 5, "gap": 0})
