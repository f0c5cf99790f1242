"""The processes bench starts (a case's subprocess, torchrun's workers) get this checkout's gpuscope first on their
PYTHONPATH: the folder that holds the gpuscope package, not the package itself."""

from pathlib import Path

import gpuscope
from gpuscope.measure.distributed import launch
from gpuscope.measure.runner import suite


def test_children_put_the_folder_holding_this_gpuscope_first_on_their_path():
    here = Path(gpuscope.__file__).resolve().parent.parent
    for src in (suite._SRC, launch._SRC):
        assert Path(src) == here and (Path(src) / "gpuscope" / "__init__.py").is_file()
    assert suite.child_env()["PYTHONPATH"].split(":")[0] == str(here)
