#!/usr/bin/env python3
"""Every chapter docs/NN_*.md keeps the course's form (a CPU test, docs_chapters_form):

  - its first section (## heading) is "Predict first", with 2 to 4 numbered questions;
  - it has an "Answers" section with one numbered answer per question, after the body;
  - its last section is "Exercises", with at least one item (change one line, run one command,
    explain the number).

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


def check(path):
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
    return problems


def main():
    docs = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2] / "docs")
    chapters = sorted(docs.glob("[0-9][0-9]_*.md"))
    if not chapters:
        print(f"no chapters in {docs}")
        return 1
    bad = 0
    for path in chapters:
        for problem in check(path):
            print(f"{path.name}: {problem}")
            bad += 1
    print(f"{len(chapters)} chapters, {bad} problem(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
