"""Rebuild ``ctransformer-cjk.ttf``: a subset of Noto Sans CJK SC Regular
(SIL Open Font License 1.1, see OFL.txt) holding the characters that
ctransformer's plots need, so Chinese tokens render on machines without any
CJK font.  Not imported by the package; run it by hand after adding Chinese
text to the corpus or the notebooks:

    apt-get install fonts-noto-cjk          # or any copy of NotoSansCJK-Regular.ttc / NotoSansCJKsc-Regular.otf
    python ctransformer/fonts/make_subset.py [path/to/NotoSansCJK-Regular.ttc]

Characters kept: printable ASCII, common CJK punctuation, and every
non-ASCII character in the package's Python sources (the corpus grammar in
ctransformer/data/ included) and in notebooks/*.py.  The CFF outlines are
converted to TrueType (quadratic) outlines, which every matplotlib backend can
embed (PDF/PS included), and the family is renamed (the OFL reserves the
original name for unmodified fonts): ``ctransformer CJK``.
"""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGE = HERE.parent
ROOT = PACKAGE.parent
OUT = HERE / "ctransformer-cjk.ttf"
FAMILY = "ctransformer CJK"
SOURCES = ("/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc",
           "/usr/share/fonts/opentype/noto-cjk/NotoSansCJK-Regular.ttc")
PUNCTUATION = "，。？！：；、“”‘’（）《》【】…—·～"


def wanted_text() -> str:
    chars = {chr(c) for c in range(0x20, 0x7F)} | set(PUNCTUATION)
    files = list(PACKAGE.rglob("*.py")) + list((ROOT / "notebooks").glob("*.py"))
    for f in files:
        chars |= {ch for ch in f.read_text(encoding="utf-8") if ord(ch) > 0x7F}
    return "".join(sorted(chars))


def load_sc(path: str):
    from fontTools.ttLib import TTCollection, TTFont
    if path.endswith(".ttc"):
        for font in TTCollection(path).fonts:
            if font["name"].getDebugName(1) == "Noto Sans CJK SC":
                return font
        raise SystemExit(f"{path}: no 'Noto Sans CJK SC' face")
    return TTFont(path)


def cff_to_glyf(font) -> None:
    """Replace CFF outlines by TrueType ones (cubic -> quadratic, 1 unit tolerance)."""
    from fontTools.pens.cu2quPen import Cu2QuPen
    from fontTools.pens.ttGlyphPen import TTGlyphPen
    from fontTools.ttLib import newTable

    order = font.getGlyphOrder()
    glyphset = font.getGlyphSet()
    glyf = newTable("glyf")
    glyf.glyphOrder = order
    glyf.glyphs = {}
    for name in order:
        pen = TTGlyphPen(glyphset)
        glyphset[name].draw(Cu2QuPen(pen, max_err=1.0, reverse_direction=True))
        glyf.glyphs[name] = pen.glyph()
    del font["CFF "]
    if "VORG" in font:
        del font["VORG"]
    font["glyf"] = glyf
    font["loca"] = newTable("loca")
    maxp = font["maxp"]
    maxp.tableVersion = 0x00010000
    for attr in ("maxZones", "maxTwilightPoints", "maxStorage", "maxFunctionDefs", "maxInstructionDefs",
                 "maxStackElements", "maxSizeOfInstructions", "maxComponentElements"):
        setattr(maxp, attr, 0)
    maxp.maxZones = 1
    font["head"].glyphDataFormat = 0
    font["head"].indexToLocFormat = 0
    font["post"].formatType = 2.0
    font["post"].extraNames = []
    font["post"].mapping = {}
    font["post"].glyphOrder = order
    font.sfntVersion = "\x00\x01\x00\x00"
    font.recalcBBoxes = True


def rename(font) -> None:
    name = font["name"]
    ps = FAMILY.replace(" ", "") + "-Regular"
    for rec in list(name.names):
        if rec.nameID in (1, 4, 16):
            name.setName(FAMILY, rec.nameID, rec.platformID, rec.platEncID, rec.langID)
        elif rec.nameID == 6:
            name.setName(ps, rec.nameID, rec.platformID, rec.platEncID, rec.langID)
        elif rec.nameID == 3:
            name.setName(f"{ps}; subset of Noto Sans CJK SC 2.004", 3, rec.platformID, rec.platEncID, rec.langID)
    name.names = [r for r in name.names if r.nameID < 256 and r.langID in (0, 0x409)]


def main(argv=None) -> int:
    from fontTools import subset
    argv = sys.argv[1:] if argv is None else argv
    path = argv[0] if argv else next((p for p in SOURCES if Path(p).exists()), None)
    if path is None:
        raise SystemExit("no NotoSansCJK-Regular.ttc found; pass its path")
    font = load_sc(path)
    text = wanted_text()
    cmap = font.getBestCmap()
    missing = [ch for ch in text if ord(ch) not in cmap]
    options = subset.Options()
    options.layout_features = ["kern", "liga", "locl", "vert", "vrt2", "halt", "palt"]
    options.name_IDs = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 16, 17]
    options.hinting = False
    options.desubroutinize = True
    sub = subset.Subsetter(options)
    sub.populate(text=text)
    sub.subset(font)
    cff_to_glyf(font)
    rename(font)
    font.save(OUT)
    print(f"{OUT}: {OUT.stat().st_size:,} bytes, {len(text) - len(missing)} characters"
          + (f" (not in the font, left to other fonts: {''.join(missing)})" if missing else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
