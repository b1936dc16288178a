"""Print go.mod replace lines that re-point k8s.io/kubernetes's ./staging modules to published versions.

Usage: gen_staging_replaces.py KUBERNETES_GOMOD_FILE STAGING_VERSION
The kubernetes module's go.mod replaces every staging module with a local ./staging path, which a
dependent module cannot use; the published module of the same release is the same code.
"""

import re
import sys


def main() -> None:
    gomod_path, staging_version = sys.argv[1], sys.argv[2]
    text = open(gomod_path, encoding="utf-8").read()
    pattern = re.compile(r"^\s*(k8s\.io/[\w.-]+)\s+=>\s+\./staging/src/\1\s*$", re.MULTILINE)
    modules = sorted(set(pattern.findall(text)))
    if not modules:
        sys.exit(f"no ./staging replace lines found in {gomod_path}")
    print("replace (")
    for module in modules:
        print(f"\t{module} => {module} {staging_version}")
    print(")")


if __name__ == "__main__":
    main()
