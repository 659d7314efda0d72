"""The text and class columns of ``csv:``, ``jsonl:``, ``parquet:`` and ``hf-disk:`` data, read as laya reads them.

``csv:`` and ``jsonl:`` files are bytes: read as UTF-8, with or without a byte-order mark, unless ``--encoding``
names their codec; bytes that do not decode are one line naming the file, the line and the byte. ``parquet:`` and
``hf-disk:`` hold Arrow strings (UTF-8 by definition): their text column must be a string column. A file with no
rows, a missing column, a text that is no string: one line each (``LayaError``), before anything is trained.

A folder holds one file, or ``train*`` and ``test*`` (or ``validation``/``val``) files: every file of a split
(``train-00000-of-00002.parquet``, ``train-00001-of-00002.parquet``…, as the Hugging Face hub shards them) is read,
in name order. Parquet files are found in subfolders too (the hub's ``data/``), and Parquet shards without split
names are one data set, as the image reader takes them; several csv/jsonl files without a ``train`` one are an
error (which one is the data?).
"""

from __future__ import annotations

import codecs
import csv
import io
import json
from pathlib import Path

from ..runtime.errors import LayaError

TEXT_FILE_KINDS = ("csv", "jsonl")  # what --encoding applies to: the formats that are bytes, not Arrow strings
SUFFIXES = {"csv": ".csv", "jsonl": ".jsonl", "parquet": ".parquet"}
TEST_NAMES = ("test", "validation", "val")
# Byte-order marks of the wide Unicode encodings (UTF-32's first: UTF-16 LE's is its prefix).
BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


# --------------------------------------------------------------------------- bytes to text


def decode_file(path: Path, encoding: str | None) -> str:
    """The file's text: ``encoding`` (Python's codec name), or UTF-8 with or without a BOM when None."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise LayaError(f"cannot read {path}: {e.strerror or e}") from None
    if encoding is None:
        check_not_wide(path, data)
    try:
        return data.decode(encoding or "utf-8-sig")
    except UnicodeDecodeError as e:
        raise LayaError(undecodable(path, data, e, encoding)) from None


def check_not_wide(path: Path, data: bytes) -> None:
    """UTF-16 or UTF-32 where UTF-8 is expected: said by its byte-order mark, or by NUL bytes (valid UTF-8, but no
    text: what UTF-16 without a byte-order mark holds after every ASCII character)."""
    for bom, name in BOMS:
        if data.startswith(bom):
            what = name.upper()
            raise LayaError(
                f"{path} is {what} (it starts with a {what} byte-order mark), not UTF-8; pass --encoding {name}"
            )
    if bytes(1) in data:
        raise LayaError(
            f"{path} {_where(data, data.index(bytes(1)))}: 0x00 (NUL) is no text; UTF-16 without a byte-order mark? "
            f"pass --encoding (e.g. --encoding utf-16-le)"
        )


def undecodable(path: Path, data: bytes, e: UnicodeDecodeError, encoding: str | None) -> str:
    """One line: where the first byte that does not decode is (line, byte offset in the file), and what to pass."""
    shown = " ".join(f"0x{b:02x}" for b in data[e.start : min(e.end, e.start + 4)])
    wide = encoding is not None and encoding.startswith(("utf-16", "utf-32"))  # newlines are not single bytes there
    where = f"byte {e.start} of the file" if wide else _where(data, e.start)
    if encoding is None:
        hint = "cp1252" if _decodes(data, "cp1252") else "latin-1"
        return f"{path} {where}: {shown} is not UTF-8; pass --encoding (e.g. --encoding {hint})"
    return f"{path} {where}: {shown} is not {encoding}; pass the file's encoding with --encoding"


def _where(data: bytes, at: int) -> str:
    """Line and byte offset (from 0, as ``xxd``/``dd skip=`` count) of byte ``at`` in a file of one-byte newlines."""
    line = data.count(b"\n", 0, at) + 1
    return f"line {line}, byte {at} of the file"


def _decodes(data: bytes, encoding: str) -> bool:
    try:
        data.decode(encoding)
    except UnicodeDecodeError:
        return False
    return True


# --------------------------------------------------------------------------- the columns of one file


def check_columns(where: str, names, text_column: str, label_column: str) -> None:
    names = list(names)
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:  # csv.DictReader would keep the last of them, silently
        raise LayaError(
            f"{where} names column {', '.join(repr(n) for n in repeated)} more than once (columns: "
            f"{', '.join(names)}); give each column its own name"
        )
    for option, column in (("--text-column", text_column), ("--label-column", label_column)):
        if column not in names:
            raise LayaError(f"{where} has no column '{column}' (columns: {', '.join(names)}); choose it with {option}")


def read_csv(path: Path, text_column: str, label_column: str, encoding: str | None) -> tuple[list, list]:
    text = decode_file(path, encoding)
    if not text.strip():
        raise LayaError(f"{path} is empty: a csv: file needs a header row naming its columns, then one row per text")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        check_columns(str(path), reader.fieldnames or [], text_column, label_column)
        rows = list(reader)
    except csv.Error as e:
        raise LayaError(f"{path} line {reader.line_num} is not CSV ({e})") from None
    return [r[text_column] for r in rows], [r[label_column] for r in rows]


def read_jsonl(path: Path, text_column: str, label_column: str, encoding: str | None) -> tuple[list, list]:
    texts, labels = [], []
    for k, line in enumerate(io.StringIO(decode_file(path, encoding)), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            raise LayaError(f"{path} line {k} is not JSON") from None
        if not isinstance(row, dict):
            raise LayaError(f"{path} line {k} is not a JSON object")
        check_columns(f"{path} line {k}", row, text_column, label_column)
        text = row[text_column]
        if text is not None and not isinstance(text, str):
            raise LayaError(
                f"{path} line {k}: '{text_column}' is a JSON {_json_type(text)}, not a string; every text must be "
                f"a string (choose the text column with --text-column)"
            )
        if isinstance(row[label_column], (dict, list)):
            raise LayaError(f"{path} line {k}: '{label_column}' is a JSON {_json_type(row[label_column])}, not a class")
        texts.append(text)
        labels.append(row[label_column])
    return texts, labels


def _json_type(value) -> str:
    return {bool: "boolean", int: "number", float: "number", dict: "object", list: "array"}.get(type(value), "value")


def _is_string_type(t) -> bool:
    import pyarrow as pa

    if pa.types.is_dictionary(t):
        t = t.value_type
    return pa.types.is_string(t) or pa.types.is_large_string(t) or getattr(pa.types, "is_string_view", bool)(t)


def check_string_column(where: str, schema, text_column: str) -> None:
    """An Arrow text column must hold strings (Arrow strings are UTF-8): not numbers, not bytes."""
    t = schema.field(text_column).type
    if not _is_string_type(t):
        raise LayaError(
            f"{where}: column '{text_column}' holds {t} values, not strings; choose the text column with --text-column"
        )


def read_parquet(path: Path, text_column: str, label_column: str, encoding: str | None = None) -> tuple[list, list]:
    from .shards import _pyarrow

    try:
        table = _pyarrow().ParquetFile(path)
    except LayaError:
        raise
    except Exception as e:
        raise LayaError(f"{path} is not a readable Parquet file ({str(e).splitlines()[0][:80]})") from None
    check_columns(str(path), table.schema_arrow.names, text_column, label_column)
    check_string_column(str(path), table.schema_arrow, text_column)
    cols = table.read(columns=[text_column, label_column])
    return cols.column(0).to_pylist(), cols.column(1).to_pylist()


READERS = {"csv": read_csv, "jsonl": read_jsonl, "parquet": read_parquet}


# --------------------------------------------------------------------------- files and splits


def split_files(kind: str, root: Path) -> list[tuple[str, list[Path]]]:
    """[(split, its files)]: ``("all", [file])``, or train then test (``test``/``validation``/``val``) files."""
    suffix = SUFFIXES[kind]
    if root.is_file():
        return [("all", [root])]
    if not root.is_dir():
        raise LayaError(
            f"{kind} data not found: {root} (a {suffix} file, or a folder with train{suffix} and test{suffix})"
        )
    found = sorted(root.rglob(f"*{suffix}") if kind == "parquet" else root.glob(f"*{suffix}"))
    splits: dict[str, list[Path]] = {}
    for p in found:
        splits.setdefault(p.name.split("-")[0].split(".")[0].lower(), []).append(p)
    if "train" in splits:
        test = next((splits[n] for n in TEST_NAMES if n in splits), None)
        return [("train", splits["train"])] + ([("test", test)] if test else [])
    if len(found) == 1 or (kind == "parquet" and found):  # Parquet shards without split names: one data set
        return [("all", found)]
    raise LayaError(f"{root} holds no train{suffix} (found: {', '.join(p.name for p in found) or 'nothing'})")


def read_files(kind: str, root: Path, text_column: str, label_column: str, encoding: str | None) -> list:
    """[(split, texts, labels)] of ``csv:``/``jsonl:``/``parquet:`` data, each split's files in name order."""
    parts = []
    for name, files in split_files(kind, root):
        texts, labels = [], []
        for path in files:
            t, y = READERS[kind](path, text_column, label_column, encoding)
            texts += t
            labels += y
        parts.append((name, texts, labels))
    return parts


def read_hf_disk(root: Path, text_column: str, label_column: str) -> tuple[list, list | None]:
    """[(split, texts, labels)] of a ``save_to_disk`` folder, and the label column's declared class names."""
    from .shards import read_hf_splits

    parts = []
    splits, declared = read_hf_splits(root, label_column)
    for name, ds in splits:
        check_columns(f"{root} ({name})", ds.column_names, text_column, label_column)
        check_string_column(f"{root} ({name})", ds.data.schema, text_column)
        parts.append((name, list(ds[text_column]), list(ds[label_column])))
    return parts, declared


def holds_text(kind: str, root: Path, image_column: str) -> bool:
    """Whether ``parquet:``/``hf-disk:`` data given without ``--text-column`` holds text: no image column, a
    column named ``text`` (read then as a ``csv:`` file is, its text column ``text``)."""
    if kind == "parquet":
        from .shards import _pyarrow

        try:
            names = _pyarrow().ParquetFile(split_files(kind, root)[0][1][0]).schema_arrow.names
        except Exception:  # not found, not Parquet: the image reader says so in its own words
            return False
    elif kind == "hf-disk":
        from .shards import read_hf_splits

        try:
            names = read_hf_splits(root, "label")[0][0][1].column_names
        except LayaError:
            return False
    else:
        return False
    return image_column not in names and "text" in names
