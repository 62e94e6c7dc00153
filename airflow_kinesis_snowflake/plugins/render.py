"""The lag page's HTML: per Kinesis connector, its shards' lag over recent batches as an inline SVG chart
and a table; per DynamoDB connector, a table of its tables (generation, snapshot, last batch) and one
of their stream shards (checkpoint age against the safe age). Plain HTML and SVG, no script and
nothing fetched from elsewhere (the page works offline)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from html import escape

from airflow_kinesis_snowflake.core.lag import LagLevel, format_millis, severity
from airflow_kinesis_snowflake.registry import source_of
from airflow_kinesis_snowflake.status import AnyConnectorStatus, ConnectorStatus, DynamoDBConnectorStatus, ShardStatus

# One colour per shard, in shard order (repeating): readable on white and told apart.
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")
WIDTH, HEIGHT, MARGIN = 640, 200, 48
LEVEL_CLASSES = {LagLevel.OK: "ok", LagLevel.WARNING: "warning", LagLevel.ERROR: "error"}

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5rem; color: #1a1a1a; }
h1 { font-size: 1.4rem; } h2 { font-size: 1.15rem; margin-top: 2rem; }
table { border-collapse: collapse; margin-top: .5rem; font-size: .9rem; }
th, td { border-bottom: 1px solid #ddd; padding: .3rem .7rem; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.warning td { background: #fff4d6; } .error td { background: #ffe0e0; }
.note { color: #555; font-size: .85rem; } .failed { color: #b00020; }
svg text { font-size: 11px; fill: #444; }
"""


def render_page(
    statuses: Sequence[AnyConnectorStatus], now: datetime, freshness: str | None = None, problem: str | None = None
) -> str:
    """The whole page for ``statuses``, as read at ``now``.

    :param freshness: how old the figures are and how often they are read (:func:`~.core.lag_page.freshness`).
    :param problem: why there is no connector to show, and what to set (:func:`~.core.lag_page.missing_connectors`).
    """
    sections = "\n".join(_connector(status) for status in statuses) or "<p>No connector file in the DAGs folder.</p>"
    if problem is not None:
        sections = f"<p class='failed needs-setting'>{escape(problem)}</p>"
    fresh = f" <span class='freshness'>{escape(freshness)}</span>" if freshness else ""
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<title>Kinesis to Snowflake: lag</title>"
        f"<style>{STYLE}</style></head><body>"
        "<h1>Kinesis to Snowflake: lag per shard</h1>"
        f"<p class='note'>As of {escape(now.strftime('%Y-%m-%d %H:%M:%S %Z'))}.{fresh} Lag: how far behind the "
        "shard's tip each batch's read ended (Kinesis's <code>MillisBehindLatest</code>). A warning past half of "
        "the stream's retention, an error past 90%. A DynamoDB stream reports no lag: its shards show how long ago a "
        "batch last read them, against the connector's safe age (<code>max_checkpoint_age_hours</code>), and a "
        "table's snapshot under way its segments and items done, percentage and ETA (estimated from the table's "
        "<code>ItemCount</code>).</p>"
        f"{sections}</body></html>"
    )


def _connector(status: AnyConnectorStatus) -> str:
    section: str = source_of(status).part("lag_section")(status)
    return section


def kinesis_section(status: ConnectorStatus) -> str:
    """A Kinesis connector's section of the page: its shards' lag (its registry part ``lag_section``)."""
    cid = escape(status.connector_id)
    retention = f"{status.retention_hours} h" if status.retention_hours is not None else "unknown"
    head = (
        f"<section class='connector' data-connector='{cid}'><h2>{cid}</h2>"
        f"<p class='note'>Stream <code>{escape(status.stream_name)}</code> into <code>{escape(status.table)}</code>, "
        f"application <code>{escape(status.application_name)}</code>, retention {escape(retention)}</p>"
    )
    if status.error is not None:
        return f"{head}<p class='failed'>Could not read it: {escape(status.error)}</p></section>"
    if not status.shards:
        return f"{head}<p>No shard yet: no batch has run.</p></section>"
    return f"{head}{chart(status.shards, status.retention_hours)}{_table(status)}</section>"


def _table(status: ConnectorStatus) -> str:
    header = "".join(
        f"<th>{h}</th>"
        for h in ("", "shard", "lag", "checkpoint age", "checkpoint", "last batch", "finished", "rows", "dead letters")
    )
    rows = []
    for i, shard in enumerate(status.shards):
        level = status.level(shard)
        age = shard.checkpoint_age_seconds
        cells = (
            f"<td><svg width='12' height='12'><rect width='12' height='12' fill='{_colour(i)}'/></svg></td>",
            f"<td class='shard'>{escape(shard.shard_id)}</td>",
            f"<td class='num lag'>{_millis(shard.millis_behind_latest)}</td>",
            f"<td class='num'>{'-' if age is None else format_millis(int(age * 1000))}</td>",
            f"<td><code>{escape(shard.checkpoint.sequence_number) if shard.checkpoint else '-'}</code></td>",
            f"<td><code>{escape(shard.last_batch_id or '-')}</code></td>",
            f"<td>{shard.last_batch_at.strftime('%Y-%m-%d %H:%M:%S') if shard.last_batch_at else '-'}</td>",
            f"<td class='num rows'>{'-' if shard.rows is None else shard.rows}</td>",
            f"<td class='num dead-letters'>{'-' if shard.dead_letters is None else shard.dead_letters}</td>",
        )
        rows.append(
            f"<tr class='{LEVEL_CLASSES[level]}' data-shard='{escape(shard.shard_id)}' "
            f"data-lag-ms='{'' if shard.millis_behind_latest is None else shard.millis_behind_latest}'>"
            f"{''.join(cells)}</tr>"
        )
    return f"<table><thead><tr>{header}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def dynamodb_section(status: DynamoDBConnectorStatus) -> str:
    """A DynamoDB connector's section of the page: each table's generation, snapshot and stream shards
    (its registry part ``lag_section``)."""
    cid = escape(status.connector_id)
    head = (
        f"<section class='connector dynamodb' data-connector='{cid}'><h2>{cid}</h2>"
        f"<p class='note'>DynamoDB tables, application <code>{escape(status.application_name)}</code>, "
        f"safe age {status.safe_age_hours:g} h</p>"
    )
    if status.error is not None:
        return f"{head}<p class='failed'>Could not read it: {escape(status.error)}</p></section>"
    skipped = "".join(f"<p class='note skipped'>Not synced: {escape(reason)}</p>" for reason in status.skipped)
    if not status.tables:
        return f"{head}<p>No table to sync.</p>{skipped}</section>"
    table_rows = []
    for t in status.tables:
        level = max((status.level(s) for s in t.shards), key=severity, default=LagLevel.OK)
        cells = (
            f"<td class='table'>{escape(t.table)}</td>",
            f"<td><code>{escape(t.destination)}</code></td>",
            f"<td class='num generation'>{'-' if t.generation is None else t.generation}</td>",
            f"<td class='snapshot'>{'-' if t.snapshot is None else escape(t.snapshot.text())}</td>",
            f"<td><code>{escape(t.last_batch_id or '-')}</code></td>",
            f"<td>{t.last_batch_at.strftime('%Y-%m-%d %H:%M:%S') if t.last_batch_at else '-'}</td>",
            f"<td class='num changes'>{'-' if t.last_batch_changes is None else t.last_batch_changes}</td>",
        )
        table_rows.append(f"<tr class='{LEVEL_CLASSES[level]}' data-table='{escape(t.table)}'>{''.join(cells)}</tr>")
    shard_rows = []
    for t in status.tables:
        for shard in t.shards:
            age = shard.checkpoint_age_seconds
            shard_cells = (
                f"<td>{escape(t.table)}</td>",
                f"<td class='shard'>{escape(shard.shard_id)}{' (ended)' if shard.ended else ''}</td>",
                f"<td class='num age'>{'-' if age is None else format_millis(int(age * 1000))}</td>",
                f"<td><code>{escape(shard.checkpoint.sequence_number) if shard.checkpoint else '-'}</code></td>",
                f"<td><code>{escape(shard.last_batch_id or '-')}</code></td>",
                f"<td class='num records'>{'-' if shard.rows is None else shard.rows}</td>",
            )
            shard_rows.append(
                f"<tr class='{LEVEL_CLASSES[status.level(shard)]}' data-table='{escape(t.table)}' "
                f"data-shard='{escape(shard.shard_id)}'>{''.join(shard_cells)}</tr>"
            )
    tables = _html_table(
        ("table", "destination", "generation", "snapshot", "last batch", "finished", "changes"), table_rows
    )
    shards = (
        _html_table(("table", "stream shard", "checkpoint age", "checkpoint", "last batch", "records"), shard_rows)
        if shard_rows
        else ""
    )
    return f"{head}{tables}{shards}{skipped}</section>"


def _html_table(header: Sequence[str], rows: Sequence[str]) -> str:
    head = "".join(f"<th>{h}</th>" for h in header)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _colour(index: int) -> str:
    return COLOURS[index % len(COLOURS)]


def _millis(millis: int | None) -> str:
    return "-" if millis is None else format_millis(millis)


def chart(shards: Sequence[ShardStatus], retention_hours: int | None) -> str:
    """An SVG line chart: one line per shard, its lag (y) at each recent batch that read it (x, in time).

    The y axis runs from 0 to the largest lag (at least one second); when the retention's warning
    threshold (half of it) is within that range, it is drawn as a dashed line.
    """
    points = [(at, lag) for shard in shards for at, lag in shard.history if lag is not None]
    if not points:
        return "<p class='note'>No batch reported a lag yet.</p>"
    start, end = min(at for at, _ in points), max(at for at, _ in points)
    span = max((end - start).total_seconds(), 1.0)
    top = max(max(lag for _, lag in points), 1000)
    warning = retention_hours * 1_800_000 if retention_hours else None
    plot_w, plot_h = WIDTH - 2 * MARGIN, HEIGHT - 2 * MARGIN
    one_moment = start == end

    def x(at: datetime) -> float:
        return WIDTH / 2 if one_moment else MARGIN + (at - start).total_seconds() / span * plot_w

    def y(lag: int) -> float:
        return HEIGHT - MARGIN - lag / top * plot_h

    parts = [
        f"<svg class='lag-chart' role='img' aria-label='lag per shard over recent batches' width='{WIDTH}' "
        f"height='{HEIGHT}' viewBox='0 0 {WIDTH} {HEIGHT}' xmlns='http://www.w3.org/2000/svg'>",
        f"<line x1='{MARGIN}' y1='{HEIGHT - MARGIN}' x2='{WIDTH - MARGIN}' y2='{HEIGHT - MARGIN}' stroke='#999'/>",
        f"<line x1='{MARGIN}' y1='{MARGIN}' x2='{MARGIN}' y2='{HEIGHT - MARGIN}' stroke='#999'/>",
        f"<text x='{MARGIN - 6}' y='{MARGIN + 4}' text-anchor='end'>{format_millis(top)}</text>",
        f"<text x='{MARGIN - 6}' y='{HEIGHT - MARGIN + 4}' text-anchor='end'>0s</text>",
        f"<text x='{MARGIN}' y='{HEIGHT - MARGIN + 16}'>{start.strftime('%H:%M:%S')}</text>",
        f"<text x='{WIDTH - MARGIN}' y='{HEIGHT - MARGIN + 16}' text-anchor='end'>{end.strftime('%H:%M:%S')}</text>",
    ]
    if warning is not None and warning <= top:
        parts.append(
            f"<line class='warning-threshold' x1='{MARGIN}' y1='{y(int(warning)):.1f}' x2='{WIDTH - MARGIN}' "
            f"y2='{y(int(warning)):.1f}' stroke='#e0a000' stroke-dasharray='4 3'/>"
        )
    for i, shard in enumerate(shards):
        colour = _colour(i)
        series = [(x(at), y(lag)) for at, lag in shard.history if lag is not None]
        if not series:
            continue
        sid = escape(shard.shard_id)
        if len(series) > 1:
            path = " ".join(f"{px:.1f},{py:.1f}" for px, py in series)
            parts.append(
                f"<polyline data-shard='{sid}' points='{path}' fill='none' stroke='{colour}' stroke-width='2'/>"
            )
        parts += [
            f"<circle data-shard='{sid}' cx='{px:.1f}' cy='{py:.1f}' r='3' fill='{colour}'>"
            f"<title>{sid}</title></circle>"
            for px, py in series
        ]
    parts.append("</svg>")
    return "".join(parts)
