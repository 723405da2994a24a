#!/usr/bin/env python3
"""Checks the naming rule for lock contracts in src/ headers: a method whose
declaration says REQUIRES(<mutex>) ends in `Locked`, and a method that ends
in `Locked` says REQUIRES(...). The suffix tells a reader at every call site
what clang's thread-safety analysis (tools/thread_safety_check.py) checks at
compile time: the caller holds the lock.

Headers that annotate nothing (the writer library's plain std::mutex) are
not checked. Exits 1 with the offending declarations listed, 0 when every
header keeps the rule. Run by `meson test` as 'locked-names' (suite 'lint').
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
# A member function declaration: name, its parameters (one level of nested
# parentheses for default arguments), qualifiers, then the annotations.
DECL = re.compile(
    r"(?P<name>[A-Za-z_]\w*)\s*\((?P<params>(?:[^()]|\([^()]*\))*)\)"
    r"(?P<tail>(?:\s*(?:const|override|noexcept|final))*"
    r"(?:\s*(?:REQUIRES|REQUIRES_SHARED|EXCLUDES|ACQUIRE|RELEASE|NO_THREAD_SAFETY_ANALYSIS)"
    r"\((?:[^()]|\([^()]*\))*\)|\s*NO_THREAD_SAFETY_ANALYSIS)*)\s*(?:[;{]|=\s*(?:0|default|delete)\s*;)"
)
NOT_METHODS = {"if", "for", "while", "switch", "return", "sizeof", "decltype", "GUARDED_BY",
               "PT_GUARDED_BY", "REQUIRES", "EXCLUDES", "static_assert", "alignas"}


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def problems(path):
    text = strip_comments(path.read_text())
    out = []
    # Only code that states its lock contracts: the writer library (plain
    # std::mutex, a C ABI of its own) names its helpers by comment instead.
    if not re.search(r"\b(REQUIRES|GUARDED_BY)\(", text):
        return out
    for m in DECL.finditer(text):
        name, tail = m.group("name"), m.group("tail")
        if name in NOT_METHODS:
            continue
        requires = re.search(r"\bREQUIRES(_SHARED)?\(", tail) is not None
        line = text.count("\n", 0, m.start()) + 1
        where = f"{path.relative_to(ROOT)}:{line}: {name}"
        if requires and not name.endswith("Locked"):
            out.append(f"{where} requires a lock: name it {name}Locked")
        elif name.endswith("Locked") and not requires:
            out.append(f"{where} ends in Locked but declares no REQUIRES(...)")
    return out


def main():
    found = []
    for path in sorted((ROOT / "src").rglob("*.h")):
        found += problems(path)
    if found:
        print("\n".join(found))
        print(f"check_locked_names: {len(found)} declaration(s) break the Locked naming rule")
        return 1
    print("check_locked_names: every REQUIRES(...) method ends in Locked, and only those")
    return 0


if __name__ == "__main__":
    sys.exit(main())
