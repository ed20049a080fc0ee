"""Counts a public C++ surface from Doxygen's XML (see surface.sh).

Prints, for the headers together and for each header: public types (a class
template's specialisations counted with it as one family), public functions,
overloads (functions beyond the first of a name) and `detail` names in public
signatures. -v lists the names behind each count.
"""

import collections
import glob
import os
import re
import sys
import xml.etree.ElementTree as ET


def text(e):
    return "".join(e.itertext()) if e is not None else ""


def header_of(e):
    loc = e.find("location")
    return os.path.basename(loc.get("file")) if loc is not None else "?"


def main():
    xml_dir = sys.argv[1]
    verbose = "-v" in sys.argv[2:]
    types = {}  # family name -> header
    funcs = collections.defaultdict(int)  # qualified name -> overloads
    func_header = {}
    detail = []  # (header, what)
    for path in sorted(glob.glob(os.path.join(xml_dir, "*.xml"))):
        root = ET.parse(path).getroot()
        for c in root.findall("compounddef"):
            kind = c.get("kind")
            name = text(c.find("compoundname"))
            if not name.startswith("sluice") or "detail" in name:
                continue
            if kind in ("class", "struct", "union"):
                if c.get("prot") not in (None, "public"):
                    continue
                types.setdefault(re.sub(r"<.*", "", name), header_of(c))
                for b in c.findall("basecompoundref"):
                    if b.get("prot") == "public" and "detail" in (b.text or ""):
                        detail.append((header_of(c), f"{name} : public {b.text}"))
            elif kind != "namespace":
                continue
            for sec in c.findall("sectiondef"):
                sk = sec.get("kind")
                if sk.startswith(("private", "protected", "package")):
                    continue
                for m in sec.findall("memberdef"):
                    if m.get("prot") not in (None, "public"):
                        continue
                    mk = m.get("kind")
                    mn = text(m.find("name"))
                    owner = name  # a specialisation's members are its own names
                    if mk == "enum":
                        types.setdefault(f"{owner}::{mn}", header_of(m))
                    elif mk == "function":
                        funcs[f"{owner}::{mn}"] += 1
                        func_header.setdefault(f"{owner}::{mn}", header_of(m))
                    sig = f"{text(m.find('type'))} {text(m.find('argsstring'))}"
                    if re.search(r"\bdetail::", sig):
                        detail.append((header_of(m), f"{owner}::{mn} {sig.strip()}"))

    by_header = collections.defaultdict(lambda: [0, 0, 0, 0])
    for t, h in types.items():
        by_header[h][0] += 1
    for f, n in funcs.items():
        h = func_header[f]
        by_header[h][1] += n
        by_header[h][2] += n - 1
    for h, _ in detail:
        by_header[h][3] += 1
    total = [sum(v[i] for v in by_header.values()) for i in range(4)]
    print(f"{'header':<14} {'types':>6} {'functions':>10} {'overloads':>10} {'detail':>7}")
    for h in sorted(by_header):
        v = by_header[h]
        print(f"{h:<14} {v[0]:>6} {v[1]:>10} {v[2]:>10} {v[3]:>7}")
    print(f"{'all':<14} {total[0]:>6} {total[1]:>10} {total[2]:>10} {total[3]:>7}")
    if verbose:
        print("\ntypes:", ", ".join(sorted(types)))
        print("\noverloaded:", ", ".join(f"{f} x{n}" for f, n in sorted(funcs.items()) if n > 1))
        print("\ndetail in public signatures:")
        for h, what in detail:
            print(f"  {h}: {what}")


if __name__ == "__main__":
    main()
