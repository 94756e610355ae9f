"""Table inputs (Parquet, Arrow, CSV; a file, a folder, a glob) read as records: columns chosen by
name, ids, kept columns typed again in the output, and every bad input named by file and row."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from decimal import Decimal
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest

from jobs.input_problems import InvalidInputError, UnusableInputError
from jobs.job_input import JobInput, check_input
from producers.images import ImageRecord
from producers.inputs import MAX_TEXT_BYTES, InputError, InputRecord
from producers.table_rows import Columns
from results.formats import OutputFormat
from results.kept_columns import KeptColumns
from schemas import InferenceResult, Tensor
from tests.support.item_output import write_columnar, write_items

TYPED = pa.table(
    {
        "text": ["one", "two", "three"],
        "n": pa.array([1, 2**40, None], pa.int64()),
        "small": pa.array([1, 2, 3], pa.int16()),
        "f": pa.array([0.5, float("nan"), None], pa.float64()),
        "flag": [True, False, None],
        "at": pa.array([dt.datetime(2024, 1, 2, 3, 4, 5, 123456), None, dt.datetime(1999, 12, 31)], pa.timestamp("us")),
        "at_utc": pa.array([dt.datetime(2024, 5, 6, tzinfo=dt.UTC)] * 3, pa.timestamp("ns", tz="UTC")),
        "day": pa.array([dt.date(2024, 1, 2)] * 3, pa.date32()),
        "price": pa.array([Decimal("1.25"), Decimal("-3.50"), None], pa.decimal128(10, 2)),
        "tags": pa.array([["a", "b"], [], None], pa.list_(pa.string())),
        "meta": pa.array([{"k": 1}, {"k": 2}, None], pa.struct([("k", pa.int32())])),
    }
)
KEEP = ("n", "small", "f", "flag", "at", "at_utc", "day", "price", "tags", "meta")


def items(source: JobInput) -> list[InputRecord | ImageRecord | InputError]:
    return list(source.read())


def errors(source: JobInput) -> list[str]:
    return [str(e) for e in source.read() if isinstance(e, InputError)]


def kept_table(source: JobInput) -> pa.Table:
    """The kept columns as the Parquet output writes them: through the records' attributes and
    the schema the registry row holds."""
    kept = KeptColumns.of(source.kept_schema())
    assert kept is not None
    records = [r for r in source.read() if isinstance(r, InputRecord)]
    vector = (Tensor.from_array("embedding", np.ones(2, np.float32)),)
    results = [
        InferenceResult("job", r.record_id, i, "tiny", "1", vector, "b", 1, r.attributes) for i, r in enumerate(records)
    ]
    out = io.BytesIO()
    write_columnar(results, results[0], out, OutputFormat.PARQUET, kept)
    return pq.read_table(io.BytesIO(out.getvalue()))


def test_a_parquet_file_gives_its_texts_in_order_with_row_number_ids(tmp_path: Path) -> None:
    pq.write_table(TYPED, tmp_path / "in.parquet")
    source = JobInput.open(str(tmp_path / "in.parquet"))
    assert source.kind == "text"
    got = items(source)
    assert [(r.record_id, r.text, r.attributes) for r in got if isinstance(r, InputRecord)] == [
        ("1", "one", {}),
        ("2", "two", {}),
        ("3", "three", {}),
    ]


def test_kept_columns_come_back_equal_and_of_their_own_type_in_parquet(tmp_path: Path) -> None:
    pq.write_table(TYPED, tmp_path / "in.parquet", row_group_size=2)
    source = JobInput.open(str(tmp_path / "in.parquet"), columns=Columns(keep=KEEP))
    table = kept_table(source)
    for name in KEEP:
        assert table.schema.field(name).type == TYPED.schema.field(name).type, name
        got, want = table.column(name).to_pylist(), TYPED.column(name).to_pylist()
        if name == "f":  # NaN is not equal to itself
            assert got[0] == 0.5 and got[1] != got[1] and got[2] is None
        else:
            assert got == want, name


def test_kept_columns_are_json_values_in_json_lines(tmp_path: Path) -> None:
    pq.write_table(TYPED, tmp_path / "in.parquet")
    source = JobInput.open(str(tmp_path / "in.parquet"), columns=Columns(keep=("n", "at", "price", "tags", "f")))
    kept = KeptColumns.of(source.kept_schema())
    first = next(r for r in source.read() if isinstance(r, InputRecord))
    result = InferenceResult("job", first.record_id, 0, "tiny", "1", (), "b", 1, first.attributes)
    out = io.StringIO()
    write_items([result], result, None, out, kept=kept)
    line = json.loads(out.getvalue())
    assert {k: line[k] for k in ("n", "at", "price", "tags", "f")} == {
        "n": 1,
        "at": "2024-01-02T03:04:05.123456",
        "price": "1.25",
        "tags": ["a", "b"],
        "f": 0.5,
    }
    assert "attributes" not in line


def test_files_written_by_pandas_and_duckdb_read_with_their_types(tmp_path: Path) -> None:
    frame = pd.DataFrame({"body": ["a", "b"], "stars": [5, 3], "stamp": pd.to_datetime(["2024-01-01", "2024-02-01"])})
    frame.to_parquet(tmp_path / "pandas.parquet")
    rows = "('c', 4, TIMESTAMP '2024-03-01'), ('d', 1, TIMESTAMP '2024-04-01')"
    duckdb.sql(f"COPY (SELECT * FROM (VALUES {rows}) t(body, stars, stamp)) TO '{tmp_path / 'duck.parquet'}'")
    columns = Columns(text="body", keep=("stars", "stamp"))
    for name, texts in (("pandas.parquet", ["a", "b"]), ("duck.parquet", ["c", "d"])):
        source = JobInput.open(str(tmp_path / name), columns=columns)
        assert [r.text for r in items(source) if isinstance(r, InputRecord)] == texts
        table = kept_table(source)
        assert pa.types.is_integer(table.schema.field("stars").type)
        assert pa.types.is_timestamp(table.schema.field("stamp").type)


def test_a_csv_with_quoting_and_embedded_newlines_keeps_each_value_whole(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, quoting=csv.QUOTE_MINIMAL)
        writer.writerow(["id", "text", "note"])
        writer.writerow(["a", 'she said "hi",\nthen left', "x,y"])
        writer.writerow(["b", "plain", ""])
    source = JobInput.open(str(path), columns=Columns(id="id", keep=("note",)))
    got = [(r.record_id, r.text, r.line, r.attributes) for r in items(source) if isinstance(r, InputRecord)]
    assert got == [("a", 'she said "hi",\nthen left', 2, {"note": '"x,y"'}), ("b", "plain", 4, {"note": '""'})]


def test_a_tsv_and_an_arrow_file_read_like_parquet(tmp_path: Path) -> None:
    (tmp_path / "in.tsv").write_text("text\tn\none\t1\ntwo\t2\n", encoding="utf-8")
    feather.write_feather(TYPED.select(["text", "n"]), tmp_path / "in.feather")
    with pa.OSFile(str(tmp_path / "in.arrow"), "wb") as sink, pa.ipc.new_stream(sink, TYPED.schema) as writer:
        writer.write_table(TYPED)
    for name in ("in.tsv", "in.feather", "in.arrow"):
        texts = [r.text for r in items(JobInput.open(str(tmp_path / name))) if isinstance(r, InputRecord)]
        assert texts[:2] == ["one", "two"], name


def test_a_folder_and_a_glob_of_two_files_give_both_files_rows_in_name_order(tmp_path: Path) -> None:
    folder = tmp_path / "export"
    folder.mkdir()
    pq.write_table(pa.table({"text": ["c", "d"]}), folder / "part-1.parquet")
    pq.write_table(pa.table({"text": ["a", "b"]}), folder / "part-0.parquet")
    (folder / "_SUCCESS").write_text("")
    for name in (str(folder), str(folder / "part-*.parquet")):
        source = JobInput.open(name)
        got = [(r.record_id, r.text) for r in items(source) if isinstance(r, InputRecord)]
        assert got == [("1", "a"), ("2", "b"), ("3", "c"), ("4", "d")], name


def test_an_image_table_of_paths_and_of_bytes_gives_image_records(tmp_path: Path) -> None:
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 20
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "a.png").write_bytes(png)
    pq.write_table(pa.table({"image": ["img/a.png"], "label": ["cat"]}), tmp_path / "paths.parquet")
    pq.write_table(pa.table({"image": pa.array([png], pa.binary())}), tmp_path / "bytes.parquet")
    by_path = items(JobInput.open(str(tmp_path / "paths.parquet"), columns=Columns(keep=("label",))))
    by_bytes = items(JobInput.open(str(tmp_path / "bytes.parquet")))
    assert isinstance(by_path[0], ImageRecord) and by_path[0].path == tmp_path / "img" / "a.png"
    assert by_path[0].attributes == {"label": '"cat"'}
    assert isinstance(by_bytes[0], ImageRecord) and by_bytes[0].data == png
    assert by_bytes[0].content_type == "image/png"


@pytest.mark.parametrize(
    ("table", "columns", "message"),
    [
        (pa.table({"body": ["a"]}), Columns(), 'in.parquet: no column "text" (--text-column); its columns are: body'),
        (
            pa.table({"text": ["a"]}),
            Columns(keep=("x",)),
            'in.parquet: no column "x" (--keep-columns); its columns are: text',
        ),
        (
            pa.table({"text": pa.array([["a"]], pa.list_(pa.string()))}),
            Columns(),
            'in.parquet: column "text" holds list<element: string>, not text (--text-column names the column of texts)',
        ),
        (
            pa.table({"text": ["a"], "blob": pa.array([b"x"], pa.binary())}),
            Columns(keep=("blob",)),
            'in.parquet: column "blob" holds binary: a binary column is not kept (--keep-columns), JSON cannot hold it',
        ),
        (
            pa.table({"text": ["a"], "id": [1.5]}),
            Columns(id="id"),
            'in.parquet: column "id" holds double: ids are text or integers (--id-column)',
        ),
    ],
)
def test_a_table_whose_columns_cannot_make_records_is_refused_naming_them(
    tmp_path: Path, table: pa.Table, columns: Columns, message: str
) -> None:
    pq.write_table(table, tmp_path / "in.parquet")
    source = JobInput.open(str(tmp_path / "in.parquet"), columns=columns)
    assert errors(source) == [f"{tmp_path}/{message}"]
    with pytest.raises(UnusableInputError, match="nothing was submitted"):
        check_input(source, source.validate_keeping(0)[:2], skip_invalid=True)


def test_bad_rows_are_named_by_row_and_skipped_with_skip_invalid(tmp_path: Path) -> None:
    table = pa.table(
        {
            "text": ["ok", None, "  ", "x" * (MAX_TEXT_BYTES + 1), "dup", "fine"],
            "id": ["a", "b", "c", "d", "a", "f"],
            "note": ["n", "n", "n", "n", "n", "y" * 70_000],
        }
    )
    pq.write_table(table, tmp_path / "in.parquet")
    source = JobInput.open(str(tmp_path / "in.parquet"), columns=Columns(id="id", keep=("note",)))
    where = f"{tmp_path}/in.parquet"
    assert errors(source) == [
        f'{where}:row 2: "text" is null',
        f"{where}:row 3: text is empty",
        f"{where}:row 4: text is {MAX_TEXT_BYTES + 1} bytes, over the limit of {MAX_TEXT_BYTES}",
        f"{where}:row 5: duplicate id 'a' (first on row 1)",
        f"{where}:row 6: the kept columns hold 70,006 bytes, over the limit of 65,536",
    ]
    with pytest.raises(InvalidInputError):
        check_input(source, source.validate_keeping(0)[:2], skip_invalid=False)
    check_input(source, source.validate_keeping(0)[:2], skip_invalid=True)
    assert [r.record_id for r in items(source) if isinstance(r, InputRecord)] == ["a"]


def test_a_duplicate_id_in_a_second_file_names_the_first_file(tmp_path: Path) -> None:
    pq.write_table(pa.table({"text": ["a"], "id": [7]}), tmp_path / "1.parquet")
    pq.write_table(pa.table({"text": ["b"], "id": [7]}), tmp_path / "2.parquet")
    source = JobInput.open(str(tmp_path / "*.parquet"), columns=Columns(id="id"))
    assert errors(source) == [f"{tmp_path}/2.parquet:row 1: duplicate id '7' (first on row 1 of 1.parquet)"]


def test_a_truncated_or_foreign_parquet_file_is_refused_as_unreadable(tmp_path: Path) -> None:
    pq.write_table(pa.table({"text": ["a"] * 100}), tmp_path / "whole.parquet")
    (tmp_path / "cut.parquet").write_bytes((tmp_path / "whole.parquet").read_bytes()[:-30])
    (tmp_path / "text.parquet").write_text("text\nnot parquet\n")
    for name in ("cut.parquet", "text.parquet"):
        source = JobInput.open(str(tmp_path / name))
        (error,) = errors(source)
        assert error.startswith(f"{tmp_path}/{name}: not a readable Parquet file: "), error
        with pytest.raises(UnusableInputError):
            check_input(source, source.validate_keeping(0)[:2], skip_invalid=True)


def test_a_ragged_csv_row_is_named_by_its_line(tmp_path: Path) -> None:
    (tmp_path / "in.csv").write_text('text,n\n"two\nlines",1\nb,2,3\nc\nd,4\n', encoding="utf-8")
    source = JobInput.open(str(tmp_path / "in.csv"))
    assert errors(source) == [
        f"{tmp_path}/in.csv:line 4: 3 fields where the header has 2",
        f"{tmp_path}/in.csv:line 5: 1 fields where the header has 2",
    ]
    assert [r.text for r in items(source) if isinstance(r, InputRecord)] == ["two\nlines", "d"]


def test_json_lines_take_other_keys_for_text_and_id(tmp_path: Path) -> None:
    (tmp_path / "in.jsonl").write_text('{"key": "k1", "body": "one"}\n{"key": "k2"}\n', encoding="utf-8")
    source = JobInput.open(str(tmp_path / "in.jsonl"), columns=Columns(text_field="body", id_field="key"))
    got = items(source)
    assert isinstance(got[0], InputRecord) and (got[0].record_id, got[0].text) == ("k1", "one")
    assert str(got[1]) == f'{tmp_path}/in.jsonl:2: missing "body" (--text-field)'


@pytest.mark.parametrize("field", ["model", "reused"])
def test_a_kept_column_named_like_a_result_field_is_refused(tmp_path: Path, field: str) -> None:
    pq.write_table(pa.table({"text": ["a"], field: ["m"]}), tmp_path / "in.parquet")
    with pytest.raises(UnusableInputError, match=f"--keep-columns: {field} would shadow the result's own field"):
        JobInput.open(str(tmp_path / "in.parquet"), columns=Columns(keep=(field,)))


def test_image_bytes_over_the_limit_or_null_are_named_by_row_and_hugging_face_images_are_read(tmp_path: Path) -> None:
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 20
    pq.write_table(pa.table({"image": pa.array([png, b"x" * 101, None], pa.binary())}), tmp_path / "in.parquet")
    source = JobInput.open(str(tmp_path / "in.parquet"), max_image_bytes=100)
    assert source.kind == "image"
    assert errors(source) == [
        f"{tmp_path}/in.parquet:row 2: image is 101 bytes, over the record limit of 100",
        f'{tmp_path}/in.parquet:row 3: "image" is null',
    ]
    hf = pa.array([{"bytes": png, "path": "a.png"}], pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    pq.write_table(pa.table({"image": hf}), tmp_path / "hf.parquet")
    (record,) = items(JobInput.open(str(tmp_path / "hf.parquet")))
    assert isinstance(record, ImageRecord) and record.data == png


NANOS = pa.table(
    {
        "text": ["one", "two", "three"],
        "at": pa.array([1_700_000_000_123_456_789, None, -1], pa.timestamp("ns")),
        "at_ny": pa.array([1_700_000_000_123_456_789, 5, None], pa.timestamp("ns", tz="America/New_York")),
        "clock": pa.array([3_723_123_456_789, None, 1], pa.time64("ns")),
        "took": pa.array([1_123_456_789, -1, None], pa.duration("ns")),
    }
)


def test_nanosecond_times_are_kept_exactly_in_parquet_and_as_nine_digit_text_in_json_lines(tmp_path: Path) -> None:
    pq.write_table(NANOS, tmp_path / "in.parquet")
    keep = ("at", "at_ny", "clock", "took")
    source = JobInput.open(str(tmp_path / "in.parquet"), columns=Columns(keep=keep))
    assert errors(source) == []
    table = kept_table(source)
    for name in keep:
        assert table.schema.field(name).type == NANOS.schema.field(name).type, name
        assert table.column(name).cast(pa.int64()).to_pylist() == NANOS.column(name).cast(pa.int64()).to_pylist()

    kept = KeptColumns.of(source.kept_schema())
    records = [r for r in source.read() if isinstance(r, InputRecord)]
    results = [
        InferenceResult("job", r.record_id, i, "tiny", "1", (), "b", 1, r.attributes) for i, r in enumerate(records)
    ]
    out = io.StringIO()
    write_items(results, results[0], None, out, kept=kept)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [{k: line[k] for k in keep} for line in lines] == [
        {
            "at": "2023-11-14T22:13:20.123456789",
            "at_ny": "2023-11-14T17:13:20.123456789-05:00",
            "clock": "01:02:03.123456789",
            "took": "1.123456789",
        },
        {"at": None, "at_ny": "1969-12-31T19:00:00.000000005-05:00", "clock": None, "took": "-0.000000001"},
        {"at": "1969-12-31T23:59:59.999999999", "at_ny": None, "clock": "00:00:00.000000001", "took": None},
    ]


@pytest.mark.parametrize(
    ("header", "columns", "message"),
    [
        ("text,text,id", Columns(), 'columns 1 and 2 are all named "text" (--text-column)'),
        ("a,a,text", Columns(keep=("a",)), 'columns 1 and 2 are all named "a" (--keep-columns)'),
        ("text,id,id,id", Columns(id="id"), 'columns 2, 3 and 4 are all named "id" (--id-column)'),
    ],
)
def test_a_column_named_twice_is_refused_naming_the_name_and_its_places(
    tmp_path: Path, header: str, columns: Columns, message: str
) -> None:
    path = tmp_path / "in.csv"
    path.write_text(f"{header}\n" + ",".join(["x"] * header.count(",")) + ",1\n", encoding="utf-8")
    source = JobInput.open(str(path), columns=columns)
    assert errors(source) == [f"{path}: {message}: give each column its own name"]
    with pytest.raises(UnusableInputError, match="nothing was submitted"):
        check_input(source, source.validate_keeping(0)[:2], skip_invalid=True)
    assert source.kept_schema() is None  # read no further than the refusal: it once raised KeyError


def test_a_column_named_twice_that_no_option_names_is_left_alone(tmp_path: Path) -> None:
    (tmp_path / "in.csv").write_text("text,b,b\none,1,2\n", encoding="utf-8")
    assert [r.text for r in items(JobInput.open(str(tmp_path / "in.csv"))) if isinstance(r, InputRecord)] == ["one"]


def test_keeping_x_and_input_x_is_refused_naming_both(tmp_path: Path) -> None:
    pq.write_table(pa.table({"text": ["a"], "embedding": [1], "input.embedding": [2]}), tmp_path / "in.parquet")
    with pytest.raises(UnusableInputError) as refused:
        JobInput.open(str(tmp_path / "in.parquet"), columns=Columns(keep=("embedding", "input.embedding")))
    assert str(refused.value).startswith(
        '--keep-columns: "embedding" and "input.embedding" would both come back as "input.embedding" '
        'when the model has an output "embedding"'
    )
    alone = JobInput.open(str(tmp_path / "in.parquet"), columns=Columns(keep=("input.embedding",)))
    assert errors(alone) == []


def test_the_kept_columns_of_a_job_registered_with_both_x_and_input_x_still_come_back_apart() -> None:
    """A job submitted before the refusal: both columns come back, each under its own name."""
    schema = pa.schema([("embedding", pa.int64()), ("input.embedding", pa.int64())])
    kept = KeptColumns(schema)
    result = InferenceResult(
        "job", "1", 0, "tiny", "1", (Tensor.from_array("embedding", np.ones(2, np.float32)),), "b", 1,
        {"embedding": "1", "input.embedding": "2"},
    )  # fmt: skip
    out = io.BytesIO()
    write_columnar([result], result, out, OutputFormat.PARQUET, kept)
    table = pq.read_table(io.BytesIO(out.getvalue()))
    assert table.column_names.count("input.embedding") == 1
    assert table.column("input.embedding").to_pylist() == [1]
    assert table.column("input.input.embedding").to_pylist() == [2]
    lines = io.StringIO()
    write_items([result], result, None, lines, kept=kept)
    line = json.loads(lines.getvalue())
    assert (line["input.embedding"], line["input.input.embedding"]) == (1, 2)


def test_a_kept_time_python_cannot_hold_is_a_problem_of_its_row(tmp_path: Path) -> None:
    far = pa.array([300_000_000_000_000_000, 0], pa.timestamp("us"))  # year 11476, then 1970
    pq.write_table(pa.table({"text": ["a", "b"], "far": far}), tmp_path / "in.parquet")
    source = JobInput.open(str(tmp_path / "in.parquet"), columns=Columns(keep=("far",)))
    assert errors(source) == [
        f'{tmp_path}/in.parquet:row 1: column "far" holds a timestamp[us] value Python cannot hold '
        "(date value out of range)"
    ]
    assert [r.attributes for r in items(source) if isinstance(r, InputRecord)] == [{"far": '"1970-01-01T00:00:00"'}]


@pytest.mark.parametrize("bad_line", [3, 200_002])
@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_a_byte_that_is_not_utf8_is_named_by_its_own_line_in_the_file(
    tmp_path: Path, bad_line: int, newline: str
) -> None:
    """A Latin-1 byte on line 3 said "cannot read the header row", and on line 200,002 of a file
    the message named line 199,852: the text file decoded a block ahead of the rows read (#40, 13)."""
    path = tmp_path / "in.csv"
    lines = [b"text,n"] + [f'"row {i}, quoted",{i}'.encode() for i in range(2, bad_line)]
    lines += ["caf\u00e9,1".encode("latin-1"), b"after,2"]
    path.write_bytes(b"\xef\xbb\xbf" + newline.encode().join(lines) + newline.encode())  # a BOM: still UTF-8
    source = JobInput.open(str(path))
    assert source.kept_schema() is None or True  # the header reads: the bad byte is not in it
    found = list(source.read())
    texts = [r.text for r in found if isinstance(r, InputRecord)]
    assert len(texts) == bad_line - 2 and texts[-1] == f"row {bad_line - 1}, quoted"  # every row before it
    assert [str(e) for e in found if isinstance(e, InputError)] == [
        f"{path}: unreadable from line {bad_line} on: byte 0xe9 at byte 4 of line {bad_line} is not UTF-8 "
        "(invalid continuation byte)"
    ]


def test_a_header_that_is_not_utf8_is_named_as_the_header(tmp_path: Path) -> None:
    (tmp_path / "in.csv").write_bytes("t\u00e9xt,n\none,1\n".encode("latin-1"))
    (error,) = errors(JobInput.open(str(tmp_path / "in.csv")))
    assert "cannot read the header row: byte 0xe9 at byte 2 of line 1 is not UTF-8" in error, error
