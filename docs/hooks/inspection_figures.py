"""Make the pictures of docs/inspection.md by running the page's python blocks as written (in a
temporary folder) and copying the figures they save to docs/img/inspection-<name>.png.

    PYTHONPATH=$PWD JAX_PLATFORMS=cpu python docs/hooks/inspection_figures.py
"""

import os
import re
import shutil
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "inspection.md"
FIGURES = {"pd_x0.png": "pd-x0", "pd_colour.png": "pd-colour", "pd_pair.png": "pd-pair",
           "importance.png": "importance"}


def main() -> None:
    blocks = re.findall(r"^```python\n(.*?)^```", PAGE.read_text(), flags=re.S | re.M)
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        try:
            namespace: dict = {}
            for block in blocks:
                exec(compile(block, str(PAGE), "exec"), namespace)
        finally:
            os.chdir(here)
        for saved, name in FIGURES.items():
            shutil.copy(Path(tmp) / saved, ROOT / "docs" / "img" / f"inspection-{name}.png")


if __name__ == "__main__":
    main()
