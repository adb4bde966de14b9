"""The package's shape: no import circle, no import from a lower layer to a higher one, a --help for every verb."""

import ast
import sys
from pathlib import Path

import pytest

from avey_b.cli import COMMANDS, main

PACKAGE = Path(__file__).resolve().parents[1] / "avey_b"
#: Layers, lowest first. A module may import its own layer and the ones below, never one above. ``model`` is the
#: model and only the model; ``configs`` (configs as data) and ``utils`` are what the rest shares; ``inference`` is
#: the way in for inference (``Encoder``, ``LoadOptions``), which the rooms above may use; ``apps`` are the verbs
#: built on the model (serve, embed, export, ...), ``studies`` the paper's (ablation, analyze); ``cli`` dispatches
#: to every verb, and the package's
#: ``__init__`` is the front door that exports the model's and the inference's names.
LAYERS = [
    {"model"},
    {"configs"},
    {"utils"},
    {"inference"},
    {"data", "training", "evaluation", "finetuning", "benchmarking", "testing"},
    {"apps", "studies"},
    {"cli", "__init__"},
]
#: What the model's modules may import besides themselves: they are saved beside the weights and run where only
#: transformers is installed (safetensors is one of transformers' own dependencies).
MODEL_MAY_IMPORT = {"torch", "transformers", "safetensors"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    deps.add(sub if sub in modules else target)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names)
        graph[name] = {d for d in deps if d in modules and d != name}
    return graph


def _layer(module: str) -> int:
    top = module.split(".")[1] if "." in module else "__init__"
    return next(i for i, names in enumerate(LAYERS) if top in names)


def test_every_module_has_a_layer():
    for module in import_graph():
        _layer(module)  # StopIteration names a module nobody placed


def test_no_import_circle():
    graph = import_graph()
    state: dict[str, int] = {}

    def visit(node, path):
        state[node] = 1
        for dep in graph[node]:
            if state.get(dep) == 1:
                cycle = path[path.index(dep):] + [dep]
                pytest.fail("import circle: " + " -> ".join(cycle))
            if dep not in state:
                visit(dep, path + [dep])
        state[node] = 2

    for module in graph:
        if module not in state:
            visit(module, [module])


def external_imports(path: Path) -> set[str]:
    """The top-level names of the modules ``path`` imports absolutely (``torch`` for ``from torch import nn``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and not node.level:
            found.add((node.module or "").split(".")[0])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
    return found


def model_import_problems(folder: Path = PACKAGE / "model") -> list[str]:
    """Every import of a model module that is not the standard library, torch, transformers or the model itself."""
    problems = []
    for path in sorted(folder.rglob("*.py")):
        for name in sorted(external_imports(path)):
            if name in sys.stdlib_module_names or name in MODEL_MAY_IMPORT or name == "__future__":
                continue
            if name == "avey_b" and _model_only(path):
                continue
            problems.append(f"{path.relative_to(folder.parent)} imports {name}")
    return problems


def _model_only(path: Path) -> bool:
    """The package's own absolute imports in ``path`` all name ``avey_b.model``."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "avey_b":
            if not (node.module or "").startswith("avey_b.model"):
                return False
        elif isinstance(node, ast.Import) and any(a.name.split(".")[0] == "avey_b" and
                                                   not a.name.startswith("avey_b.model") for a in node.names):
            return False
    return True


def test_the_model_imports_only_the_standard_library_torch_transformers_and_itself():
    assert model_import_problems() == []
    graph = import_graph()
    outside = [f"{m} -> {d}" for m, deps in graph.items() if m.startswith("avey_b.model")
               for d in deps if not d.startswith("avey_b.model")]
    assert outside == []


@pytest.mark.parametrize("probe", ["from avey_b.utils import cluster", "import pyarrow", "from ..utils import files"])
def test_the_model_check_fails_on_a_probe_import(probe, tmp_path):
    """The check above is not vacuous: one import of an app, a utility or an extra into a model module fails it."""
    import shutil

    folder = tmp_path / "model"
    shutil.copytree(PACKAGE / "model", folder)
    layers = folder / "layers.py"
    layers.write_text(layers.read_text() + f"\n{probe}\n")
    if probe.startswith("from .."):
        assert _relative_leaves_the_model(layers)
    else:
        assert any("layers.py" in p for p in model_import_problems(folder))


def _relative_leaves_the_model(path: Path) -> bool:
    return any(isinstance(n, ast.ImportFrom) and n.level > 1 for n in ast.walk(ast.parse(path.read_text())))


def test_no_model_module_imports_relatively_from_outside_the_model():
    assert [p.name for p in (PACKAGE / "model").rglob("*.py") if _relative_leaves_the_model(p)] == []


def test_no_import_goes_up_a_layer():
    up = [f"{m} -> {d}" for m, deps in import_graph().items() for d in deps if _layer(d) > _layer(m)]
    assert up == []


@pytest.mark.parametrize("other", ["benchmarking", "training"])
def test_evaluation_does_not_import_another_subsystem(other):
    """Fine-tuning and its scores stand on the model and the shared modules below (file safety is records.py)."""
    graph = import_graph()
    bad = [f"{m} -> {d}" for m, deps in graph.items() if m.startswith("avey_b.evaluation")
           for d in deps if d.startswith(f"avey_b.{other}")]
    assert bad == []


def test_finetuning_does_not_import_the_paper_protocol():
    """The arrow runs from the paper's protocol (``evaluation``) to the general fine-tuning room, never back: the
    benchmark cells register into finetuning's task table (``avey_b.finetuning.registry``)."""
    graph = import_graph()
    bad = [f"{m} -> {d}" for m, deps in graph.items() if m.startswith("avey_b.finetuning")
           for d in deps if d.startswith("avey_b.evaluation")]
    assert bad == []
    assert any(d.startswith("avey_b.finetuning") for m, deps in graph.items() if m.startswith("avey_b.evaluation")
               for d in deps)


def test_no_test_or_benchmark_sets_a_package_setting_through_a_module_global():
    """Tuning values live in per-model settings (``config.execution``) or function arguments: a test or a benchmark
    that overwrites an UPPER_CASE global of the package changes every model in the process. Spies that replace a
    function are fine."""
    root = PACKAGE.parent
    found = []
    for path in [*root.joinpath("tests").rglob("*.py"), *root.joinpath("benchmarks").rglob("*.py")]:
        tree = ast.parse(path.read_text())
        modules = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                   and (n.module or "").startswith("avey_b") for a in n.names}
        modules |= {(a.asname or a.name).split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                    for a in n.names if a.name.startswith("avey_b")}
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else []
            for t in targets:
                if (isinstance(t, ast.Attribute) and t.attr.isupper() and isinstance(t.value, ast.Name)
                        and t.value.id in modules):
                    found.append(f"{path.relative_to(root)}:{node.lineno}: {t.value.id}.{t.attr} = ...")
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "setattr"
                    and len(node.args) >= 2 and isinstance(node.args[0], ast.Name) and node.args[0].id in modules
                    and isinstance(node.args[1], ast.Constant) and str(node.args[1].value).isupper()):
                found.append(f"{path.relative_to(root)}:{node.lineno}: setattr({node.args[0].id}, "
                             f"{node.args[1].value!r}, ...)")
    assert found == []


@pytest.mark.parametrize("verb", sorted(COMMANDS))
def test_every_verb_has_help(verb, capsys):
    with pytest.raises(SystemExit) as e:
        main([verb, "--help"])
    assert e.value.code == 0
    assert f"avey-b {verb}" in capsys.readouterr().out


def test_unknown_verb_lists_the_verbs(capsys):
    assert main(["pretrian"]) == 2
    err = capsys.readouterr().err
    assert "unknown command 'pretrian'" in err and all(v in err for v in COMMANDS)


def test_cli_errors_are_one_line_without_traceback_unless_debug(capsys, tmp_path):
    assert main(["pretrain", f"run_dir={tmp_path}", "train.max_step=3"]) == 1
    err = capsys.readouterr().err
    assert "avey-b pretrain: error: unknown config key 'train.max_step' (did you mean 'train.max_steps'?)" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 2
    with pytest.raises(KeyError, match="train.max_step"):
        main(["--debug", "pretrain", f"run_dir={tmp_path}", "train.max_step=3"])
    assert main(["finetune", "--task", "sst2", "--model", str(tmp_path / "nothing-here"), "--lr", "1e-3",
                 "--output-dir", str(tmp_path / "out"),
                 "--train-file", str(tmp_path / "t.tsv"), "--eval-file", str(tmp_path / "d.tsv")]) == 1
    assert "Traceback" not in capsys.readouterr().err


def test_progress_in_a_log_is_plain_lines_with_rate_and_eta():
    import io

    from avey_b.utils.progress import Progress

    log = io.StringIO()  # not a terminal: no carriage-return bar
    with Progress(4, "finetune sst2", unit="step", every=0.0, file=log) as p:
        for _ in range(4):
            p.update(loss=0.5)
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue() and len(lines) == 5  # one per update (every=0) and one at the end
    assert lines[1].startswith("finetune sst2: 2/4 steps (50%), ") and "steps/s, ETA " in lines[1]
    assert "loss 0.5" in lines[-1] and "4/4 steps (100%)" in lines[-1]


def test_eta_is_the_measured_rate_over_the_remaining_steps_or_the_time_cap_when_sooner(monkeypatch):
    import io

    from avey_b.utils import progress

    assert progress.eta(2.0, 100) == (50.0, False)
    assert progress.eta(2.0, 100, cap_left=30.0) == (30.0, True) and progress.eta(2.0, 100, 80.0) == (50.0, False)
    assert progress.eta(0.0, 100, 30.0) is None  # no rate yet: no estimate
    clock = [0.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])

    def run(seconds, steps=100, cap=None):
        """A run of 1,000 steps: a first step of 20 s (allocation, first calls: not counted), then ``steps`` more
        steps, step ``i`` taking ``seconds(i)``."""
        p = progress.Progress(1000, "pretrain", every=1e9, file=io.StringIO(), cap=cap)
        clock[0] += 20.0
        p.update()
        for step in range(2, steps + 2):
            clock[0] += seconds(step)
            p.update()
        return p

    # 1 s a step and an evaluation of 20 s every 10 steps: 99 steps in 299 s, the pauses counted (tqdm said 1 step/s)
    p = run(lambda i: 1.0 + (20.0 if i % 10 == 0 else 0.0), steps=99)
    assert p.eta_text() == "ETA 45m18s" and "0.331 steps/s, ETA 45m18s" in p.line()
    # 100 steps at 1 s, then the machine slows to 10 s a step: the last minute's rate, 0.1 step/s, says it
    p = run(lambda i: 1.0 if i <= 101 else 10.0, steps=110)
    assert p.eta_text() == "ETA 2h28m"  # 889 steps at 0.1 step/s
    # 1 s a step, 15 minutes' cap: 119 s gone, 781 s left, 900 steps to go: the cap stops the run first
    p = run(lambda i: 1.0, steps=99, cap=(15 * 60, "train.max_minutes=15"))
    assert p.eta_text() == "ETA 13m01s (train.max_minutes=15 stops the run at about step 881 of 1000)"

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    shown = Terminal()  # on a terminal, tqdm's bar shows this ETA, not tqdm's own estimate
    with progress.Progress(1000, "pretrain", file=shown) as p:
        for _ in range(101):
            clock[0] += 1.0
            p.update(loss=0.5)
        p.bar.refresh()
    assert "101/1000 [" in shown.getvalue()  # 899 steps left at 1 step/s:
    assert "ETA 14m59s, loss=0.5]" in shown.getvalue() and "<" not in shown.getvalue()


HELP_WITHOUT_TORCH = r"""
import sys
from avey_b import cli
import json
try:
    code = cli.main(json.loads(sys.stdin.read()))
except SystemExit as e:
    code = e.code
heavy = sorted(m for m in ("torch", "transformers", "numpy", "avey_b.model.auto") if m in sys.modules)
print(json.dumps({"code": code, "heavy": heavy}))
"""


@pytest.mark.parametrize("argv", [["--help"], *[[verb, "--help"] for verb in sorted(COMMANDS)],
                                  ["bench", "run", "--help"], ["niah", "evaluate", "--help"]],
                         ids=lambda a: " ".join(a))
def test_help_imports_neither_torch_nor_the_model(argv):
    """``avey-b --help`` and ``avey-b VERB --help`` answer without importing torch, transformers or the model (the
    import alone takes seconds): each verb's parser is built from its option declarations."""
    import json
    import subprocess

    proc = subprocess.run([sys.executable, "-c", HELP_WITHOUT_TORCH], input=json.dumps(argv), capture_output=True,
                          text=True, timeout=120)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == {"code": 0, "heavy": []}, proc.stderr[-2000:]


REGISTERED = r"""
import sys
{first}
assert "torch" not in sys.modules or {torch_allowed}, "import avey_b imported torch"
from transformers import AutoConfig, AutoModel
config = AutoConfig.for_model("avey-b", vocab_size=50, hidden_size=16, num_hidden_layers=1, split_size=4,
                              num_retrieved_splits=1)
print(type(AutoModel.from_config(config)).__name__,
      any(type(f).__name__ == "_RegisterWithTransformers" for f in sys.meta_path))
"""


@pytest.mark.parametrize("first,torch_allowed", [
    ("import avey_b", False),  # the package alone: no torch; the Auto classes register when they load
    ("import transformers\nimport avey_b", False),  # transformers' top level does not load the Auto classes
    ("from transformers import AutoTokenizer\nimport avey_b", True),  # they are loaded: registered at once
    ("from avey_b.model.streaming import DocumentState", True),  # a model module alone, halfway when they load
    ("from avey_b import AveyBForMaskedLM", True),  # a public name: avey_b.model.auto
    ("from avey_b import Encoder", True),
    ("import avey_b\nfrom transformers import pipeline", True),  # the Auto classes load halfway through modeling_utils
], ids=["package", "transformers-first", "auto-classes-first", "a-model-module", "a-public-name", "encoder",
        "pipeline"])
def test_importing_the_package_registers_avey_b_with_the_auto_classes_in_every_order(first, torch_allowed):
    """Every program imports the package the same way (the command line too): no torch until a name needs it, and
    ``model_type="avey-b"`` known to the Auto classes whatever was imported first; the registering finder leaves
    ``sys.meta_path`` once it has registered."""
    import subprocess

    script = REGISTERED.format(first=first, torch_allowed=torch_allowed)
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["AveyBModel", "False"]


def test_in_ci_a_test_skipped_for_a_missing_package_fails_and_other_skips_stay(tmp_path):
    """``.ci/run`` sets ``CI``: a module or test skipped by ``pytest.importorskip`` for a package that is not
    installed fails there (the package belongs in the dev extra), while a skip for another reason stays a skip."""
    import os
    import subprocess

    (tmp_path / "test_module_skip.py").write_text("import pytest\npytest.importorskip('no_such_package_x')\n"
                                                  "def test_a():\n    pass\n")
    (tmp_path / "test_skips.py").write_text("import pytest\ndef test_b():\n"
                                            "    pytest.importorskip('no_such_package_y')\n"
                                            "def test_c():\n    pytest.skip('no GPU here')\n")
    root = Path(__file__).resolve().parents[1]

    def run(ci: bool, name: str) -> str:
        env = {k: v for k, v in os.environ.items() if k != "CI"} | ({"CI": "true"} if ci else {})
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
                               "--rootdir", str(tmp_path), str(tmp_path / name)], cwd=root, env=env,
                              capture_output=True, text=True, timeout=300).stdout

    assert "1 failed, 1 skipped" in run(True, "test_skips.py")
    assert "2 skipped" in run(False, "test_skips.py")
    assert "put the package in the dev extra" in run(True, "test_module_skip.py")
    assert "1 skipped" in run(False, "test_module_skip.py")
