import os

import pytest

from surge.options import Options
from surge.observe.debug_dir import read_artifacts, unique_graph_name, write_artifact


def test_nothing_is_written_without_a_debug_dir(tmp_path):
    assert write_artifact(Options(), "g", "graph.py", "x") is None
    assert os.listdir(tmp_path) == []


def test_artifacts_land_in_one_folder_per_graph_with_index_files(tmp_path):
    options = Options(debug_dir=str(tmp_path))
    first, second = unique_graph_name("forward of f"), unique_graph_name("forward of f")
    assert first != second and " " not in first
    write_artifact(options, first, "source.py", "def f(x):\n    return x + 1\n")
    write_artifact(options, first, "graph.py", "graph():\n  %x = placeholder\n")
    write_artifact(options, first, "source.py", "def f(x):\n    return x + 2\n")  # replaced, listed once
    write_artifact(options, second, "kernels.py", "# kernel\n")
    assert (tmp_path / first / "source.py").read_text().endswith("x + 2\n")
    index = (tmp_path / first / "index.txt").read_text().splitlines()
    assert [line.split()[0] for line in index] == ["graph.py", "source.py"]
    assert "(2 lines)" in index[1] and "def f(x):" in index[1]
    assert (tmp_path / "index.txt").read_text().splitlines() == [first + "/", second + "/"]
    artifacts = read_artifacts(str(tmp_path))
    assert list(artifacts) == [first, second]
    assert artifacts[second] == {"kernels.py": "# kernel\n"}


@pytest.mark.parametrize("graph, name", [("g", "a/b.py"), ("g", "index.txt"), ("..", "x.py"), ("", "x.py")])
def test_names_that_would_escape_or_clobber_the_index_are_refused(tmp_path, graph, name):
    with pytest.raises(ValueError):
        write_artifact(Options(debug_dir=str(tmp_path)), graph, name, "x")
