"""The byte and JSON layer of trace reading: open a (gzipped) trace through a screen that refuses what the streaming
parser cannot take safely, read Kineto's header, and stream ``traceEvents`` one event at a time (``ijson``, yajl2 C
backend; ``json.load`` without it); and find the trace files a user names (files, or the traces in a directory).
profile/event_sink.py keeps what each event means."""

import gzip
import json
import re
import zlib
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from moetune.errors import MoetuneError
from moetune.files import json_error, not_json

try:  # optional: the C-backed streaming parser
    import ijson
except ImportError:  # pragma: no cover - exercised only where ijson is missing
    ijson = None

# What a malformed document raises: json.JSONDecodeError and UnicodeDecodeError are ValueErrors;
# ijson raises its own JSONError; odd shapes (a string where a number belongs) raise TypeError.
BAD_JSON = (ValueError, TypeError, KeyError, AttributeError) + ((ijson.JSONError,) if ijson else ())

_HEADER_KEYS = ("deviceProperties", "distributedInfo", "baseTimeNanoseconds")
# Kineto writes baseTimeNanoseconds after traceEvents (its ts then count from that epoch time); the events pass keeps
# the file's last bytes (_Screened.tail), where it is read from
_BASE_NS = re.compile(rb'"baseTimeNanoseconds"\s*:\s*"?(\d{1,20}(?:\.\d*)?(?:[eE]\+?\d{1,2})?)"?\s*[,}]')
def _open(path: Path) -> "_Screened":
    return _Screened(gzip.open(path, "rb") if _gzipped(path) else open(path, "rb"), path)


def _gzipped(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(2) == b"\x1f\x8b"


def a_log(path: Path) -> str:
    """What to add where a file read as a trace holds Megatron's iteration lines: a training log, which --log reads."""
    try:
        with _open(path) as fh:
            head = fh.read(1 << 20)
    except (OSError, EOFError, zlib.error):
        return ""
    return "it holds Megatron iteration lines: a training log? pass it as --log FILE" \
        if b"elapsed time per iteration" in head else ""


def misnamed_gzip(path: Path) -> str:
    """What to add where a trace named .gz holds no gzip stream (read as plain text, it is then not JSON either): a
    download saved over by an error page, or a copy cut at its start."""
    return "it is not gzip-compressed though named .gz (a copy saved over, or cut at its start?)" \
        if path.name.endswith(".gz") and not _gzipped(path) else ""


# What the streaming parser cannot take: yajl's C backend crashes the process on an integer of thousands of digits,
# and ijson's prefix strings make a deeply nested value cost quadratic time. No profiler writes either.
# (bytes.translate and find run at memory speed where a regex would take a second on a 25 MB trace)
_DIGITS = bytes.maketrans(b"123456789", b"000000000")
_OPENERS = bytes.maketrans(b"{}", b"[]")
_NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))
_LONG_NUMBER, _DEEP = b"0" * 512, b"[" * 128
_OVERLAP = 16 << 10


class _Screened:
    """A trace file read through the screen: each chunk is checked, with the tail of the one before it (so a run across
    a boundary is seen whole), before the parser gets it; one pass over the file does both."""

    def __init__(self, fh, path: Path) -> None:
        self.fh, self.path, self.tail = fh, path, b""

    def read(self, size: int = -1) -> bytes:
        chunk = self.fh.read(size)
        if chunk:
            self.tail = _screen(self.path, self.tail + chunk)
        return chunk

    def __enter__(self) -> "_Screened":
        return self

    def __exit__(self, *exc) -> None:
        self.fh.close()


def _screen(path: Path, window: bytes) -> bytes:
    """Refuse a number too long or values nested too deep to parse safely: 512 digits in a row, or 128 opening brackets
    with no closing one between (the window's brackets alone, in order); the window's tail carries over."""
    if _LONG_NUMBER in window.translate(_DIGITS):
        raise fail(path, "holds a number of 512 digits or more; no profiler writes one: re-export the trace")
    if _DEEP in window.translate(_OPENERS, _NOT_BRACKETS):
        raise fail(path, "nests values 128 levels deep or more; a Kineto trace is an object of flat events: "
                          "re-export it from torch.profiler")
    return window[-_OVERLAP:]


def first_char(path: Path) -> str:
    with _open(path) as fh:
        head = fh.read(4096).lstrip()
    return head[:1].decode("ascii", "replace")


# The header key under which a traceEvents that is not a list is noted: what it holds instead, in words
EVENTS_NOT_A_LIST = "_traceEvents_not_a_list"
# Those words, by what each parser calls the value: ijson's event names, the fallback json.load's Python types
_KIND_WORDS = {"number": "a number", "int": "a number", "float": "a number", "string": "a string", "str": "a string",
               "start_map": "an object", "dict": "an object", "boolean": "true/false", "bool": "true/false"}


def _not_a_list(kind: str) -> dict:
    return {EVENTS_NOT_A_LIST: _KIND_WORDS.get(kind, kind)}


def _read_header(path: Path) -> tuple[dict, bool]:
    """Top-level keys before ``traceEvents`` (ijson.parse is slow per token; the header is small), and whether the
    file has a top-level traceEvents (the scan reads on to the root's end where it has none)."""
    header: dict = {}
    key, builder, at_events = None, None, False
    with _open(path) as fh:
        for prefix, event, value in ijson.parse(fh):
            if at_events:  # the event after the traceEvents key: a list opens, else say what is there instead
                if event != "start_array":
                    header |= _not_a_list(event)
                return header, True
            if prefix == "" and event in ("map_key", "end_map"):
                if builder is not None:
                    header[key] = builder.value
                key, builder = value, None
                at_events = value == "traceEvents"
                if value in _HEADER_KEYS:
                    builder = ijson.ObjectBuilder()
            elif builder is not None:
                builder.event(event, value)
    return header, False


def stream(path: Path, sink) -> dict:
    """Every event to sink.add; returns the header (the top-level keys but traceEvents)."""
    if ijson is None:
        with _open(path) as fh:
            doc = json.load(fh, parse_float=Decimal)
        events = doc if isinstance(doc, list) else doc.get("traceEvents") or []
        if not isinstance(events, list):
            return _not_a_list(type(events).__name__)
        for e in events:
            sink.add(e)
        return doc if isinstance(doc, dict) else {}
    if first_char(path) == "[":  # a bare Chrome trace-event array
        with _open(path) as fh:
            for e in ijson.items(fh, "item"):
                sink.add(e)
        return {}
    header = _read_header(path)[0]
    with _open(path) as fh:
        for e in ijson.items(fh, "traceEvents.item"):
            sink.add(e)
        tail = fh.tail
    if "baseTimeNanoseconds" not in header and (base := _top_level_base(tail)) is not None:
        header["baseTimeNanoseconds"] = base
    return header


def _top_level_base(tail: bytes) -> int | None:
    """The trace's own baseTimeNanoseconds among the file's last bytes: the key whose remaining text closes one more
    brace than it opens (the root object's), not one inside an event's args or a trailing object."""
    for m in _BASE_NS.finditer(tail):
        rest = tail[m.end(0) - 1:]
        if rest.count(b"}") - rest.count(b"{") == 1:
            return int(float(m.group(1)))
    return None


def json_problem(path: Path, err: Exception) -> str:
    """What is wrong with a trace that does not parse, worded as every reader of a JSON file words it (files.not_json):
    the parser's own line (yajl under ijson gives no line and column, and says "premature EOF" for a cut file; ijson
    raises IncompleteJSONError for every error), whether the file ends there, what to do; or the malformed event."""
    decode = isinstance(err, (json.JSONDecodeError, UnicodeDecodeError)) or (ijson and isinstance(err, ijson.JSONError))
    if not decode:
        return f"trace {path}: has a malformed event (ts/dur/args of an unexpected type)"
    hint = "; ".join(filter(None, (misnamed_gzip(path), a_log(path)))) or "export it again from torch.profiler"
    if isinstance(err, json.JSONDecodeError):
        return json_error(f"trace {path}", err, hint)
    return not_json(f"trace {path}", json_detail(err), "premature EOF" in str(err), hint)


def json_detail(err: Exception) -> str:
    """The parser's own first line, as text: yajl (under ijson) hands its message as bytes with the offending bytes
    of the file after a newline, which a binary file fills with unprintable ones."""
    text = err.args[0] if err.args else str(err)
    text = text.decode(errors="replace") if isinstance(text, bytes) else str(text)
    line = text.splitlines()[0] if text.strip() else type(err).__name__
    return "".join(c if c.isprintable() else "?" for c in line)[:120]


def fail(path: Path, why: str) -> MoetuneError:
    return MoetuneError(f"trace {path}: {why}")


def lacks_trace_events(path: Path) -> bool:
    """Whether a file is a JSON object with no top-level traceEvents: other JSON kept beside the traces (a saved plan, a
    config). Anything else, a bare event list or a file that does not parse, is left for the reader to judge."""
    try:
        if first_char(path) != "{":
            return False
        if ijson is None:
            with _open(path) as fh:
                return "traceEvents" not in json.load(fh)
        return not _read_header(path)[1]  # the scan read_trace makes of a trace's header
    except (MoetuneError, EOFError, OSError, *BAD_JSON):
        return False


@dataclass(kw_only=True, slots=True)
class TracePaths:
    """The trace files to read, and the JSON files in a named directory passed over as not traces (lacks_trace_events);
    a file named by itself is always read, and the reader names what is wrong with it."""
    paths: list[Path]
    skipped: list[Path]

    def note(self) -> list[str]:
        names = ", ".join(str(p) for p in self.skipped)
        return [f"skipped {len(self.skipped)} JSON file(s) with no traceEvents, not Kineto traces: {names}"] \
            if self.skipped else []


def recorded_world_size(inputs: list[str | Path]) -> int | None:
    """The world size the first trace's distributedInfo records (its header alone is read), or None: what `diagnose
    --model` takes for the GPUs where --gpus and the config leave them out."""
    paths = expand_paths(inputs).paths if inputs else []
    if not paths or ijson is None:  # without the streaming parser the header is not read apart: --gpus says it
        return None
    try:
        world = (_read_header(paths[0])[0].get("distributedInfo") or {}).get("world_size")
    except (*BAD_JSON, OSError, EOFError):  # a broken trace: the trace reader says so, in its own line
        return None
    return int(world) if isinstance(world, int | Decimal) and world > 0 else None


def expand_paths(inputs: list[str | Path]) -> TracePaths:
    """Files as given, and every *.json / *.json.gz directly inside each directory that is a trace, sorted; a file
    named twice (by two spellings, or a file and its directory) is one error line, not two ranks."""
    found = TracePaths(paths=[], skipped=[])
    for item in inputs:
        _add(Path(item), found)
    seen: dict[Path, Path] = {}
    for p in found.paths:
        if (real := p.resolve()) in seen:
            raise MoetuneError(f"trace {p} is given twice (also as {seen[real]}); pass each rank's trace once")
        seen[real] = p
    return found


def _add(p: Path, found: TracePaths) -> None:
    if not p.is_dir():
        if not p.exists():
            raise MoetuneError(f"trace {p}: no such file or directory")
        found.paths.append(p)
        return
    files = sorted(f for f in p.iterdir() if f.is_file() and f.name.endswith((".json", ".json.gz")))
    if not files:
        raise MoetuneError(f"trace directory {p} holds no .json or .json.gz files")
    others = [f for f in files if lacks_trace_events(f)]
    if len(others) == len(files):
        names = ", ".join(f.name for f in files)
        raise MoetuneError(f"trace directory {p} holds no Kineto traces: its JSON files ({names}) have no traceEvents; "
                           "pass the directory torch.profiler wrote its traces to")
    found.paths.extend(f for f in files if f not in others)
    found.skipped.extend(others)
