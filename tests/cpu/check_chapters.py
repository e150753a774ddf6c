#!/usr/bin/env python3
"""Every chapter docs/NN_*.md keeps the course's form (a CPU test, docs_chapters_form):

  - its first section (## heading) is "Predict first", with 2 to 4 numbered questions;
  - it has an "Answers" section with one numbered answer per question, after the body;
  - its last section is "Exercises", with at least one item (change one line, run one command,
    explain the number);
  - from Part IV on (chapters 16 and later), also a figure (an image under docs/img/ that
    exists), a "Verdict" section and, for every chapter but a part's first (16, 23), a link to its step's
    diff under docs/diffs/ (which must exist once the chapter's own step directory, steps/NN_x/
    for docs/NN_x.md, does: a chapter written ahead of its step's code is allowed);
  - every relative link of every docs/*.md and docs/results/notes/*.md points at a file inside
    the repository that exists (anchors are not checked); docs/README.md lists every chapter.

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


def check_part4(path, root):
    """A Part IV chapter's extra form: a figure, a verdict, the diff."""
    problems = []
    text = path.read_text()
    number = int(path.name[:2])
    images = re.findall(r"!\[[^\]]*\]\((img/[^)\s]+)\)", text)
    if not images:
        problems.append("a Part IV chapter needs a figure (an image under img/)")
    for image in images:
        if not (path.parent / image).exists():
            problems.append(f"{image} does not exist (scripts/figures.py)")
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
        number = int(path.name[:2])
        if number >= PART4_FIRST:
            problems += check_part4(path, root)
    return problems


def main():
    docs = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2] / "docs")
    chapters = sorted(docs.glob("[0-9][0-9]_*.md"))
    if not chapters:
        print(f"no chapters in {docs}")
        return 1
    root = docs.resolve().parent
    bad = 0
    for path in chapters:
        for problem in check(path, root):
            print(f"{path.name}: {problem}")
            bad += 1
    for path in sorted(list(docs.glob("*.md")) + list(docs.glob("results/notes/*.md"))):
        for link in broken_links(path, root.resolve()):
            if re.fullmatch(r"diffs/\d\d-\d\d\.diff", link):
                continue  # a step diff: checked above, once its steps exist
            print(f"{path.name}: the link {link} points at no file of the repository")
            bad += 1
    index = docs / "README.md"
    if index.exists():
        listed = set(re.findall(r"\]\((\d\d_[a-z0-9_]+\.md)\)", index.read_text()))
        for path in chapters:
            if path.name not in listed:
                print(f"README.md: chapter {path.name} is not listed")
                bad += 1
    print(f"{len(chapters)} chapters, {bad} problem(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
