"""The serving side beside the client (docs/dashboard.md, docs/metrics.md#serving-side-metrics).

Three panels on one minute axis: the client's in-flight calls (mean) with each server's
running and waiting requests; each server's KV-cache use (mean and max, 90 % marked, where
the bottleneck verdict counts it full); the client's TPM with the tokens each server
counted. A server slower than its clients want shows a queue and a full KV cache while the
client's in-flight count sits below its cap — what the ``serving`` verdict reads. Minutes
a server did not report are gaps, not zeros; open minutes are drawn in progress.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from tpmledger.dashboard.data.minute_series import MinuteSeries
from tpmledger.dashboard.display import NOT_MEASURED
from tpmledger.dashboard.figures.chart_style import (
    CAP_COLOR,
    MINUTE_PERIOD,
    SHARD_COLORS,
    Figure,
    add_in_progress,
    base_layout,
    figure,
    line_mode,
    message_figure,
    plot_text,
    time_axis,
    value_axis,
)
from tpmledger.storage.codecs.time_text import minute_text_ns
from tpmledger.storage.readers.server_minutes_read import ServerMinute

#: Client columns the figure reads from the whole-run minutes.
SERVING_CLIENT_COLUMNS = ("in_flight_mean", "tpm_total")
CLIENT_COLOR = "#4C78A8"
KV_FULL = 0.90


def _minute(ns: int) -> str:
    return minute_text_ns(ns)[:16].replace("T", " ")


def _line(x: list[str], y: list[Any], name: str, color: str, axis: str, **style: Any) -> Any:
    return {
        "type": "scatter", "x": x, "y": y, "name": name, "mode": line_mode(x),
        "line": {"color": color, **style}, "yaxis": axis, "legendgroup": name.split(" ")[0],
    }  # fmt: skip


def serving_figure(
    client: MinuteSeries, servers: Sequence[ServerMinute], open_minutes: Collection[str] = ()
) -> Figure:
    """Client in-flight and TPM against each server's running/waiting, KV cache and tokens."""
    if not servers:
        return message_figure(
            f"Serving side: {NOT_MEASURED} (no vLLM / SGLang metrics joined to this run)",
            height=160,
        )
    data: list[dict[str, Any]] = [
        _line(client.minutes, client.column("in_flight_mean"), "client in-flight (mean)",
              CLIENT_COLOR, "y", width=3),
        {"type": "bar", "x": client.minutes, "y": client.column("tpm_total"),
         "name": "client TPM", "marker": {"color": CLIENT_COLOR, "opacity": 0.45},
         "yaxis": "y3", **MINUTE_PERIOD},
    ]  # fmt: skip
    by_server: dict[tuple[str, str, str], list[ServerMinute]] = {}
    for s in servers:
        by_server.setdefault((s.instance, s.engine, s.model), []).append(s)
    for index, ((instance, engine, model), rows) in enumerate(by_server.items()):
        color = SHARD_COLORS[index % len(SHARD_COLORS)]
        name = plot_text(f"{engine} {instance} ({model})")
        x = [_minute(s.minute_ns) for s in rows]
        tokens = [
            None
            if s.prompt_tokens is None and s.generation_tokens is None
            else (s.prompt_tokens or 0.0) + (s.generation_tokens or 0.0)
            for s in rows
        ]
        data += [
            _line(x, [s.running_mean for s in rows], f"{name} running", color, "y"),
            _line(x, [s.waiting_mean for s in rows], f"{name} waiting", color, "y", dash="dot"),
            _line(x, [s.kv_cache_mean for s in rows], f"{name} KV cache (mean)", color, "y2"),
            _line(x, [s.kv_cache_max for s in rows], f"{name} KV cache (max)", color, "y2",
                  width=1, dash="dot"),
            _line(x, tokens, f"{name} tokens counted", color, "y3", dash="dash"),
        ]  # fmt: skip
    minutes = sorted({m for trace in data for m in trace["x"]})
    # The legend (two client entries, five per server, "in progress") goes below the axis, in
    # rows of three: above it, its rows ran over the title and the top panel.
    legend_rows = -(-(len(data) + 1) // 3)
    layout = base_layout(
        height=560 + 22 * legend_rows,
        margin={"l": 64, "r": 64, "t": 48, "b": 80 + 22 * legend_rows},
        title={"text": "Serving side: server queue and KV cache beside the client", "x": 0,
               "y": 0.99},
        legend={"orientation": "h", "x": 0, "y": -0.17, "yanchor": "top"},
        xaxis=time_axis(minutes=minutes) | {"anchor": "y3"},
        yaxis=value_axis("requests", domain=[0.70, 1]),
        yaxis2=value_axis("KV cache", domain=[0.37, 0.63], anchor="x",
                          range=[0, 1.05], tickformat=".0%"),
        yaxis3=value_axis("tokens / min", domain=[0, 0.30], anchor="x"),
    )  # fmt: skip
    layout["shapes"].append(
        {"type": "line", "xref": "paper", "x0": 0, "x1": 1, "yref": "y2", "y0": KV_FULL,
         "y1": KV_FULL, "line": {"color": CAP_COLOR, "dash": "dash", "width": 1}}
    )  # fmt: skip
    fig = figure(data, layout)
    add_in_progress(fig, minutes, [m in open_minutes for m in minutes])
    return fig
