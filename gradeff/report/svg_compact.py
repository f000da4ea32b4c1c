"""matplotlib's SVG made smaller without changing what it draws.

matplotlib writes every element on its own indented line, coordinates to six decimals, the same inline style on
thousands of elements and an id on every group (``figure_1``, ``xtick_3``, ``line2d_7``, ...). In the report those
were most of the page's bytes: the default run's 16 figures were 0.8 MB of the 1.4 MB page. A point is 1/72 in,
so one decimal is far below a screen pixel; the automatic ids of ticks, labels and patches name nothing the page
or its checks look up. What is looked up stays: ids something refers to (clip paths, markers), the ``gid`` of a
series, and the structure of each panel (its axes, axis and legend groups, and its data lines and collections).
"""

from __future__ import annotations

import hashlib
import re

__all__ = ["compact_svg"]

# A number with more than one decimal: cut to one (trailing zeros dropped).
_LONG_NUMBER = re.compile(r"(-?\d+\.\d)\d+")
# An id matplotlib gives an element by itself: a word and a counter (``axes_1``, ``matplotlib.axis_2``).
_AUTO_ID = re.compile(r' id="((?:[\w-]+-)?[A-Za-z][\w.]*_\d+)"')
# Groups that carry a panel's structure: an axes, its two axes and its legend (whose lines are not the panel's).
_FRAME = re.compile(r"-(axes|matplotlib\.axis|legend)_\d+$")
# A panel's data, when no gid tags it: a line or a collection drawn straight in the axes.
_DATA = re.compile(r"-(line2d|PathCollection|QuadMesh|LineCollection|PolyCollection)_\d+$")
_REFERENCED = re.compile(r'(?:xlink:href="#|href="#|url\(#)([^"\)]+)')
# Line breaks and indentation between tags (matplotlib's pretty-printing), and inside path data ("M 0 0 \nL 1 1").
_BETWEEN_TAGS = re.compile(r">\s*\n\s*<")
_PATH_BREAKS = re.compile(r"\s*\n\s*")
_TAG = re.compile(r"<[^>]+>")
# matplotlib names its whole fallback list on every text; the first is the font its layout measured.
_FONT_LIST = re.compile(r"font-family: '([^']+)'(?:, [^;\"]+)?")
_STYLE = re.compile(r' style="([^"]*)"')
# matplotlib rotates every text, most by zero degrees: the identity, written out 700 times in the default report.
_NO_ROTATION = re.compile(r' transform="rotate\(-?0 [^)"]*\)"')
_GROUP = re.compile(r"<g\b[^>]*>|</g>")
_GROUP_ID = re.compile(r'^<g id="([^"]+)">$')


def _round(match: re.Match[str]) -> str:
    text = match.group(1).rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def compact_svg(svg: str) -> str:
    """``svg`` with numbers to one decimal, no whitespace between tags, styles as classes, and no automatic id
    that nothing needs (see the module's docstring for what is kept).

    Text content is untouched (a tick label's "0.125" is what the reader sees).
    """
    referenced = set(_REFERENCED.findall(svg))
    svg = _short_references(svg, referenced)
    referenced = set(_REFERENCED.findall(svg))
    svg = _BETWEEN_TAGS.sub("><", svg)
    svg = _groups(svg, referenced)
    svg = _TAG.sub(lambda m: _tag(m.group(0), referenced), svg)
    svg = _FONT_LIST.sub(lambda m: f"font-family: '{m.group(1)}', sans-serif", svg)
    return _styles_as_classes(svg)


def _short_references(svg: str, referenced: set[str]) -> str:
    """Each referenced id (a clip path, a marker: referred to thousands of times) renamed to a hash of itself.

    The ids are unique in the page (the report prefixes them per figure), so their hashes are too, short of a
    collision in 16^8; the name is the id's own hash, so the same figure gets the same names on every render.
    """
    if not referenced:
        return svg
    names = {old: "r" + hashlib.sha1(old.encode()).hexdigest()[:8] for old in referenced}
    pattern = re.compile(r'((?:\bid="|xlink:href="#|\bhref="#|url\(#))(' + "|".join(map(re.escape, names))
                         + r')(?=["\)])')
    return pattern.sub(lambda m: m.group(1) + names[m.group(2)], svg)


def _tag(tag: str, referenced: set[str]) -> str:
    if not tag.startswith("<g"):
        tag = _AUTO_ID.sub(lambda m: m.group(0) if m.group(1) in referenced else "", tag)
    return _LONG_NUMBER.sub(_round, _PATH_BREAKS.sub(" ", _NO_ROTATION.sub("", tag)))


def _groups(svg: str, referenced: set[str]) -> str:
    """Each group's automatic id dropped unless it frames a panel, is a panel's data or is referenced; a group left
    without attributes is unwrapped (its children draw the same without it)."""
    pieces, end = [], 0
    stack: list[tuple[bool, bool]] = []  # per open group: (its tags dropped, inside an axis or legend)
    for match in _GROUP.finditer(svg):
        tag = match.group(0)
        pieces.append(svg[end:match.start()])
        end = match.end()
        if tag == "</g>":
            dropped, _ = stack.pop()
            if not dropped:
                pieces.append(tag)
            continue
        inside_furniture = bool(stack) and stack[-1][1]
        found = _GROUP_ID.match(tag.removesuffix("/>").removesuffix(">") + ">")
        if found and found.group(1) not in referenced:
            name = found.group(1)
            keep = _FRAME.search(name) or (_DATA.search(name) and not inside_furniture) \
                or not _AUTO_ID.fullmatch(f' id="{name}"')
            if not keep:
                tag = "<g/>" if tag.endswith("/>") else "<g>"
        furniture = inside_furniture or bool(found and re.search(r"-(matplotlib\.axis|legend)_\d+$", found.group(1)))
        if tag.endswith("/>"):
            if tag != "<g/>":
                pieces.append(tag)  # an empty group with attributes: kept; an empty bare one draws nothing
            continue
        stack.append((tag == "<g>", furniture))
        if tag != "<g>":
            pieces.append(tag)
    pieces.append(svg[end:])
    return "".join(pieces)


def _styles_as_classes(svg: str) -> str:
    """Each inline style as a class named by its content's hash, the rules once in the SVG's own <style>.

    A few dozen distinct styles are repeated on thousands of elements (every grid line, tick and label). The name
    is the content's hash, so two figures of one page that declare the same class declare the same rule.
    """
    rules: dict[str, str] = {}

    def to_class(match: re.Match[str]) -> str:
        name = "s" + hashlib.sha1(match.group(1).encode()).hexdigest()[:7]
        rules[name] = match.group(1)
        return f' class="{name}"'

    svg = _STYLE.sub(to_class, svg)
    if not rules:
        return svg
    css = "".join(f".{name}{{{style}}}" for name, style in rules.items())
    head = svg.index(">") + 1  # right after the <svg> tag, before anything the rules style
    return f"{svg[:head]}<style>{css}</style>{svg[head:]}"
