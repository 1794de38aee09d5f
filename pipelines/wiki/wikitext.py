"""One page's raw wikitext into clean prose paragraphs, as BERT did for Wikipedia (docs/corpus.md):
``_prepass`` cuts out what the walker over mwparserfromhell's tree would drop, in linear scans, so
that the costly tree is small."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from dataclasses import dataclass

from mwparserfromhell.nodes import ExternalLink, Heading, HTMLEntity, Tag, Template, Text, Wikilink
from mwparserfromhell.parser import Builder, CTokenizer, tokens
from mwparserfromhell.parser.tokenizer import Tokenizer
from mwparserfromhell.wikicode import Wikicode

from pipelines.text import normalize_text

MAX_DEPTH = 40
"""Nesting depth (links in templates in tags ...) beyond which content is dropped, not walked."""

MIN_PARAGRAPH_CHARS = 8
"""Shorter paragraphs are debris (a lone "(, )" left by dropped templates), not prose."""

_DROP_LINE = "\x00"  # Emitted for list markers and headings: the line holding it is not prose.
_QUOTE = "\ue000"  # One apostrophe of a bold/italic run, resolved per line like MediaWiki does.
_GAP = "\ue001"  # Left by the pre-pass where it cut something out; the walker deletes it.
_NOT_PLAIN_RE = re.compile("''|__|\n|" + _GAP)  # Text the walker changes: links with it are built.
_QUOTE_RUN_RE = re.compile(r"'{2,}")
_QUOTE_MARK_RE = re.compile(_QUOTE + "+")
_MAGIC_WORD_RE = re.compile(r"__[A-Za-z]{3,24}__")
# A pseudo-heading: a bold run, text without quotes, a bold run, then only non-word characters.
# Written so that no run of quotes can be split in more than one way (the obvious
# Q{3,}[^Q]*Q{3,}\W* backtracks in cubic time on a long run of apostrophes: minutes per page).
_BOLD_LINE_RE = re.compile(f"{_QUOTE}{{3,}}[^{_QUOTE}]+{_QUOTE}{{3}}\\W*|{_QUOTE}{{6}}\\W*")
# Debris of dropped templates: "X (; born 1947)" → "X (born 1947)", "Y (, )" and "[]" → "", "a ." → "a.".
_DEBRIS_RES = [(re.compile(r"\((?:\s*[,;:]|\s)+"), "("), (re.compile(r"[\s,;:]+\)"), ")")]
_DEBRIS_RES += [(re.compile(r"\s*(?:\(\s*\)|\[\s*\])"), ""), (re.compile(r"\s+([.,])(?=\s|$)"), r"\1")]
_DEBRIS_RES.append((re.compile(r"</[A-Za-z][A-Za-z0-9]*\s*>"), ""))  # Closing tags that opened nothing.
_INTERLANGUAGE_RE = re.compile(r"[a-z]{2,3}(?:-[a-z]{1,8})*|simple")
_MARKUP_LINE_STARTS = ("|", "!", "{|", "|}", "{{", "}}", "=", "*", "#", ":", ";")
_LEFTOVER_MARKUP = ("{{", "}}", "[[", "]]", "{|", "|}", "<ref", "<!--", "&nbsp;", "thumb|")
_LEFTOVER_MARKUP += ("Category:", "File:", "Image:", "__TOC__")

# Links into these namespaces (also as named in a few other languages) are not text.
_HIDDEN_NAMESPACES = frozenset(
    "file image media category datei bild kategorie kategori fichier catégorie archivo imagen categoría"
    " immagine categoria ficheiro arquivo imagem bestand afbeelding categorie plik grafika kategoria fil"
    " lêer файл изображение картинка категория".split()
)
# Prefixes not shown in a link's text: [[:Category:X]] → X, [[wikt:word]] → word.
_SHOWN_PREFIXES = frozenset(
    "file image media category wikt wiktionary w wikipedia s wikisource b wikibooks q wikiquote n"
    " wikinews v wikiversity voy species c commons d wikidata m meta mw".split()
)
# Tags whose content is dropped (or raw) and that do not nest: the pre-pass cuts them out.
_CUT_TAGS = frozenset(
    "ref references math syntaxhighlight source pre code timeline imagemap score hiero chem ce gallery"
    " templatedata templatestyles mapframe maplink graph inputbox categorytree indicator section charinsert".split()
)
_DROPPED_TAGS = _CUT_TAGS | frozenset("table tr td th caption ul ol dl includeonly style script".split())
_LINE_TAGS = frozenset({"li", "dt", "dd"})  # List items: drop the line they are on.
_BLOCK_TAGS = frozenset({"p", "div", "blockquote", "center", "poem", "hr"})

_DISAMBIGUATION_TEMPLATES = frozenset(
    {"disambiguation", "disambig", "dab", "disamb", "hndis", "geodis", "numberdis", "mil-unit-dis"}
    | {"roaddis", "callsigndis", "shipindex dab", "mathdab", "dab cleanup", "disambig-cleanup", "dab-cleanup"}
)
_MONTHS = "January February March April May June July August September October November December".split()


@dataclass(frozen=True)
class CleanedPage:
    """The prose of one page and what the cleaner saw on the way."""

    paragraphs: list[str]
    is_disambiguation: bool
    num_templates_rendered: int
    num_templates_dropped: int


def _normalise_name(name: str) -> str:
    """Template names compare case-insensitively, with ``_`` and runs of spaces as one space."""
    name = " ".join(name.replace("_", " ").replace(_GAP, "").split()).lower()
    return name[9:].lstrip() if name.startswith("template:") else name


class _Args:
    """The arguments of one template call, rendered on demand (positional ones 1-based)."""

    def __init__(self, walker: _Walker, template: Template, depth: int, first: str | None) -> None:
        self._walker, self._depth = walker, depth
        shift = 0 if first is None else 1  # {{formatnum:1234|R}}: "1234" is argument 1.
        self._values: dict[str, Wikicode | str] = {} if first is None else {"1": first.strip()}
        for param in template.params:
            key = str(param.name).replace(_GAP, "").strip()
            self._values[key if param.showkey else str(int(key) + shift)] = param.value

    def __getitem__(self, key: int | str) -> str:
        value = self._values.get(str(key), "")
        return value if isinstance(value, str) else self._walker.render(value, self._depth + 1).strip()

    def positionals(self) -> list[str]:
        count = next(i for i in range(1, len(self._values) + 2) if str(i) not in self._values)
        return [self[i] for i in range(1, count)]


Renderer = Callable[[_Args], str]
_RANGES = {"-": "–", "–": "–", "to": " to ", "and": " and ", "or": " or ", "x": " × ", "by": " by "}
_RANGES |= {"+/-": " ± ", "±": " ± ", "to(-)": " to ", "and(-)": " and ", "&": " & ", ",": ", "}
_UNITS = {"km2": "km²", "m2": "m²", "sqmi": "sq mi", "ft2": "sq ft", "sqft": "sq ft", "m3": "m³"}
_UNITS |= {"km3": "km³", "C": "°C", "F": "°F", "cuft": "cu ft", "acre": "acres"}
_NUMBER_RE = re.compile(r"[-+−]?[\d,]*\.?\d+")


def _convert(a: _Args) -> str:
    """``{{convert|5|-|7|km|mi}}`` → "5–7 km", ``{{convert|5|ft|6|in}}`` → "5 ft 6 in"."""
    pos = a.positionals()
    if not pos:
        return ""
    out, i = _with_commas(pos[0]), 1
    while i + 1 < len(pos) and pos[i] in _RANGES:
        out, i = out + _RANGES[pos[i]] + _with_commas(pos[i + 1]), i + 2
    if i < len(pos):
        out += " " + _UNITS.get(pos[i], pos[i])
        if i + 2 < len(pos) and _NUMBER_RE.fullmatch(pos[i + 1]) and not _NUMBER_RE.fullmatch(pos[i + 2]):
            out += f" {pos[i + 1]} {_UNITS.get(pos[i + 2], pos[i + 2])}"
    return out


def _format_date(year: str, month: str, day: str, day_first: bool) -> str:
    if month.isdigit() and 1 <= int(month) <= 12:
        month = _MONTHS[int(month) - 1]
    day = day.lstrip("0")
    if not month:
        return year
    if not day:
        return f"{month} {year}"
    return f"{day} {month} {year}" if day_first else f"{month} {day}, {year}"


def _date(a: _Args) -> str:
    """``{{birth date|1900|1|2}}`` → "January 2, 1900" (``df=y``: "2 January 1900")."""
    return _format_date(a[1], a[2], a[3], a["df"].lower() in ("y", "yes"))


def _as_of(a: _Args) -> str:
    """``{{as of|2010|5|3}}`` → "As of 3 May 2010" (``df=US``: "May 3, 2010"; ``lc=y``: "as of")."""
    if a["alt"]:
        return a["alt"]
    lead = "as of" if a["lc"].lower() in ("y", "yes", "on", "true") else "As of"
    return f"{lead} {_format_date(a[1], a[2], a[3], a['df'].lower() != 'us')}"


def _frac(a: _Args) -> str:
    """``{{frac|3|1|2}}`` → "3 1/2", ``{{frac|1|2}}`` → "1/2", ``{{frac|4}}`` → "1/4"."""
    pos = a.positionals()
    if len(pos) >= 3:
        return f"{pos[0]} {pos[1]}/{pos[2]}"
    return "/".join(pos) if len(pos) == 2 else f"1/{pos[0]}" if pos else ""


def _with_commas(number: str) -> str:
    """``1234567.5`` → "1,234,567.5" as ``{{formatnum}}`` and ``{{convert}}`` show it; else as is."""
    if not re.fullmatch(r"-?\d+(\.\d+)?", number):
        return number
    whole, dot, fraction = number.partition(".")
    return f"{int(whole):,}{dot}{fraction}"


def _text(value: str) -> Renderer:
    return lambda a: value


def _arg(n: int) -> Renderer:
    return lambda a: a[n]


def _block(a: _Args) -> str:
    return f"\n\n{a['text'] or a['quote'] or a[1]}\n\n"


# Template names ("|" between aliases; normalised, see ``_normalise_name``) → renderer. None and
# names not here are dropped (infoboxes, citations, navboxes, hatnotes ...). Names ending in ":"
# are parser functions; "lang-xx" is rendered by "lang-*".
_TEMPLATES: dict[str, Renderer | None] = {
    # Numbers and units.
    "convert|cvt": _convert,
    "frac|sfrac": _frac,
    "formatnum:": lambda a: _with_commas(a[1]),
    "val": lambda a: a[1] + (f" {a['u']}" if a["u"] else ""),
    "us$|usd": lambda a: f"US${a[1]}",
    "gbp|£": lambda a: f"£{a[1]}",
    "€": lambda a: f"€{a[1]}",
    # Dates.
    "circa|c.": lambda a: "c. " + "–".join(a.positionals()[:2]),
    "as of": _as_of,
    "birth date|death date|birth date and age|death date and age|start date|end date": _date,
    # Wrappers whose first argument is the text.
    "nowrap|nobr|small|smaller|big|larger|em|strong|sc|smallcaps|sup|sub": _arg(1),
    "abbr|vanchor|visible anchor|nihongo2|lang-*": _arg(1),
    "angbr|grapheme|gpm": lambda a: f"⟨{a[1]}⟩",
    "lang|script": _arg(2),
    "transl": lambda a: (a.positionals() or [""])[-1],
    "nihongo": lambda a: a[1] or a[3] or a[2],
    "sic|not a typo|chem": lambda a: "".join(a.positionals()),
    "lc:": lambda a: a[1].lower(),
    "uc:": lambda a: a[1].upper(),
    "lcfirst:": lambda a: a[1][:1].lower() + a[1][1:],
    "ucfirst:": lambda a: a[1][:1].upper() + a[1][1:],
    # Quotations are prose of their own paragraph.
    "quote|blockquote|cquote|quotation": _block,
    # Punctuation helpers.
    "ndash|en dash|dash": _text("–"),
    "mdash|em dash|mdashb": _text("—"),
    "snd|spnd|sndash|spaced ndash|spaced en dash": _text(" – "),
    "spaced mdash|smdash": _text(" — "),
    "nbsp|thinsp|sp": _text(" "),
    "shy|zwsp|wbr": _text(""),
    "'": _text("'"),
    "'s": _text("'s"),
    '"': _text('"'),
    "' \"": _text("'\""),
    "\" '": _text("\"'"),
    # Dropped on purpose (listed to document the choice; unknown templates are dropped too).
    "math|mvar|ipa|respell|pronunciation|audio|efn|sfn|refn|reflist|rp|citation needed": None,
}
_RENDERERS = {name: renderer for names, renderer in _TEMPLATES.items() for name in names.split("|")}


def _renderer(name: str) -> tuple[Renderer | None, str | None]:
    """The renderer of a template by its name (None: dropped) and, for a parser function, the text
    after the colon (``{{formatnum:1234}}``: "1234")."""
    key = _normalise_name(name)
    first = None
    if ":" in key:  # A parser function: {{formatnum:1234}}, {{DEFAULTSORT:...}}.
        key = key.partition(":")[0] + ":"
        first = name.partition(":")[2]
    return _RENDERERS.get("lang-*" if key.startswith("lang-") else key), first


def _link_target(target: str) -> tuple[bool, str, str, str, bool]:
    """(hidden, shown, namespace, rest, language) of a link target: files, categories and
    interlanguage links are hidden (not text), ``[[:Category:X]]`` is shown."""
    inline = target.startswith(":")  # [[:Category:X]] links to the category instead.
    shown = target[1:].lstrip() if inline else target
    prefix, colon, rest = shown.partition(":")
    namespace = _normalise_name(prefix) if colon else ""
    language = bool(colon) and namespace not in _SHOWN_PREFIXES and bool(_INTERLANGUAGE_RE.fullmatch(prefix))
    return not inline and (namespace in _HIDDEN_NAMESPACES or language), shown, namespace, rest, language


def _link_text(target: str, text: str | None) -> str:
    """What a link shows: its rendered ``text`` (None: no "|"), else its target without namespace
    or interwiki prefix ("" for hidden links)."""
    hidden, shown, namespace, rest, language = _link_target(target)
    if hidden:
        return ""  # Files, categories and interlanguage links are not text.
    if text is not None:
        if text.strip():
            return text
        shown = re.sub(r"\s*\([^()]*\)$", "", shown)  # The pipe trick: [[Paris (band)|]] → Paris.
    if namespace in _SHOWN_PREFIXES or language:
        shown = rest.strip()
    return html.unescape(shown.replace("_", " ")).lstrip("#")


# --- The pre-pass: cut out what the walker would drop, before parsing (see the module docstring).

# Every alternative starts with a literal character, so that the search skips fast to the next one.
_CUT_RE = re.compile(
    r"<!--|\{\{*|\}\}*|\[\[[^|{}\[\]<\n:]*:|<("
    + "|".join(sorted(_CUT_TAGS | {"nowiki"}, key=len, reverse=True))
    + r")(?=[\s/>])",
    re.IGNORECASE,
)
_CLOSE_TAG_RES = {name: re.compile(rf"</{name}\s*>", re.IGNORECASE) for name in _CUT_TAGS | {"nowiki"}}
_NAME_RE = re.compile(r"[^|{}\[\]<>]*")  # A template name that is plain text.
_COMMENT_RE = re.compile(r"<!--.*?-->", re.DOTALL)
_BRACKET_RE = re.compile(r"[\[\]]")
_PLAIN = r"[^\n{}<>\[\]]*"
# A list line (after "\n") holding nothing that could go on over the next line: plain text and links
# (and no __DISAMBIG__, which ``is_disambiguation`` looks for).
_LIST_LINE_RE = re.compile(
    rf"\n[*#:;](?![^\n]*__DISAMBIG__){_PLAIN}(?:(?:\[\[{_PLAIN}\]\]|\[{_PLAIN}\]){_PLAIN})*(?=\n|$)"
)


def _at_line_start(text: str, i: int) -> bool:
    """Whether ``text[i]`` starts a line, after at most one space (as for tables in mwparserfromhell)."""
    return i == 0 or text[i - 1] == "\n" or (text[i - 1] in " \t" and (i == 1 or text[i - 2] == "\n"))


def _template_name(text: str, start: int, end: int) -> str | None:
    """The name of the template whose arguments are ``text[start:end]``; None when it is not plain
    text (it holds a template, link or tag; except a parser function's) or not a valid name for
    mwparserfromhell (empty, or text on two lines), which then reads the braces as text."""
    match = _NAME_RE.match(text, start, end)
    name, stop = match.group(), match.end()
    if stop < end and text[stop] != "|":
        if text.startswith("<!--", stop):  # {{Infobox <!-- comment -->|...}}
            inner = _COMMENT_RE.sub("", text[start:end])
            match = _NAME_RE.match(inner)
            if match.end() < len(inner) and inner[match.end()] != "|":
                return None
            name = match.group()
        elif text[stop] != "{" or ":" not in _normalise_name(name):  # {{#if:{{{1|}}}|...}}: "#if:".
            return None
    return name if name.strip() and "\n" not in name.strip() else None


def _bracket_pairs(text: str, start: int, end: int) -> dict[int, int]:
    """Where each "[" in ``text[start:end]`` that closes there is closed (the index after its "]")."""
    pairs, opened = {}, []
    for bracket in _BRACKET_RE.finditer(text, start, end):
        if bracket.group() == "[":
            opened.append(bracket.start())
        elif opened:
            pairs[opened.pop()] = bracket.end()
    return pairs


def _close_braces(
    text: str, at: int, count: int, stack: list[list[int]], cuts: list[tuple[int, int, str | None]]
) -> None:
    """Match a run of ``count`` closing braces at ``text[at]`` against the open elements on ``stack``
    (``[start, braces left]``, 0 braces for a table), as MediaWiki's preprocessor does: the
    innermost element takes three braces (a parameter) or two (a template); a lone brace is text."""
    if stack and stack[-1][1] == 0 and text[at - 1] == "|" and _at_line_start(text, at - 1):
        cuts.append((stack.pop()[0], at + 1, None))  # The "|}" ending a table.
        at, count = at + 1, count - 1
    while count >= 2:
        inner = len(stack) - 1
        while inner >= 0 and stack[inner][1] == 0:  # Tables left open inside a template end with it.
            inner -= 1
        if inner < 0:
            return
        del stack[inner + 1 :]
        element = stack[-1]
        matched = min(count, element[1], 3)
        start, end = element[0] + element[1] - matched, at + matched
        element[1] -= matched
        if element[1] < 2:
            stack.pop()
        at, count = end, count - matched
        if matched == 3:  # A {{{parameter}}} of a template page: left to the walker.
            continue
        name = _template_name(text, start + 2, end - 2)
        if name is not None and _renderer(name)[0] is None:
            cuts.append((start, end, name))


def _prepass(text: str) -> tuple[str, int, bool]:
    """Cut out what the walker would drop, leaving ``_GAP``: the text, the number of templates cut
    (not those inside other cuts) and whether one was a disambiguation template."""
    cuts: list[tuple[int, int, str | None]] = []  # (start, end, template name or None)
    stack: list[list[int]] = []  # Open brace elements and tables, see _close_braces.
    unclosed: set[str] = set()  # Closing tags, "-->" and ">" not found after some position.
    paragraph_end, brackets = 0, {}  # Where the paragraph of the last hidden link ends; its brackets.
    pos = 0
    while match := _CUT_RE.search(text, pos):
        start, pos = match.span()
        token = match.group()
        end: int | None = None
        if token[0] == "{":
            if len(token) > 1:
                stack.append([start, len(token)])
            elif text.startswith("|", pos) and _at_line_start(text, start):
                stack.append([start, 0])  # "{|" opening a table.
        elif token[0] == "}":
            _close_braces(text, start, len(token), stack, cuts)
        elif token[0] == "[":
            if _link_target(token[2:].strip())[0]:  # [[File:, [[Category:, [[de:
                if start >= paragraph_end:  # Links end within their paragraph here.
                    paragraph_end = text.find("\n\n", start)
                    paragraph_end = len(text) if paragraph_end < 0 else paragraph_end
                    brackets = _bracket_pairs(text, start, paragraph_end)
                end = brackets.get(start)
        elif token == "<!--":
            end = -1 if "-->" in unclosed else text.find("-->", pos)
            end = None if end < 0 else end + 3
            if end is None:
                unclosed.add("-->")
        else:
            name = match.group(1).lower()
            gt = -1 if ">" in unclosed else text.find(">", pos)
            if gt < 0:
                unclosed.add(">")
                continue
            if text[gt - 1] == "/":
                end = gt + 1
            elif name not in unclosed and (close := _CLOSE_TAG_RES[name].search(text, gt + 1)):
                end = close.end()
            else:
                unclosed.add(name)
            if end is not None and name == "nowiki":  # Kept as is, but not scanned.
                pos, end = end, None
        if end is not None:
            cuts.append((start, end, None))
            pos = end
    return _apply_cuts(text, cuts)


def _apply_cuts(text: str, cuts: list[tuple[int, int, str | None]]) -> tuple[str, int, bool]:
    """``text`` with each outermost cut replaced by ``_GAP`` and list lines dropped; the number of
    templates cut and whether one of them was a disambiguation template."""
    parts, last, dropped, disambiguation = [], 0, 0, False
    for start, end, name in sorted(cuts, key=lambda cut: (cut[0], -cut[1])):
        if start < last:  # Inside a cut already made.
            continue
        parts += [text[last:start], _GAP]
        last = end
        if name is not None:
            dropped += 1
            disambiguation = disambiguation or _is_disambiguation_template(name)
    parts.append(text[last:])
    text = _LIST_LINE_RE.sub("\n", "\n" + "".join(parts))[1:]  # The walker drops list lines.
    return text, dropped, disambiguation


def _resolve_quotes(line: str) -> str:
    """Remove bold/italic apostrophe runs from one line, keeping literal apostrophes, as MediaWiki does."""
    runs = list(_QUOTE_MARK_RE.finditer(line))
    kept = [len(m.group()) - 3 if len(m.group()) == 4 else max(0, len(m.group()) - 5) for m in runs]
    markup = [len(m.group()) - k for m, k in zip(runs, kept, strict=True)]
    italics, bolds = sum(n in (2, 5) for n in markup), sum(n in (3, 5) for n in markup)
    if italics % 2 and bolds % 2:
        choices: dict[str, int] = {}
        for i, m in enumerate(runs):
            if markup[i] == 3:
                before = line[max(0, m.start() - 2) : m.start()].rjust(2)
                kind = "space" if before[1] == " " else "single" if before[0] == " " else "multi"
                choices.setdefault(kind, i)
        chosen = choices.get("single", choices.get("multi", choices.get("space")))
        if chosen is not None:
            kept[chosen] += 1
    parts, last = [], 0
    for m, k in zip(runs, kept, strict=True):
        parts += [line[last : m.start()], "'" * k]
        last = m.end()
    return "".join(parts) + line[last:]


class _Walker:
    """Renders a parsed page to text with ``_DROP_LINE`` marks; counts the templates it meets."""

    def __init__(self) -> None:
        self.rendered = 0
        self.dropped = 0

    def render(self, code: Wikicode, depth: int = 0, literal: bool = False) -> str:
        if depth > MAX_DEPTH:
            return ""
        parts = []
        for node in code.nodes:
            if isinstance(node, Text):
                value = node.value
                if not literal and "''" in value:
                    value = _QUOTE_RUN_RE.sub(lambda m: _QUOTE * len(m.group()), value)
                if depth == 0 and "\n " in value:  # Lines starting with a space are preformatted.
                    value = value.replace("\n ", "\n" + _DROP_LINE)
                if "__" in value:
                    value = _MAGIC_WORD_RE.sub("", value)
                parts.append(value.replace(_GAP, "") if _GAP in value else value)
            elif isinstance(node, Wikilink):
                parts.append(self._link(node, depth))
            elif isinstance(node, Template):
                parts.append(self._template(node, depth))
            elif isinstance(node, Tag):
                parts.append(self._tag(node, depth, literal))
            elif isinstance(node, HTMLEntity):
                parts.append(node.normalize())
            elif isinstance(node, ExternalLink):
                parts.append(self.render(node.title, depth + 1) if node.brackets and node.title else "")
            elif isinstance(node, Heading):
                parts.append(_DROP_LINE)
            # Comments and template arguments ({{{1}}}) render as nothing.
        return "".join(parts)

    def _link(self, node: Wikilink, depth: int) -> str:
        target = str(node.title).replace(_GAP, "").strip()
        if _link_target(target)[0]:
            return ""  # Hidden: its text is not rendered (nor its templates counted).
        return _link_text(target, None if node.text is None else self.render(node.text, depth + 1))

    def _template(self, node: Template, depth: int) -> str:
        renderer, first = _renderer(self.render(node.name, depth + 1))
        if renderer is None:
            self.dropped += 1
            return ""
        self.rendered += 1
        return renderer(_Args(self, node, depth, first))

    def _tag(self, node: Tag, depth: int, literal: bool) -> str:
        name = str(node.tag).strip().lower()
        if name in _LINE_TAGS:
            return _DROP_LINE
        if name == "br":
            return " "
        if name in _DROPPED_TAGS or node.self_closing or node.contents is None:
            return "\n\n" if name in _BLOCK_TAGS else ""
        inner = self.render(node.contents, depth + 1, literal or name == "nowiki")
        return f"\n\n{inner}\n\n" if name in _BLOCK_TAGS else inner


def _plain_links(tokenlist: list[tokens.Token]) -> list[tokens.Token]:
    """Turn each link whose target and text are plain text into one text token of what
    ``_Walker._link`` would render, so that the builder makes no tree for it."""
    kinds = [type(token) for token in tokenlist]
    text_kind, close, separator = tokens.Text, tokens.WikilinkClose, tokens.WikilinkSeparator
    out: list[tokens.Token] = []
    last = 0
    for i in [i for i, kind in enumerate(kinds) if kind is tokens.WikilinkOpen]:
        if kinds[i + 1] is not text_kind:  # A closing token follows: the indexes below exist.
            continue
        if kinds[i + 2] is close:
            text, end = None, i + 3
        elif kinds[i + 2] is separator and kinds[i + 3] is close:
            text, end = "", i + 4
        elif kinds[i + 2] is separator and kinds[i + 3] is text_kind and kinds[i + 4] is close:
            text, end = tokenlist[i + 3]["text"], i + 5
        else:
            continue
        target = tokenlist[i + 1]["text"]
        if _NOT_PLAIN_RE.search(target) or (text and _NOT_PLAIN_RE.search(text)):
            continue
        shown = _link_text(target.strip(), text)
        if not _NOT_PLAIN_RE.search(shown):
            out += tokenlist[last:i]
            out.append(tokens.Text(text=shown))
            last = end
    out += tokenlist[last:]
    return out


def _parse(wikitext: str) -> Wikicode:
    """``mwparserfromhell.parse(wikitext, skip_style_tags=True)``, with plain links made text."""
    tokenizer = CTokenizer() if CTokenizer is not None else Tokenizer()
    return Builder().build(_plain_links(tokenizer.tokenize(wikitext, 0, True)))


def _is_prose_line(line: str) -> bool:
    if not line or _DROP_LINE in line or line.startswith(_MARKUP_LINE_STARTS):
        return False
    if _QUOTE in line and _BOLD_LINE_RE.fullmatch(line):
        return False
    return not any(markup in line for markup in _LEFTOVER_MARKUP)


def _finish_paragraph(lines: list[str]) -> str:
    """One paragraph from its lines, or "" when what is left is debris or still markup."""
    paragraph = " ".join(_resolve_quotes(line) if _QUOTE in line else line for line in lines)
    for pattern, replacement in _DEBRIS_RES:
        paragraph = pattern.sub(replacement, paragraph)
    paragraph = normalize_text(paragraph)
    if len(paragraph) < MIN_PARAGRAPH_CHARS or not any(c.isalpha() for c in paragraph):
        return ""
    return paragraph if _is_prose_line(paragraph) else ""


def _paragraphs(rendered: str) -> list[str]:
    """Split rendered text into paragraphs: runs of prose lines, anything else ends one."""
    paragraphs, current = [], []
    for line in rendered.split("\n") + [""]:
        line = line.strip()
        if _is_prose_line(line):
            current.append(line)
        elif current:
            paragraphs.append(_finish_paragraph(current))
            current = []
    return [paragraph for paragraph in paragraphs if paragraph]


def _is_disambiguation_template(name: str) -> bool:
    name = _normalise_name(name)
    return name in _DISAMBIGUATION_TEMPLATES or name.endswith("disambiguation")


def _is_disambiguation(code: Wikicode, title: str) -> bool:
    """Whether a page is a disambiguation page: its title ends with "(disambiguation)", a top-level
    template is a disambiguation template, or it has ``__DISAMBIG__``."""
    return title.strip().endswith("(disambiguation)") or any(
        (isinstance(node, Template) and _is_disambiguation_template(str(node.name)))
        or (isinstance(node, Text) and "__DISAMBIG__" in node.value)
        for node in code.nodes
    )


def clean_wikitext(wikitext: str, title: str = "") -> CleanedPage:
    """One page's wikitext as prose paragraphs, one normalised line each; a parser failure propagates."""
    for mark in (_DROP_LINE, _QUOTE, _GAP):  # Our marks must not occur.
        if mark in wikitext:
            wikitext = wikitext.replace(mark, "")
    wikitext, cut_templates, cut_disambiguation = _prepass(wikitext)
    code = _parse(wikitext)
    walker = _Walker()
    paragraphs = _paragraphs(walker.render(code))
    return CleanedPage(
        paragraphs=paragraphs,
        is_disambiguation=cut_disambiguation or _is_disambiguation(code, title),
        num_templates_rendered=walker.rendered,
        num_templates_dropped=cut_templates + walker.dropped,
    )
