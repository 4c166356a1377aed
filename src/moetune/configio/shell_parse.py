"""A bash script's statements as a small tree: simple commands (their assignments, arrays and words), `&&`/`||`
chains, `if` branches, `case` arms, and loops and functions, each kept whole (to tell whether one holds the training
command) and as a tree of its own (what configio/shell_loops.py runs)."""

from __future__ import annotations

from dataclasses import dataclass

from moetune.configio.shell_tree import DECLARE, Case, Chain, If, Simple, Unread
from moetune.configio.shell_words import ASSIGN, Token, in_child_shells
from moetune.errors import MoetuneError

_SEPARATORS = ("\n", ";", "&", "|", ";;")
_REDIRECTS = (">", ">>", "<", ">&", "<&", "&>", "<<", "<<-", "<<<")  # `<<<`: a here-string, one word
_LOOPS = ("for", "while", "until", "select")


@dataclass(slots=True)
class _Kw:
    kw: str
    line: int
    name: str = ""  # a function's


def parse(tokens: list[Token], origin: str) -> list:
    units = _units(in_child_shells(tokens), origin)
    nodes, i = _block(units, 0, set(), origin)
    if i < len(units):
        raise MoetuneError(f"{origin} line {units[i].line}: '{units[i].kw}' without its opening keyword")
    return nodes


def _units(tokens: list[Token], origin: str) -> list:
    """Chains, keywords and `case` statements, in order (a keyword opens its statement: `then A=1` is `then`, then
    `A=1`)."""
    out, i = [], 0
    while i < len(tokens):
        if tokens[i].text == "case" and not tokens[i].op:
            node, i = _case(tokens, i, origin)
            out.append(node)
            continue
        parts, i = _chain(tokens, i)
        if parts:
            _split_keywords(parts, out)
    return out


_KEYWORDS = ("then", "do", "else", "{", "}", "fi", "done", "esac", "if", "elif", *_LOOPS, "case")


def _keyword(word: str) -> str | None:
    if word in _KEYWORDS:
        return word
    return "function" if word == "function" or word.endswith("()") else None


def _split_keywords(parts: list, out: list) -> None:
    s = parts[0][1]
    while s.words and (kw := _keyword(s.words[0])):
        named = s.words[1] if s.words[0] == "function" and len(s.words) > 1 else s.words[0].removesuffix("()")
        out.append(_Kw(kw, s.line, named if kw == "function" else ""))
        # `function name {`: the name goes with the keyword
        s.words = s.words[2:] if s.words[0] == "function" else s.words[1:]
    if not (s.words or s.assigns):
        parts = parts[1:]
        if parts:
            parts[0] = (None, parts[0][1])
    # `cmd || { ...; }`: the chain up to the group is its condition
    group = next((k for k, (_, p) in enumerate(parts) if k and p.words[:1] == ["{"] and not p.assigns), None)
    if group is None:
        if parts:
            out.append(Chain(parts))
        return
    out += [Chain(parts[:group]), _Kw("{" + parts[group][0], parts[group][1].line)]
    rest = parts[group][1]
    rest.words = rest.words[1:]
    if rest.words or rest.assigns or parts[group + 1:]:
        _split_keywords([(None, rest), *parts[group + 1:]], out)


def _chain(tokens: list[Token], i: int) -> tuple[list, int]:
    parts, conn = [], None
    while i < len(tokens):
        s, i = _simple(tokens, i)
        if s.words or s.assigns:
            parts.append((conn, s))
        if i >= len(tokens):
            break
        tok = tokens[i]
        i += 1
        if tok.text in ("&&", "||"):
            conn = tok.text
        else:
            break
    return parts, i


def _simple(tokens: list[Token], i: int) -> tuple[Simple, int]:
    s = Simple(line=tokens[i].line)
    while i < len(tokens):
        tok = tokens[i]
        s.child |= tok.child
        if tok.op and tok.text in ("&&", "||", "<", ">") and _open_double_test(s.words):
            s.words.append(tok.text)  # inside [[ ]] these join or compare clauses
            i += 1
            continue
        if tok.op and tok.text in (*_SEPARATORS, "&&", "||"):
            return s, i
        i += 1
        if tok.op and tok.text in _REDIRECTS:
            i += 1  # and its target
        elif tok.op and tok.text == "(" and len(s.words) == 1 and not s.assigns:
            s.words[-1] += "()"  # `name() {`: a function definition
            i += 1 if i < len(tokens) and tokens[i].text == ")" else 0
        elif tok.op:
            continue  # a subshell's parentheses: its commands are read as the script's
        elif (m := ASSIGN.match(tok.text)) and _assigns_here(s.words):
            if m.group(3) == "" and i < len(tokens) and tokens[i].text == "(":
                words, i = _array(tokens, i + 1)
                s.assigns.append((m.group(1), m.group(2) == "+", words))
            else:
                s.assigns.append((m.group(1), m.group(2) == "+", m.group(3)))
        else:
            s.words.append(tok.text)
    return s, i


def _assigns_here(words: list[str]) -> bool:
    """Whether a NAME=word after `words` is an assignment: first in its command (`then A=1`), or after `export`,
    `local` ... (`then export A=1`), the keywords that open the command passed over."""
    head = next((w for w in words if w not in _KEYWORDS), None)
    return head is None or head in DECLARE


def _open_double_test(words: list[str]) -> bool:
    """Whether `words` (after `if`, `elif`, `!`) open a `[[` whose `]]` is still to come."""
    head = next((w for w in words if w not in _KEYWORDS and w != "!"), None)
    return head == "[[" and "]]" not in words


def _array(tokens: list[Token], i: int) -> tuple[list[str], int]:
    """The words of `NAME=( ... )` up to its `)` (newlines inside are blanks)."""
    words = []
    while i < len(tokens) and tokens[i].text != ")":
        if not tokens[i].op:
            words.append(tokens[i].text)
        i += 1
    return words, i + 1


def _block(units: list, i: int, stop: set[str], origin: str) -> tuple[list, int]:
    nodes = []
    while i < len(units):
        u = units[i]
        if isinstance(u, (Chain, Case)):
            nodes.append(u)
            i += 1
        elif u.kw in stop:
            return nodes, i
        elif u.kw == "if":
            node, i = _if(units, i, origin)
            nodes.append(node)
        elif u.kw in (*_LOOPS, "case", "function"):
            node, i = _unread(units, i, origin)
            nodes.append(node)
        elif u.kw == "{":
            body, i = _block(units, i + 1, {"}"}, origin)
            nodes += body
            i += 1
        elif u.kw in ("{&&", "{||") and nodes and isinstance(nodes[-1], Chain):
            body, i = _block(units, i + 1, {"}"}, origin)
            nodes[-1] = If(line=u.line, branches=[([nodes[-1]], body)], unless=u.kw == "{||")
            i += 1
        else:
            return nodes, i
    return nodes, i


def _if(units: list, i: int, origin: str) -> tuple[If, int]:
    node, kw = If(line=units[i].line, branches=[]), "if"
    while kw in ("if", "elif", "else"):
        cond = []
        i += 1
        if kw != "else":
            while i < len(units) and isinstance(units[i], Chain):
                cond.append(units[i])
                i += 1
            _expect(units, i, "then", origin, node.line)
            i += 1
        body, i = _block(units, i, {"elif", "else", "fi"}, origin)
        node.branches.append((cond, body))
        node.has_else |= kw == "else"
        _expect(units, i, ("elif", "else", "fi"), origin, node.line)
        kw = units[i].kw
    return node, i + 1


def _unread(units: list, i: int, origin: str) -> tuple[Unread, int]:
    """Skip a loop (to its `done`), a `case` (to its `esac`) or a function (to its closing `}`), nested alike."""
    kind, line, depth, words, statements = units[i].kw, units[i].line, 0, [], []
    opens, closes = {"case": (("case",), "esac"), "function": (("{",), "}")}.get(kind, (_LOOPS, "done"))
    for j in range(i, len(units)):
        u = units[j]
        if isinstance(u, (Chain, Case)):
            words += u.words if isinstance(u, Case) else [w for _, s in u.parts for w in s.words]
            statements.append(u)
            continue
        depth += (u.kw in opens) - (u.kw == closes)
        if depth == 0 and u.kw == closes:
            return Unread(kind, line, words, units[i].name, statements, *_tree(units, i, j, origin)), j + 1
    raise MoetuneError(f"{origin} line {line}: '{kind}' is never closed ('{closes}')")


def _tree(units: list, i: int, end: int, origin: str) -> tuple[list, list | None]:
    """(head, body) of the loop or function at units[i] closing at units[end]: the chains before `do` and the tree
    between `do` and `done`, or between a function's braces; body None where that tree does not end at `end`."""
    k, head, kind = i + 1, [], units[i].kw
    while kind in _LOOPS and k < end and isinstance(units[k], Chain):
        head.append(units[k])
        k += 1
    opener, closer = ("{", "}") if kind == "function" else ("do", "done")
    if kind == "case" or not isinstance(units[k], _Kw) or units[k].kw != opener:
        return head, None
    body, stop = _block(units, k + 1, {closer}, origin)
    return head, body if stop == end else None


def _expect(units: list, i: int, kws, origin: str, line: int) -> None:
    if i >= len(units) or isinstance(units[i], Chain) or units[i].kw not in kws:
        want = kws if isinstance(kws, str) else "' or '".join(kws)
        raise MoetuneError(f"{origin} line {line}: this 'if' lacks its '{want}'")


_HEADS = ("\n", ";", ";;", "&&", "||", "|", "&")  # operators after which a word starts a statement


def _case(tokens: list[Token], i: int, origin: str) -> tuple[Case, int]:
    """A `case` read from its tokens (its `)` and `;;` are operators no simple command holds), to its `esac`."""
    line, subject, i = tokens[i].line, tokens[i + 1].text if i + 1 < len(tokens) else "", i + 2
    if i >= len(tokens) or tokens[i].text != "in":
        raise MoetuneError(f"{origin} line {line}: this 'case' lacks its 'in'")
    node, i = Case(line, subject, [], []), i + 1
    while True:
        while i < len(tokens) and tokens[i].op and tokens[i].text in _HEADS:
            i += 1
        if i >= len(tokens):
            raise MoetuneError(f"{origin} line {line}: 'case' is never closed ('esac')")
        if tokens[i].text == "esac":
            return node, i + 1
        i += tokens[i].text == "("  # `(pattern)` is allowed too
        patterns = []
        while i < len(tokens) and tokens[i].text != ")":
            patterns += [] if tokens[i].op else [tokens[i].text]  # `a|b)`: the `|` joins patterns
            i += 1
        start, depth, i = i + 1, 0, i + 1
        while i < len(tokens):  # the arm's body: to its `;;` or the `esac`, past a nested case's own
            tok, head = tokens[i], i == start or tokens[i - 1].op and tokens[i - 1].text in _HEADS
            if tok.op and tok.text == ";;" and not depth or head and tok.text == "esac" and not depth:
                break
            depth += head and not tok.op and (tok.text == "case") - (tok.text == "esac")
            i += 1
        node.words += [t.text for t in tokens[start:i] if not t.op]
        node.arms.append((patterns, parse(tokens[start:i], origin)))
