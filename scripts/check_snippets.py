#!/usr/bin/env python3
"""Compiles every fenced C++/CUDA code block of README.md and docs/*.md, so no snippet can rot.

Usage: check_snippets.py [--nvcc PATH] [--out DIR] [--list] [--keep-going] [MARKDOWN...]
  e.g. python3 scripts/check_snippets.py                      # README.md and docs/*.md
       python3 scripts/check_snippets.py --list docs/map.md   # show how each block is wrapped

The rules, which README.md ("Development") repeats for authors:
  * Blocks fenced as ```cpp, ```c++, ```cuda or ```cu are checked; every such block must compile.
  * Each block is compiled as written, after `#include <spillway/spillway.cuh>` and the standard
    headers <cstddef> <cstdint> <cstdio> <vector> <string>. Its own #include lines are honoured.
  * A block lives in its own namespace. Its declarations (struct/class/template/__global__/
    functions, using, namespace aliases) stay at that namespace's scope; its statements become the
    body of one function there, in their order. So a snippet declares what it uses, as a user would.
  * A block that cannot compile on purpose (an interface schema with `...`) starts with the
    visible line `// not compiled: <why>`; it is skipped and listed as such.
All blocks of all files go into ONE translation unit (compiled once, device code to PTX only, no
ptxas), with #line directives so that an error names the markdown file and line.
"""
import argparse
import glob
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LANGS = {"cpp", "c++", "cuda", "cu", "cxx"}
SKIP_MARK = re.compile(r"^\s*//\s*not compiled:\s*\S")
PRELUDE = ["<spillway/spillway.cuh>", "<cstddef>", "<cstdint>", "<cstdio>", "<vector>", "<string>"]
FILE_SCOPE_WORDS = {"struct", "class", "template", "__global__", "__device__", "__host__", "namespace", "using",
                    "typedef", "enum", "union", "static_assert", "inline", "static", "constexpr", "extern"}
CONTROL_WORDS = {"if", "for", "while", "switch", "do", "try", "return", "else"}


def extract_blocks(path):
    """(first line number of the code, language, lines) for each fenced block of a checked language."""
    blocks, lines = [], open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)", lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = len(m.group(1)), m.group(2), m.group(3).lower()
        body, j = [], i + 1
        while j < len(lines) and not re.match(r"^\s*" + re.escape(fence[0]) + "{%d,}\\s*$" % len(fence), lines[j]):
            body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j])
            j += 1
        if lang in LANGS:
            blocks.append((i + 2, lang, body))
        i = j + 1
    return blocks


def split_chunks(lines, first_line):
    """Splits a block into top-level chunks: (line number, text, is_preprocessor).

    A chunk ends at a ';' outside braces and parentheses, or at a '}' that closes to depth 0 and is
    not followed by ';' ',' ')' '.' '(' 'else' 'while' 'catch'. Comments and literals are skipped."""
    text = "\n".join(lines)
    chunks, start, depth, paren, i, n = [], 0, 0, 0, 0, len(text)

    def line_of(pos):
        return first_line + text.count("\n", 0, pos)

    def emit(end):
        nonlocal start
        # A comment that trails the terminator on its line belongs to this chunk.
        eol = text.find("\n", end)
        eol = n if eol < 0 else eol
        tail = text[end:eol].strip()
        if tail == "" or tail.startswith("//"):
            end = eol
        piece = text[start:end]
        if piece.strip():
            lead = len(piece) - len(piece.lstrip())
            chunks.append((line_of(start + lead), piece.strip("\n"), False))
        start = end

    while i < n:
        c = text[i]
        at_line_start = text.rfind("\n", 0, i) + 1
        if c == "#" and text[at_line_start:i].strip() == "" and depth == 0 and paren == 0:
            emit(i)
            end = text.find("\n", i)
            end = n if end < 0 else end
            chunks.append((line_of(i), text[i:end], True))
            i = start = end
            continue
        if text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
            continue
        if c in "\"'":
            if c == "'" and i > 0 and (text[i - 1].isalnum()):  # digit separator 1'000
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            continue
        if c in "([":
            paren += 1
        elif c in ")]":
            paren -= 1
        elif c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0 and paren == 0:
                rest = text[i + 1:].lstrip()
                if not (rest[:1] in (";", ",", ")", ".", "(") or re.match(r"(else|while|catch)\b", rest)):
                    emit(i + 1)
                    i = max(i, start - 1)
        elif c == ";" and depth == 0 and paren == 0:
            emit(i + 1)
            i = max(i, start - 1)
        i += 1
    emit(n)
    return chunks


def strip_comments(s):
    return re.sub(r"//[^\n]*|/\*.*?\*/", " ", s, flags=re.S).strip()


def is_file_scope(chunk):
    code = strip_comments(chunk)
    first = re.match(r"[A-Za-z_]\w*", code)
    word = first.group(0) if first else ""
    if word in FILE_SCOPE_WORDS:
        return True
    # A function definition: ends with '}' (not ';'), has a parameter list before its first '{'.
    if code.endswith("}") and word not in CONTROL_WORDS and not code.startswith("{"):
        head = code.split("{", 1)[0]
        return "(" in head and "=" not in head
    return False


def wrap(md_files, prelude=True):
    """The translation unit, and a list of (file, line, status) for the report."""
    includes, bodies, report = [], [], []
    for md in md_files:
        rel = os.path.relpath(md, ROOT)
        for line, lang, lines in extract_blocks(md):
            if lines and SKIP_MARK.match(lines[0]):
                report.append((rel, line, "skipped (" + lines[0].strip()[2:].strip() + ")"))
                continue
            ns = "snippet_" + re.sub(r"\W", "_", rel) + "_" + str(line)
            decls, stmts = [], []
            for cl, chunk, pre in split_chunks(lines, line):
                if pre and re.match(r"\s*#\s*include\b", chunk):
                    includes.append((rel, cl, chunk))
                elif pre:
                    decls.append((cl, chunk))
                elif is_file_scope(chunk):
                    decls.append((cl, chunk))
                else:
                    stmts.append((cl, chunk))
            out = ["namespace %s {" % ns]
            for cl, chunk in decls:
                out.append('#line %d "%s"' % (cl, rel))
                out.append(chunk)
            out.append("[[maybe_unused]] void snippet_body() {")
            for cl, chunk in stmts:
                out.append('#line %d "%s"' % (cl, rel))
                out.append(chunk)
            out.append("}")
            out.append("}  // namespace %s" % ns)
            bodies.append("\n".join(out))
            report.append((rel, line, "compiled"))
    tu = ["// Generated by scripts/check_snippets.py from the markdown files; do not edit."]
    tu += ["#include %s" % h for h in (PRELUDE if prelude else [])]
    for rel, cl, inc in includes:
        tu.append('#line %d "%s"' % (cl, rel))
        tu.append(inc)
    tu += bodies
    return "\n".join(tu) + "\n", report


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.split("\n")[1:]))
    ap.add_argument("markdown", nargs="*", help="markdown files (default: README.md and docs/*.md)")
    ap.add_argument("--nvcc", default=os.environ.get("NVCC", "nvcc"), help="the CUDA compiler (default: nvcc)")
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "snippets"),
                    help="folder for the generated translation unit (default: build/snippets)")
    ap.add_argument("--list", action="store_true", help="print the generated translation unit and exit")
    ap.add_argument("--no-prelude", action="store_true",
                    help="omit the implicit includes (used by the checker's own test on a fixture)")
    args = ap.parse_args()
    files = args.markdown or [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    files = [os.path.abspath(f) for f in files]
    tu, report = wrap(files, prelude=not args.no_prelude)
    if args.list:
        sys.stdout.write(tu)
        return 0
    os.makedirs(args.out, exist_ok=True)
    src = os.path.join(args.out, "snippets.cu")
    with open(src, "w", encoding="utf-8") as f:
        f.write(tu)
    cmd = [args.nvcc, "-std=c++17", "--extended-lambda", "-I", os.path.join(ROOT, "include"),
           "-gencode=arch=compute_90a,code=compute_90a", "-c", src, "-o", os.path.join(args.out, "snippets.o")]
    rc = subprocess.call(cmd, cwd=ROOT)
    for rel, line, status in report:
        print("%-8s %s:%d" % ("ok" if status == "compiled" and rc == 0 else
                               ("-" if status != "compiled" else "?"), rel, line) +
              ("" if status == "compiled" else "  " + status))
    n = sum(1 for r in report if r[2] == "compiled")
    if rc != 0:
        print("FAILED: the %d snippets above did not all compile (the errors name markdown file:line); "
              "translation unit: %s" % (n, src))
        return 1
    print("%d snippets from %d markdown files compile (%d skipped as marked)" %
          (n, len(files), len(report) - n))
    return 0


if __name__ == "__main__":
    sys.exit(main())
