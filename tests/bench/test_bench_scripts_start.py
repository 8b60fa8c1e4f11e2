"""Every bench script starts: its imports resolve and its ``--help`` answers.

The bench scripts are run as ``python bench/x.py``, with ``bench/`` first on ``sys.path`` and
the repository root inserted by the scripts themselves. A bench module named like one of the
design card's root folders (``ingest/``, ``storage/`` …) is shadowed by that package, which
broke ``bench/ingest_up.py`` once without any test noticing; this test runs each script the
way a user does, in one interpreter so the heavy imports are paid once.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"
PARTS = ("ingest", "storage", "analytics", "dashboard", "migrations", "tpmledger", "tests")

# The runner: each script as __main__ with --help, from bench/ as the user's working folder
# would put it first on sys.path; a script that is a library of the others (no __main__
# block) is imported by the scripts that use it.
RUNNER = """
import runpy, sys
failures = []
for path in sys.argv[1:]:
    saved_path, saved_modules = list(sys.path), set(sys.modules)
    sys.argv = [path, "--help"]
    sys.path.insert(0, str(__import__("pathlib").Path(path).parent))
    try:
        runpy.run_path(path, run_name="__main__")
        failures.append(f"{path}: --help did not exit")
    except SystemExit as stop:
        if stop.code not in (0, None):
            failures.append(f"{path}: --help exited {stop.code!r}")
    except BaseException as error:
        failures.append(f"{path}: {type(error).__name__}: {error}")
    finally:
        sys.path[:] = saved_path
        for name in set(sys.modules) - saved_modules:
            origin = getattr(sys.modules[name], "__file__", None) or ""
            if origin.startswith(str(__import__("pathlib").Path(path).parent)):
                sys.modules.pop(name)  # the bench's own modules: each script imports its own
sys.stderr.write("".join(f"FAILED {line}\\n" for line in failures))
"""


def bench_scripts() -> list[Path]:
    return sorted(
        path for path in BENCH.glob("*.py") if "__main__" in path.read_text(encoding="utf-8")
    )


def test_no_bench_script_is_named_like_a_package_folder() -> None:
    shadowed = [path.name for path in BENCH.glob("*.py") if path.stem in PARTS]
    assert shadowed == [], f"bench scripts shadowed by a package of the same name: {shadowed}"


def test_every_bench_script_answers_help() -> None:
    scripts = bench_scripts()
    assert len(scripts) > 20
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, *map(str, scripts)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    failed = [line for line in done.stderr.splitlines() if line.startswith("FAILED ")]
    assert done.returncode == 0, done.stderr[-3000:]
    assert failed == [], "\n".join(failed)
