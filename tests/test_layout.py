"""The layout rules a reader relies on, checked over the source tree (house-style: one room per thing)."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUTSIDE_THE_EDGE = [
    "schemas",
    "runtime",
    "producers",
    "preprocess_app",
    "gpu_consumer",
    "model_repository",
    "model_import",
    "jobs",
    "reuse",
    "results",
]
# The client handles kafka_io's factories make: held and passed back to kafka_io, never called.
OPAQUE_HANDLES = {("kafka_io.clients", name) for name in ("AdminClient", "Consumer", "Producer")}
CONFLUENT_MODULES = ("confluent_kafka", "cimpl")  # cimpl: where its C types say they are defined

# Imports flow one way: jobs (the control plane) -> model_import, results (the sink) -> stages
# (producers, preprocess_app, gpu_consumer) -> kafka_io -> schemas, with model_repository (the
# repository's layout and each version's config) and runtime (the process's own: metrics
# endpoint, children, CPUs, heap) below all of them.
# Each package may import only the packages of ours named here (its own modules aside); the
# stages do not import each other. Exceptions would be listed here with their reason: none exist.
STAGES = ["producers", "preprocess_app", "gpu_consumer"]
MAY_IMPORT: dict[str, set[str]] = {
    "runtime": set(),
    "schemas": set(),
    # the repository's folders and each version's config.json: read by both stages, so below them
    "model_repository": set(),
    "kafka_io": {"schemas", "runtime"},
    **{stage: {"kafka_io", "schemas", "runtime", "model_repository"} for stage in STAGES},
    # the lookup of reusable results is the preprocess stage's, before it tokenizes or decodes
    "preprocess_app": {"kafka_io", "schemas", "runtime", "model_repository", "reuse"},
    # the key a result is cached under: the GPU stage's engine joins the record's reuse key
    "gpu_consumer": {"kafka_io", "schemas", "runtime", "model_repository", "reuse"},
    # models into the repository: the GPU stage's ONNX Runtime engine checks each export
    "model_import": {"gpu_consumer", "model_repository", "reuse"},  # reuse: the digests an import records
    # the reuse key, index and store: pure, beside the stages, so any of them can take it
    "reuse": {"schemas", "model_repository"},
    # a job's results read, ordered, spilled and written: never the control plane (the job is handed in)
    "results": {"producers", "kafka_io", "schemas", "runtime", "model_repository"},
    # reuse: the results cache `nearline run` keeps on disk between runs (jobs/launch/kept_cache.py)
    "jobs": {*STAGES, "model_import", "model_repository", "results", "reuse", "kafka_io", "schemas", "runtime"},
}
OURS = {*MAY_IMPORT, "bench", "tests"}


def modules(packages: list[str]) -> list[Path]:
    return sorted(p for package in packages for p in (ROOT / package).rglob("*.py"))


def taken_through_kafka_io(node: ast.ImportFrom) -> list[tuple[str, str]]:
    """(name, the module it is defined in) for each name a `from kafka_io... import` takes: a
    module imported by name counts as defined in itself."""
    module = importlib.import_module(node.module or "")
    found = []
    for alias in node.names:
        value = getattr(module, alias.name, None)
        origin = value.__name__ if inspect.ismodule(value) else getattr(value, "__module__", None)
        found.append((alias.name, origin or ""))
    return found


def confluent_names_imported(path: Path) -> list[str]:
    """Every name a module takes from confluent_kafka, directly or through a kafka_io module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] == "confluent_kafka"]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] == "confluent_kafka":
                found += [f"{node.module}.{a.name}" for a in node.names]
            elif node.module.split(".")[0] == "kafka_io":
                found += [
                    f"{node.module}.{name} (from {origin})"
                    for name, origin in taken_through_kafka_io(node)
                    if origin.split(".")[0] in CONFLUENT_MODULES and (node.module, name) not in OPAQUE_HANDLES
                ]
    return found


def our_packages_imported(path: Path) -> set[str]:
    """The top-level packages of ours a module imports anywhere in it (function bodies included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        found |= {name.split(".")[0] for name in names} & OURS
    return found


def upward_imports(package: str, paths: list[Path]) -> dict[str, list[str]]:
    """Each module of `package` that imports a package of ours it may not, with what it imports."""
    allowed = MAY_IMPORT[package] | {package}
    return {
        str(p.relative_to(ROOT) if p.is_relative_to(ROOT) else p.name): sorted(bad)
        for p in paths
        if (bad := our_packages_imported(p) - allowed)
    }


def test_imports_flow_one_way_in_every_package() -> None:
    offenders = {package: found for package in MAY_IMPORT if (found := upward_imports(package, modules([package])))}
    assert offenders == {}


def test_the_check_sees_a_stage_importing_the_control_plane_or_another_stage(tmp_path: Path) -> None:
    upward = tmp_path / "upward.py"
    upward.write_text(
        "from kafka_io.settings import KafkaSettings\n"
        "def late() -> None:\n"
        "    import jobs.cancellations\n"
        "    from preprocess_app import text\n"
    )
    assert upward_imports("gpu_consumer", [upward]) == {"upward.py": ["jobs", "preprocess_app"]}
    assert upward_imports("jobs", [upward]) == {}
    assert upward_imports("kafka_io", [upward]) == {"upward.py": ["jobs", "preprocess_app"]}
    assert upward_imports("results", [upward]) == {"upward.py": ["jobs", "preprocess_app"]}
    assert upward_imports("producers", [upward]) == {"upward.py": ["jobs", "preprocess_app"]}


def module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_imports(root: Path, packages: list[str]) -> dict[str, set[str]]:
    """Each module of the packages under root and the modules of theirs it imports anywhere in it
    (function bodies included: a lazy import still ties the two). `from a.b import c` is the
    module a.b.c where there is one, else a.b; a module's own package, which Python imports
    first anyway, is not counted as one of its imports."""
    paths = {module_name(root, p): p for package in packages for p in sorted((root / package).rglob("*.py"))}

    def ours(name: str) -> str | None:
        parts = name.split(".")
        return next((".".join(parts[:i]) for i in range(len(parts), 0, -1) if ".".join(parts[:i]) in paths), None)

    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        found: set[str | None] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {ours(a.name) for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found |= {ours(f"{node.module}.{a.name}") for a in node.names}
        graph[module] = {m for m in found if m is not None and m != module and not module.startswith(f"{m}.")}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle of modules importing each other (the strongly connected components of more than
    one module, Tarjan's algorithm), each as a path that closes on its first module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            members = stack[stack.index(v) :]
            del stack[stack.index(v) :]
            if len(members) > 1:
                cycles.append(close_cycle(graph, sorted(members)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def close_cycle(graph: dict[str, set[str]], members: list[str]) -> list[str]:
    """One import path from the first member back to it, through the others (breadth first)."""
    start, inside = members[0], set(members)
    paths = [[start]]
    while paths:
        path = paths.pop(0)
        for w in sorted(graph[path[-1]] & inside):
            if w == start:
                return [*path, start]
            if w not in path:
                paths.append([*path, w])
    return members


def test_no_two_modules_import_each_other() -> None:
    cycles = import_cycles(module_imports(ROOT, list(MAY_IMPORT)))
    assert not cycles, "modules that import each other, directly or round a loop (move what both need apart):\n" + (
        "\n".join(" -> ".join(cycle) for cycle in cycles)
    )


def test_the_check_sees_a_cycle_through_a_lazy_import_and_not_a_package_and_its_module(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("from pkg.a import run\n")
    (tmp_path / "pkg" / "a.py").write_text("from pkg import b\n")
    (tmp_path / "pkg" / "b.py").write_text("def late() -> None:\n    from pkg.c import x\n")
    (tmp_path / "pkg" / "c.py").write_text("import pkg.a\nx = 1\n")
    graph = module_imports(tmp_path, ["pkg"])
    assert graph["pkg.a"] == {"pkg.b"} and graph["pkg"] == {"pkg.a"}
    assert import_cycles(graph) == [["pkg.a", "pkg.b", "pkg.c", "pkg.a"]]


def misplaced_test_modules(tests: Path) -> list[str]:
    """Modules under tests/ that break its one naming rule: a test module is test_*.py (beside
    conftest.py and __init__.py), every other module is in tests/support/, and no test module
    imports another test module."""
    found = []
    for path in sorted(tests.rglob("*.py")):
        relative = path.relative_to(tests)
        if relative.parts[0] == "support":
            continue
        if not path.name.startswith("test_") and path.name not in ("conftest.py", "__init__.py"):
            found.append(f"{relative}: a helper outside tests/support/")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            module = node.module if isinstance(node, ast.ImportFrom) else None
            if module and module.split(".")[0] == "tests" and module.split(".")[-1].startswith("test_"):
                found.append(f"{relative}: imports the test module {module}")
    return found


def test_tests_follow_one_naming_rule() -> None:
    assert misplaced_test_modules(ROOT / "tests") == []


def test_the_check_sees_a_helper_outside_support_and_a_test_importing_a_test(tmp_path: Path) -> None:
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "pipeline.py").write_text("")
    (tmp_path / "jobs" / "test_a.py").write_text("from tests.jobs.test_b import rows\n")
    assert misplaced_test_modules(tmp_path) == [
        "jobs/pipeline.py: a helper outside tests/support/",
        "jobs/test_a.py: imports the test module tests.jobs.test_b",
    ]


def runtime_names_through_kafka_io(path: Path) -> list[str]:
    """Every name a module takes from kafka_io that is the process runtime's (runtime/): one there
    is taken from runtime/ itself, never through a kafka_io module that imports it."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "kafka_io":
            found += [
                f"{node.module}.{name} (from {origin})"
                for name, origin in taken_through_kafka_io(node)
                if origin.split(".")[0] == "runtime"
            ]
    return found


def test_nothing_takes_the_process_runtime_through_kafka_io() -> None:
    packages = [*OUTSIDE_THE_EDGE, "kafka_io", "bench", "tests"]
    offenders = {str(p.relative_to(ROOT)): n for p in modules(packages) if (n := runtime_names_through_kafka_io(p))}
    assert offenders == {}


def test_the_check_sees_the_runtime_taken_through_kafka_io(tmp_path: Path) -> None:
    leaky = tmp_path / "leaky.py"
    leaky.write_text(
        "from kafka_io.metrics import start_server\n"
        "from kafka_io.broker import die_with_parent, EmbeddedBroker\n"
        "from runtime.cpus import usable_cpus\n"
    )
    assert runtime_names_through_kafka_io(leaky) == [
        "kafka_io.metrics.start_server (from runtime.metrics_http)",
        "kafka_io.broker.die_with_parent (from runtime.children)",
    ]


def test_no_module_outside_kafka_io_takes_a_confluent_type() -> None:
    offenders = {str(p.relative_to(ROOT)): n for p in modules(OUTSIDE_THE_EDGE) if (n := confluent_names_imported(p))}
    assert offenders == {}


def test_the_check_sees_a_confluent_type_taken_through_kafka_io(tmp_path: Path) -> None:
    leaky = tmp_path / "leaky.py"
    leaky.write_text("from kafka_io.events import Message\nfrom kafka_io.clients import Producer\n")
    assert confluent_names_imported(leaky) == ["kafka_io.events.Message (from confluent_kafka.cimpl)"]


# A function that takes more than this many parameters takes a frozen settings object instead
# (GpuWorkerSettings, JobSettings, WaitRules...). A CLI command's function takes one parameter per
# option, as click passes them; so does the wrapper that gathers a command's shared options.
MAX_PARAMETERS = 8


def _is_command(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    def name(decorator: ast.expr) -> str:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        return target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")

    return any(name(d) in ("command", "group", "wraps") for d in node.decorator_list)


def long_signatures(root: Path, packages: list[str]) -> list[str]:
    """Functions of more than MAX_PARAMETERS parameters (self and cls aside), CLI commands aside."""
    found = []
    for path in sorted(p for package in packages for p in (root / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            args = node.args
            names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
            count = len(names) - (names[:1] in (["self"], ["cls"]))
            in_cli = path.relative_to(root).parts[:2] == ("jobs", "cli")
            if count > MAX_PARAMETERS and not (in_cli and _is_command(node)):
                found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({count})")
    return found


def test_no_function_outside_the_cli_commands_takes_more_than_eight_parameters() -> None:
    assert long_signatures(ROOT, [*MAY_IMPORT, "bench"]) == [], "take a frozen settings object instead"


def test_the_check_counts_parameters_and_lets_a_cli_command_take_one_per_option(tmp_path: Path) -> None:
    nine = ", ".join(f"a{i}: int" for i in range(9))
    (tmp_path / "jobs" / "cli").mkdir(parents=True)
    (tmp_path / "jobs" / "run.py").write_text(
        f"def wide({nine}) -> None: ...\nclass C:\n    def method(self, {', '.join(f'a{i}' for i in range(8))}): ...\n"
    )
    (tmp_path / "jobs" / "cli" / "cmd.py").write_text(
        f"@click.command()\ndef cmd({nine}) -> None: ...\ndef helper(*, {nine}) -> None: ...\n"
    )
    assert long_signatures(tmp_path, ["jobs"]) == ["jobs/cli/cmd.py:3 helper (9)", "jobs/run.py:1 wide (9)"]


# A module a reader takes in at one sitting, a function that reads on one screen: past these, a
# module holds two things and a function does two steps (house-style: small modules).
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 79


def oversized(root: Path, packages: list[str]) -> list[str]:
    """Modules over MAX_MODULE_LINES lines and functions over MAX_FUNCTION_LINES, counted from their
    `def` (a click command's options, in its decorators, are not its body)."""
    found = []
    for path in sorted(p for package in packages for p in (root / package).rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(root)
        if (lines := len(text.splitlines())) > MAX_MODULE_LINES:
            found.append(f"{where}: {lines} lines")
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            if (length := (node.end_lineno or node.lineno) - node.lineno + 1) > MAX_FUNCTION_LINES:
                found.append(f"{where}:{node.lineno} {node.name}: {length} lines")
    return found


def test_no_product_module_or_function_is_oversized() -> None:
    assert oversized(ROOT, list(MAY_IMPORT)) == [], "split it by what it holds, or into steps"


def test_the_size_check_sees_a_long_module_and_a_long_function(tmp_path: Path) -> None:
    (tmp_path / "jobs").mkdir()
    body = "".join(f"    x{i} = {i}\n" for i in range(79))
    (tmp_path / "jobs" / "long.py").write_text(f"def fits() -> None:\n{body[: -len('    x78 = 78') - 1]}\n")
    (tmp_path / "jobs" / "longer.py").write_text(f"def steps() -> None:\n{body}" + "\n" * 330)
    assert oversized(tmp_path, ["jobs"]) == ["jobs/longer.py: 410 lines", "jobs/longer.py:1 steps: 80 lines"]


def unlisted_packages(root: Path, listed: set[str], packages: list[str]) -> list[str]:
    """The packages (folders with an __init__.py) under `packages` that setuptools is not told of:
    an install from the wheel would lack them."""
    found = {
        ".".join(init.parent.relative_to(root).parts)
        for package in packages
        for init in (root / package).rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    return sorted(found - listed)


def test_every_product_package_is_in_the_wheel() -> None:
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"])
    assert unlisted_packages(ROOT, listed, list(MAY_IMPORT)) == [], "add it to [tool.setuptools] packages"


def test_the_check_sees_a_package_left_out_of_the_wheel(tmp_path: Path) -> None:
    (tmp_path / "jobs" / "new").mkdir(parents=True)
    (tmp_path / "jobs" / "__init__.py").write_text("")
    (tmp_path / "jobs" / "new" / "__init__.py").write_text("")
    assert unlisted_packages(tmp_path, {"jobs"}, ["jobs"]) == ["jobs.new"]
