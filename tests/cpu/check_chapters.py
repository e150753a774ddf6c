#!/usr/bin/env python3
"""Every chapter docs/NN_*.md, and the capstone docs/capstone*.md, keeps the course's form (a CPU
test, docs_chapters_form):

  - its first section (## heading) is "Predict first", with 2 to 4 numbered questions;
  - it has an "Answers" section with one numbered answer per question, after the body;
  - its last section is "Exercises", with at least one item (change one line, run one command,
    explain the number);
  - it has a figure: an image under docs/img/ (![…](img/…) or <img src="img/…">, outside code
    and comments) that exists; and at least one of its images is its own, used by no other
    chapter (a chapter's figure shows its own idea; part introductions and README.md are exempt);
  - from Part IV on (chapters 16 and later), also a "Verdict" section and, for every chapter but
    a part's first (16, 23), a link to its step's diff under docs/diffs/ (which must exist once the
    chapter's own step directory, steps/NN_x/ for docs/NN_x.md, does: a chapter written ahead of
    its step's code is allowed);
  - the capstone is held to all of this as a chapter after Part VII (a Verdict section, a figure of
    its own, listed in docs/README.md) but links no diff: it has no step;
  - every relative link of every docs/*.md and docs/results/notes/*.md points at a file inside
    the repository that exists (anchors are not checked); docs/README.md lists every chapter.

A lesson's visible prose (every chapter and the capstone, every part introduction docs/part*.md,
docs/START.md) speaks to the learner, not about the team's work; so does the rest of a learner's
path (README.md, docs/README.md, labs/README.md, every steps/*/README.md and labs/*/README.md). It
must not contain:

  - a measurement round: "round N", "rounds N–M", "round-N", "round N of …" (N a number or a
    number word one … ten), any case; "rounded", "round-robin", "round trip", "round up" are fine;
  - an issue number: "issue N", "issue #N", "issues #N" (not the verb: "a warp issues 44
    ldmatrix", "issue 16-byte copies", "issues 128/16 = 8 wgmma" are fine);
  - "session(s)", "device-second(s)" / "device second(s)", "device time" / "device-time";
  - a bare commit hash: a run of 7 to 40 lowercase hex digits [0-9a-f] with at least one digit
    and at least one of a–f, standing alone as a word (no letter, digit or _ right before or after
    it: "sm_90a", "fp16x8", "e4m3" are words of their own), and not a number: not the digits
    after a decimal point ("3.4028235e38"), not digits-e-digits ("1250000e3"). A run right after
    "0x" is a constant and is not a hash, in prose and in code spans alike; otherwise an inline
    `code span` is prose like the rest: `00fb939` is a commit, so a hex constant is written with
    its 0x (`0x9e3779b9`).
    Uppercase runs are not read as hashes (git writes hashes in lowercase).

Not visible prose, and so exempt: HTML comments (<!-- figure/table markers -->, whose file names
contain r2 etc.), fenced code blocks (``` or ~~~), link targets (the "(…)" of [text](target): a
notes file may be named for its round), and a generated table block, from its
`<!-- table: ... -->` line to its `<!-- end table -->` line. A table footer line, any line that
names a results file (contains "results/"), may name its commit: the hash rule skips it, the
others do not. History (what a kernel measured before, why a rule changed) belongs in
docs/results/notes/, which a chapter links.

Every problem is printed (file:line: the words, and what to do), then the count per file; exit 1
if there is any.

  tests/cpu/check_chapters.py [DOCS_DIR]
"""
import pathlib
import re
import sys


def sections(text):
    """[(heading, body)] for every '## ' heading, in order (fenced code is skipped)."""
    out, heading, body, fenced = [], None, [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if not fenced and line.startswith("## "):
            if heading is not None:
                out.append((heading, "\n".join(body)))
            heading, body = line[3:].strip(), []
        elif heading is not None:
            body.append(line)
    if heading is not None:
        out.append((heading, "\n".join(body)))
    return out


def numbered(body):
    return [int(m.group(1)) for m in re.finditer(r"^(\d+)\. ", body, re.MULTILINE)]


PART4_FIRST = 16  # chapters from here on are Part IV's (a figure, a verdict, the diff)
PART_FIRSTS = (16, 23)  # chapters that start a part (Part IV, Part V): no diff to link
# Chapters whose step is a new kernel, not a change of the step before it: no diff to link either.
NEW_KERNELS = {28: "decode: a ring per warp over a split key range, not a change of a prefill step"}


def relative_links(text):
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return [m.group(1) for m in re.finditer(r"\]\(([^)\s]+)\)", text)
            if not re.match(r"[a-z]+:", m.group(1)) and not m.group(1).startswith("#")]


def broken_links(path, root):
    out = []
    for link in relative_links(path.read_text()):
        target = (path.parent / link.split("#")[0]).resolve()
        if root not in target.parents or not target.exists():
            out.append(link)
    return out


def step_dirs(root, number):
    return sorted((root / "steps").glob(f"{number:02d}_*"))


FENCE = re.compile(r"^\s*(```|~~~)")
COMMENT = re.compile(r"<!--.*?-->", re.S)
TABLE_START = re.compile(r"<!-- table: .*?-->")
TABLE_END = "<!-- end table -->"
LINK_TARGET = re.compile(r"(\]\()([^)]*)(\))")
NUMBER_WORDS = "one|two|three|four|five|six|seven|eight|nine|ten"
ROUND_N = r"(?:\d+|" + NUMBER_WORDS + r")"
# (regex, what it is, what to do)
FORBIDDEN = [
    (re.compile(r"\brounds?[ \t-]+" + ROUND_N + r"(?:\s*(?:–|-|to|and)\s*" + ROUND_N + r")?\b", re.I),
     "a measurement round", "move round history to docs/results/notes/ and link it; say what the "
     "kernel measures now"),
    (re.compile(r"\bissue[ \t]+#?\d+(?![\d/×x-]|\.\d)|\bissues[ \t]+#\d+", re.I),
     "an issue number", "say what the rule or the change is, not which issue asked for it"),
    (re.compile(r"\bsessions?\b", re.I),
     "the team's working sessions", "drop it, or move that history to docs/results/notes/"),
    (re.compile(r"\bdevice[ \t-]+(?:seconds?|time)\b", re.I),
     "the team's device budget", "drop it, or move that history to docs/results/notes/"),
]
HASH = re.compile(r"(?<![0-9A-Za-z_])(?<!\d\.)(?!\d+e\d+(?![0-9a-f]))"
                  r"(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![0-9A-Za-z_])")


def blank(text):
    """Spaces for every character but newlines: hidden text keeps its lines' numbers."""
    return re.sub(r"[^\n]", " ", text)


def unhidden(text):
    """The text with fenced code, generated table blocks and HTML comments blanked out (the same
    lines, so line numbers hold), and the problems of its structure (a table with no end)."""
    out, problems, fenced, table_at = [], [], None, None
    for number, line in enumerate(text.split("\n"), 1):
        if table_at is not None:
            if TABLE_END in line:
                table_at = None
            out.append(blank(line))
            continue
        fence = FENCE.match(line)
        if fenced is not None:
            if fence and fence.group(1) == fenced:
                fenced = None
            out.append(blank(line))
            continue
        if fence:
            fenced = fence.group(1)
            out.append(blank(line))
            continue
        if TABLE_START.search(line):
            table_at = number
            out.append(blank(line))
            continue
        out.append(line)
    if table_at is not None:
        problems.append((table_at, f"the table marker has no '{TABLE_END}' (scripts/make_tables.py --write)"))
    if fenced is not None:
        problems.append((len(out), f"a code block ({fenced}) is never closed"))
    visible = COMMENT.sub(lambda m: blank(m.group(0)), "\n".join(out))
    return visible, problems


def prose_problems(text):
    """[(line, problem)]: the words a lesson's visible prose must not contain (see the docstring)."""
    visible, problems = unhidden(text)
    raw = text.split("\n")
    for number, line in enumerate(visible.split("\n"), 1):
        line = LINK_TARGET.sub(lambda m: m.group(1) + blank(m.group(2)) + m.group(3), line)
        for regex, what, todo in FORBIDDEN:
            for m in regex.finditer(line):
                problems.append((number, f"{m.group(0)!r}: {what}; {todo}"))
        if "results/" in raw[number - 1]:
            continue  # a table footer naming its results file may name its commit
        for m in HASH.finditer(line):
            problems.append((number, f"{m.group(0)!r}: a bare commit hash; the table footer that names the "
                                     f"results file carries the commit, the prose does not (history: "
                                     f"docs/results/notes/)"))
    return sorted(problems)


IMAGE = re.compile(r"!\[[^\]]*\]\((img/[^)\s]+)[^)]*\)|<img\s[^>]*src=[\"'](img/[^\"']+)[\"']")


def images(text):
    """The img/ images a document shows (outside code, comments and generated tables)."""
    visible, _ = unhidden(text)
    return [a or b for a, b in IMAGE.findall(visible)]


def check_figures(paths):
    """{path: [problems]}: every chapter has an image that exists, and one that no other chapter uses."""
    shown = {path: images(path.read_text()) for path in paths}
    users = {}
    for path, imgs in shown.items():
        for image in set(imgs):
            users.setdefault(image, []).append(path)
    out = {}
    for path, imgs in shown.items():
        problems = []
        if not imgs:
            problems.append("a chapter needs a figure of its own idea (an image under img/, drawn by a "
                            "script under scripts/)")
        for image in dict.fromkeys(imgs):
            if not (path.parent / image).exists():
                problems.append(f"{image} does not exist (scripts/figures.py)")
        if imgs and all(len(users[i]) > 1 for i in imgs):
            others = sorted({o.name for i in imgs for o in users[i] if o != path})
            problems.append(f"every image it shows ({', '.join(sorted(set(imgs)))}) is shown by another "
                            f"chapter too ({', '.join(others)}): it needs one figure of its own")
        if problems:
            out[path] = problems
    return out


def check_part4(path, root):
    """A Part IV chapter's extra form: a verdict, the diff."""
    problems = []
    text = path.read_text()
    number = int(path.name[:2])
    names = [h for h, _ in sections(text)]
    if "Verdict" not in names:
        problems.append("no '## Verdict' section")
    if number not in PART_FIRSTS and number not in NEW_KERNELS:
        diffs = re.findall(r"\]\(diffs/(\d\d)-(\d\d)\.diff\)", text)
        if not any(int(b) == number for _, b in diffs):
            problems.append(f"no link to its diff (diffs/NN-{number:02d}.diff)")
        for a, b in diffs:
            f = path.parent / "diffs" / f"{a}-{b}.diff"
            if not f.exists() and step_dirs(root, int(a)) and step_dirs(root, int(b)) and \
                    step_dirs(root, int(b))[0].name == path.stem:
                problems.append(f"diffs/{a}-{b}.diff does not exist (scripts/stepdiff --write)")
    return problems


def check(path, root=None):
    problems = []
    secs = sections(path.read_text())
    names = [h for h, _ in secs]
    if not secs or names[0] != "Predict first":
        problems.append(f"the first section must be '## Predict first' (found {names[0] if names else 'none'!r})")
        return problems
    questions = numbered(secs[0][1])
    if not 2 <= len(questions) <= 4 or questions != list(range(1, len(questions) + 1)):
        problems.append(f"'Predict first' must have 2-4 questions numbered 1., 2., … (found {questions})")
    if "Answers" not in names:
        problems.append("no '## Answers' section")
    else:
        answers = numbered(dict(secs)["Answers"])
        if answers != questions:
            problems.append(f"'Answers' must answer questions {questions} in order (found {answers})")
    if names[-1] != "Exercises":
        problems.append(f"the last section must be '## Exercises' (found {names[-1]!r})")
    elif not re.search(r"^(\d+\.|-) ", secs[-1][1], re.MULTILINE):
        problems.append("'Exercises' has no items")
    if root is not None:
        if not path.name[:2].isdigit():  # the capstone: a verdict, and no step whose diff to link
            if "Verdict" not in names:
                problems.append("no '## Verdict' section")
        elif int(path.name[:2]) >= PART4_FIRST:
            problems += check_part4(path, root)
    return problems


def main():
    docs = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2] / "docs")
    chapters = sorted(docs.glob("[0-9][0-9]_*.md")) + sorted(docs.glob("capstone*.md"))
    if not chapters:
        print(f"no chapters in {docs}")
        return 1
    root = docs.resolve().parent
    bad = 0
    per_file = {}

    def report(name, problem, line=None):
        nonlocal bad
        print(f"{name}:{line}: {problem}" if line else f"{name}: {problem}")
        per_file[name] = per_file.get(name, 0) + 1
        bad += 1

    figures = check_figures(chapters)
    for path in chapters:
        for problem in check(path, root) + figures.get(path, []):
            report(path.name, problem)
    lessons = chapters + sorted(docs.glob("part*.md")) + [p for p in [docs / "START.md"] if p.exists()]
    # The rest of a learner's path: the front pages and every step's and lab's README.
    path_pages = [p for p in [root / "README.md", docs / "README.md", root / "labs" / "README.md"] if p.exists()]
    path_pages += sorted(root.glob("steps/*/README.md")) + sorted(root.glob("labs/*/README.md"))
    for path in lessons + path_pages:
        name = path.name if path.parent == docs and path.name != "README.md" else str(path.resolve().relative_to(root.resolve()))
        for line, problem in prose_problems(path.read_text()):
            report(name, problem, line)
    for path in sorted(list(docs.glob("*.md")) + list(docs.glob("results/notes/*.md"))):
        for link in broken_links(path, root.resolve()):
            if re.fullmatch(r"diffs/\d\d-\d\d\.diff", link):
                continue  # a step diff: checked above, once its steps exist
            report(path.name, f"the link {link} points at no file of the repository")
    index = docs / "README.md"
    if index.exists():
        listed = set(re.findall(r"\]\(((?:\d\d_|capstone)[a-z0-9_]*\.md)\)", index.read_text()))
        for path in chapters:
            if path.name not in listed:
                report("README.md", f"chapter {path.name} is not listed")
    if per_file:
        print("problems per file: " + ", ".join(f"{name} {n}" for name, n in sorted(per_file.items())))
    print(f"{len(chapters)} chapters, {bad} problem(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
