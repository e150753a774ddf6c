"""The pieces every figure script of the course shares (scripts/figures_*.py); it draws no figure.

  ROOT, IMG, RESULTS      the checkout, docs/img/ (where the PNGs go), docs/results/h200/
  pyplot()                matplotlib's pyplot on the Agg backend (pip installs matplotlib if it is
                          missing; CI never runs the figure scripts)
  source(rel)             a file of the checkout as text (read once), exiting if it is missing
  source_match(...)       the first match of a pattern in a file, or exit naming what is gone
  source_text(...)        exit unless a piece of code is in a file (whitespace-insensitive)
  source_constant(...)    the value of `constexpr <type> NAME = VALUE;` in a C++ file: an integer,
                          a float (`0.75f`), or `INT * kOther` of another constant of that file
  box, arrow, save        a labelled rectangle, an arrow, save-and-close
  parser(doc), out_dir()  the scripts' command line: --out DIR (default docs/img/)

Every reader fails loudly: a constant or a formula a figure relies on that has left its file stops
the script with the file and the name, so that a figure cannot silently drift from the kernels.
"""
import argparse
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
IMG = ROOT / "docs" / "img"
RESULTS = ROOT / "docs" / "results" / "h200"

# The H200 of the results files: 132 SMs (docs/results/h200/*.json, provenance.gpu).
SMS = 132
# tab10's colours, as the schematic figures of Parts IV-VII use them.
BLUE, RED, GREEN, GREY, ORANGE = "#1f77b4", "#d62728", "#2ca02c", "#888888", "#ff7f0e"


def _script():
    return pathlib.Path(sys.argv[0]).name or "figlib"


def pyplot():
    """matplotlib.pyplot with the Agg backend; matplotlib is installed with pip if it is missing."""
    try:
        import matplotlib
    except ImportError:
        print(f"{_script()}: matplotlib is missing; installing it with pip", file=sys.stderr)
        subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", "matplotlib"])
        import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


# ---- reading the kernels' sources -----------------------------------------------------------------

_texts = {}


def source(rel):
    """The text of `rel` (a path relative to the checkout, or absolute), read once."""
    key = str(rel)
    if key not in _texts:
        path = ROOT / rel
        if not path.exists():
            sys.exit(f"{_script()}: {rel} does not exist")
        _texts[key] = path.read_text()
    return _texts[key]


def source_match(rel, pattern, what, flags=0):
    """The first match of `pattern` in file `rel`, or exit saying which constant or formula is gone."""
    m = re.search(pattern, source(rel), flags)
    if not m:
        sys.exit(f"{_script()}: {rel}: {what} not found (pattern {pattern!r}); update "
                 f"scripts/{_script()} to the source")
    return m


def source_text(rel, text, what):
    """Exit unless the literal `text` (whitespace-insensitive) is in file `rel`."""
    def squash(s):
        return re.sub(r"\s+", " ", s)
    if squash(text) not in squash(source(rel)):
        sys.exit(f"{_script()}: {rel}: {what} not found (`{text}`); update scripts/{_script()} to the source")


def _value(rel, expr, seen):
    expr = expr.split("//")[0].strip()
    if re.fullmatch(r"\d+", expr):
        return int(expr)
    if re.fullmatch(r"(\d+\.\d*|\.\d+)f?", expr):
        return float(expr.rstrip("f"))
    m = re.fullmatch(r"(\d+)\s*\*\s*(k\w+)", expr)
    if m and m.group(2) not in seen:
        return int(m.group(1)) * source_constant(rel, m.group(2), seen | {m.group(2)})
    return None


def source_constant(rel, name, _seen=frozenset()):
    """The value of the first `constexpr <type> NAME = VALUE;` of file `rel` whose VALUE is a number
    (int, or float when written with a point) or `INT * kOther` (kOther read the same way); exits
    naming the file and the constant when there is none."""
    pattern = r"\bconstexpr\s+(?:[\w:]+\s+)+" + re.escape(name) + r"\s*=\s*([^;]+);"
    found = []
    for m in re.finditer(pattern, source(rel)):
        value = _value(rel, m.group(1), _seen | {name})
        if value is not None:
            return value
        found.append(m.group(1).strip())
    sys.exit(f"{_script()}: {rel}: no constexpr {name} with a numeric value"
             + (f" (found: {'; '.join(found)})" if found else ""))


# ---- drawing ---------------------------------------------------------------------------------------

def box(ax, x, y, w, h, color, text="", fontsize=7, hatch=None, tcolor="black", lw=0.6, alpha=1.0):
    """A rectangle with a black edge and, if given, a label at its centre."""
    from matplotlib.patches import Rectangle
    ax.add_patch(Rectangle((x, y), w, h, facecolor=color, edgecolor="black", lw=lw, hatch=hatch,
                           alpha=alpha))
    if text:
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fontsize, color=tcolor)


def arrow(ax, start, end, arrowstyle="->", **kw):
    """An arrow patch from `start` to `end` (data coordinates); kw go to FancyArrowPatch."""
    from matplotlib.patches import FancyArrowPatch
    return ax.add_patch(FancyArrowPatch(start, end, arrowstyle=arrowstyle, **kw))


def save(fig, out, name, dpi=110, made=None, **kw):
    """Write `fig` to out/name and close it; `made`, if given, collects the names written."""
    fig.savefig(pathlib.Path(out) / name, dpi=dpi, **kw)
    pyplot().close(fig)
    if made is not None:
        made.append(name)


# ---- the command line -------------------------------------------------------------------------------

def parser(doc):
    """An ArgumentParser showing `doc`, with --out DIR (default docs/img/)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=pathlib.Path, default=IMG, help="where the PNGs go (default: docs/img/)")
    return ap


def out_dir(path):
    path = pathlib.Path(path)
    path.mkdir(parents=True, exist_ok=True)
    return path


def ceil_div(a, b):
    return -(-a // b)
