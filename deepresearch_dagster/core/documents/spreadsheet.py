"""Spreadsheets: XLSX through openpyxl (the maintained pure-Python reader; read-only mode streams
rows, cached formula values are read) and CSV through the stdlib. Each sheet is a section holding
a Markdown table; the passage splitter later cuts long tables repeating the header row."""

from __future__ import annotations

import csv
import datetime as dt
import io
import zipfile

from .markdown import decode_text
from .model import ExtractedDocument, Section, SkipFile, markdown_table
from .office import OLE_MAGIC

MAX_ROWS = 20_000


def _cell(value: object, number_format: str | None = None) -> str:
    if value is None:
        return ""
    if isinstance(value, dt.datetime):
        return value.date().isoformat() if value.time() == dt.time() else value.isoformat(sep=" ")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, (int, float)):
        fmt = number_format or ""
        if "%" in fmt:
            return f"{value * 100:.{1 if '.0' in fmt else 0}f}%"
        prefix = next((c for c in "$€£" if c in fmt), "")
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if prefix or "#,##" in fmt:
            return f"{prefix}{value:,}" if isinstance(value, int) else f"{prefix}{value:,.2f}"
        return f"{value:g}" if isinstance(value, float) else str(value)
    return str(value)


def extract_xlsx_document(data: bytes, stem: str) -> ExtractedDocument:
    import openpyxl

    if data.startswith(OLE_MAGIC):
        raise SkipFile("encrypted XLSX (password-protected Office file)")
    if not zipfile.is_zipfile(io.BytesIO(data)):
        raise SkipFile("corrupt XLSX: not a ZIP package")
    try:
        book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    except Exception as exc:
        raise SkipFile(f"corrupt XLSX: {type(exc).__name__}: {str(exc)[:120]}") from exc
    sections: list[Section] = []
    try:
        for sheet in book.worksheets:
            rows: list[list[str]] = []
            for row in sheet.iter_rows():
                values = [_cell(c.value, getattr(c, "number_format", None)) for c in row]
                if any(values):
                    rows.append(values)
                if len(rows) > MAX_ROWS:
                    break
            # A title line above the table ("Fleet by depot, Q4 2025") is kept as prose.
            lead = []
            while len(rows) > 1 and sum(1 for v in rows[0] if v) == 1 and sum(1 for v in rows[1] if v) > 1:
                lead.append(next(v for v in rows.pop(0) if v))
            table = markdown_table(rows)
            body = "\n\n".join([*lead, table]).strip()
            if body:
                sections.append(Section((sheet.title,), body))
    finally:
        book.close()
    if not sections:
        raise SkipFile("XLSX has no cell values")
    title = (book.properties.title or "").strip() if book.properties else ""
    return ExtractedDocument(title or stem.replace("_", " "), sections, "xlsx")


def sniff_dialect(sample: str) -> type[csv.Dialect] | csv.Dialect:
    """The CSV dialect of a file's first 4 KB of text (comma, semicolon, tab or pipe)."""
    try:
        return csv.Sniffer().sniff(sample[:4096], delimiters=",;\t|")
    except csv.Error:
        return csv.excel


def csv_rows(text: str, dialect: type[csv.Dialect] | csv.Dialect) -> list[list[str]]:
    """The rows of CSV text that hold any value."""
    return [r for r in csv.reader(io.StringIO(text), dialect) if any(c.strip() for c in r)]


def extract_csv_document(data: bytes, stem: str) -> ExtractedDocument:
    text = decode_text(data)
    rows = csv_rows(text, sniff_dialect(text))[:MAX_ROWS]
    table = markdown_table(rows)
    if not table:
        raise SkipFile("CSV has no rows")
    return ExtractedDocument(stem.replace("_", " "), [Section((), table)], "csv")
