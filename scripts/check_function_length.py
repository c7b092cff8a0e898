#!/usr/bin/env python3
"""Function-length check: no function in include/spillway/ is longer than LIMIT lines (issue 32).

A function is counted from the first line of its head (the text since the previous `;`, `{` or
`}` at namespace or class scope) to its closing brace, blank and comment lines included. The
functions that were longer when the check was written are listed in function_length_allow.txt
beside this script with their length then: a listed function may shrink (and should leave the
list once it is under the limit), never grow; any other function over the limit fails. The
scanner is lexical (comments, string and character literals stripped; braces matched), which is
enough for this code base's style: a head containing `(` opened at namespace or class scope is a
function body; `namespace`, `struct`, `class`, `union`, `enum` and `extern "C"` heads are scopes.

  check_function_length.py [--root DIR] [--limit N]   check DIR (default: include/ next to scripts/)
  check_function_length.py --list                      print every function over the limit
  check_function_length.py --self-test                 a planted long function is named, the rest pass
"""
import argparse
import os
import re
import sys
import tempfile

LIMIT = 150
HEADER_EXT = (".hpp", ".cuh", ".h", ".cu")
ALLOW_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "function_length_allow.txt")
SCOPE_HEAD = re.compile(r"^\s*(template\s*<.*>\s*)?(namespace\b|struct\b|class\b|union\b|enum\b|extern\s*\"C\")", re.S)
NAME = re.compile(r"(~?[A-Za-z_]\w*|operator\s*[^\s(]+)\s*\($")


def strip(text):
    """`text` with comments, string and character literals and preprocessor lines blanked (newlines
    kept)."""
    text = strip_literals(text)
    lines = text.split("\n")
    cont = False
    for i, ln in enumerate(lines):
        if cont or ln.lstrip().startswith("#"):
            cont = ln.rstrip().endswith("\\")
            lines[i] = ""
    return "\n".join(lines)


def strip_literals(text):
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif c == '"' and i > 0 and text[i - 1] == "R":  # a raw string literal R"d(...)d"
            m = re.match(r'"([^(\s]*)\(', text[i:])
            end = text.find(")" + (m.group(1) if m else "") + '"', i)
            j = n if end < 0 else end + len(m.group(1) if m else "") + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(" " * (j - i))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def function_name(head):
    """The name before the parameter list of a function head, or None."""
    head = re.sub(r"(__launch_bounds__|__align__|alignas|__attribute__)\s*\((\([^()]*\)|[^()])*\)", " ", head)
    head = re.sub(r"\[\[.*?\]\]", " ", head)
    depth, cut = 0, None
    for k, ch in enumerate(head):  # the first '(' at template depth 0
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif ch == "(" and depth == 0:
            cut = k
            break
    if cut is None:
        return None
    m = NAME.search(head[: cut + 1].rstrip())
    return m.group(1).replace(" ", "") if m else None


def functions(path):
    """(name, first line, last line) of every function body opened at namespace or class scope."""
    with open(path, encoding="utf-8") as f:
        text = strip(f.read())
    found, stack = [], []  # stack of ("scope" | "function" | "block", name, first line)
    head_start, line = 0, 1
    for k, ch in enumerate(text):
        if ch == "\n":
            line += 1
        elif ch in ";{}":
            if ch == "{":
                head = text[head_start:k]
                in_body = any(s[0] != "scope" for s in stack)
                if in_body:
                    stack.append(("block", None, line))
                elif SCOPE_HEAD.match(head):
                    stack.append(("scope", None, line))
                elif "(" in head:
                    # from the head's first non-blank line
                    lead = head[: len(head) - len(head.lstrip())]
                    first = line - head.count("\n") + lead.count("\n")
                    stack.append(("function", function_name(" ".join(head.split())), first))
                else:  # a braced initializer at namespace or class scope
                    stack.append(("scope", None, line))
            elif ch == "}" and stack:
                kind, name, first = stack.pop()
                if kind == "function":
                    found.append((name or "?", first, line))
            head_start = k + 1
    return found


def load_allow():
    allow = {}
    if os.path.exists(ALLOW_FILE):
        with open(ALLOW_FILE, encoding="utf-8") as f:
            for raw in f:
                s = raw.split("#", 1)[0].strip()
                if s:
                    where, n = s.rsplit(" ", 1)
                    allow[where] = int(n)
    return allow


def check(root, limit, allow):
    base = os.path.join(root, "spillway")
    problems, over = [], []
    for dirpath, _, files in os.walk(base):
        for name in sorted(files):
            if not name.endswith(HEADER_EXT):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            for fn, first, last in functions(path):
                n = last - first + 1
                if n <= limit:
                    continue
                key = f"{rel}:{fn}"
                over.append((key, n))
                if key not in allow:
                    problems.append(f"{rel}:{first}: {fn} is {n} lines (limit {limit}): cut it into named steps")
                elif n > allow[key]:
                    problems.append(f"{rel}:{first}: {fn} grew to {n} lines ({allow[key]} when the check was "
                                    f"written, limit {limit}): cut it, do not grow it")
    return problems, over


def self_test():
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "spillway", "m")
        os.makedirs(p)
        body = "\n".join(f"  x += {i};  // {{ not a brace" for i in range(160))
        with open(os.path.join(p, "a.hpp"), "w", encoding="utf-8") as f:
            f.write("namespace a { namespace detail {\n"
                    "#if defined(X) && (Y > 1)\n#define M(a) do { a; } while (0)\n#endif\n"
                    "struct S {\n  int f(int x) const {\n    return x;\n  }\n};\n"
                    "template <class T>\nint long_one(T x,\n             int y) {\n" + body + "\n  return x;\n}\n"
                    'inline const char* s = "}}}";\n'
                    "inline int short_one() { if (true) { return 1; } return 0; }\n"
                    "}}\n")
        problems, over = check(d, LIMIT, {})
        names = [k for k, _ in over]
        if names != ["spillway/m/a.hpp:long_one"] or len(problems) != 1 or "long_one is 165 lines" not in problems[0]:
            print("self-test: expected long_one (165 lines, from its template line) alone, got", over, problems)
            return 1
        problems, _ = check(d, LIMIT, {"spillway/m/a.hpp:long_one": 165})
        if problems:
            print("self-test: an allowed function of its recorded length was refused:", problems)
            return 1
        problems, _ = check(d, LIMIT, {"spillway/m/a.hpp:long_one": 164})
        if len(problems) != 1 or "grew to 165" not in problems[0]:
            print("self-test: a grown allowed function was not refused:", problems)
            return 1
    print("self-test passed: a 165-line function is named, allowed at its length, refused once grown")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "include"))
    ap.add_argument("--limit", type=int, default=LIMIT)
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    problems, over = check(os.path.normpath(args.root), args.limit, load_allow())
    if args.list:
        for key, n in sorted(over, key=lambda x: -x[1]):
            print(f"{key} {n}")
        return 0
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} function(s) over {args.limit} lines")
        return 1
    print(f"1 passed, 0 failed: no function over {args.limit} lines beyond the {len(over)} listed in "
          f"{os.path.basename(ALLOW_FILE)}, none of them grown")
    return 0


if __name__ == "__main__":
    sys.exit(main())
