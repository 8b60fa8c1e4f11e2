"""Diagnostics lines: figures when measured, the reason when not, never a false 0."""

from tpmledger.dashboard.components.diagnostics_panel import diagnostics_lines


def test_each_null_diagnostic_says_why() -> None:
    lines = dict(
        diagnostics_lines(
            {
                "diagnostics": dict.fromkeys(
                    ("retry_storm", "deadline_overrun", "slot_held_by_tool", "target_saturation")
                ),
                "goodput": None,
            }
        )
    )
    assert lines["retry storm"] == "not measured (retries are not measured)"
    assert lines["goodput"].startswith("no SLO declared")


def test_measured_diagnostics_and_goodput_read_as_figures() -> None:
    run = {
        "diagnostics": {
            "retry_storm": {"flag": False, "budget": 0.2, "minutes": []},
            "deadline_overrun": {"share": 0.25, "slot_seconds_wasted": 12.4},
            "slot_held_by_tool": {"share": 0.1},
            "target_saturation": [
                {"provider": "p", "model": "m", "cap": 4, "share_at_cap": 0.5, "share_over_cap": 0}
            ],
        },
        "goodput": {"slo": "ttft=0.5", "good_calls": 9, "calls": 10},
        "goodput_tpm_total": 1200.0,
        "good_call_share": 0.9,
    }
    lines = dict(diagnostics_lines(run))
    assert lines["retry storm"].startswith("none")
    assert lines["slots held past the deadline"].startswith("25.0 % of attempts")
    assert lines["per-target saturation"].startswith("p/m: cap 4")
    assert lines["goodput"] == (
        "under ttft=0.5: 1,200 good tokens per minute (sustained), 90.0 % of attempts met the SLO"
    )
