"""The process around every command, and ``check`` and ``predict`` themselves, without typer.

:func:`run_process` is what every ``schedsim`` process runs its command in (streams that never fail on what is
printed, Ctrl-C, a closed pipe, a bug's report; OpenBLAS threads, freed memory and the garbage collector).
:func:`check` and :func:`predict` are the two commands' bodies: :mod:`schedsim.cli` declares them to typer, with
their help, and :func:`fast_command` runs them straight from a plain command line
(``schedsim check FILE``, ``schedsim predict FILE --no-gantt --out DIR``, ...) without importing typer: typer's
import and the click command and validators it builds for the parameters are ~10% of the CPU of a cold
``check`` (``docs/validation.md``, cold start). Any other command line (help, a root option, an option's
``=`` form, a value that needs checking, a usage error) goes to typer, as before; what a command prints and
its exit code are the same either way (``tests/cli/test_argv_fast.py`` parses command lines both ways).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from schedsim.cliutil import DEFAULT_PROFILE, OutFormat, call_handled
from schedsim.errors import printable

if TYPE_CHECKING:
    from schedsim.network.explain import ExplainRow
    from schedsim.sim.metrics import Metrics
    from schedsim.sim.timeline import Timeline

__all__ = ["Durations", "Launch", "check", "fast_command", "keep_freed_memory", "load", "parse_plain", "predict",
           "run_process", "set_max_ops"]


class Durations(str, Enum):
    modeled = "modeled"
    recorded = "recorded"


class Launch(str, Enum):
    eager = "eager"
    cuda_graph = "cuda_graph"


def _gpu_model(name: str | None) -> str | None:
    """``--gpu-model``: one of :data:`schedsim.hardware.profile.GPU_MODELS`, else (``sharing``, retired, or a
    misspelling) the ProfileError of :func:`schedsim.hardware.profile.check_gpu_model` (``error: --gpu-model: ...``,
    exit 2)."""
    if name is not None:
        from schedsim.hardware.profile import check_gpu_model

        check_gpu_model(name, "--gpu-model")
    return name


def set_max_ops(n: int | None) -> None:
    """Apply ``--max-ops`` through the environment, so executor ranks started from here see it too."""
    import os

    if n is not None:
        os.environ["SCHEDSIM_MAX_OPS"] = str(n)


def load(file: Path, sets: list[str] | None) -> Any:
    """The schedule ``file`` with ``--set`` overrides ``sets`` (:func:`schedsim.spec.loader.load_schedule`)."""
    from schedsim.spec.loader import load_schedule
    from schedsim.spec.overrides import parse_overrides

    return load_schedule(file, parse_overrides(sets or []))


def check(file: Path, set_: list[str] | None = None, max_ops: int | None = None) -> None:
    """``schedsim check``: validate a schedule (language rules and DAG checks) without simulating; one ``ok:``
    line on stdout, the warnings' kinds on stderr. Raises what loading and lowering raise (SchedsimError)."""
    set_max_ops(max_ops)
    spec = load(file, set_)
    from schedsim.api import lower_spec

    prog = lower_spec(spec, file)  # the checked Program; no networkx graph is needed here
    from schedsim.notes import summarize

    for line in summarize(prog.warnings):  # one line per kind of warning
        print(printable(line, 2000, newlines=True), file=sys.stderr)
    print(f"ok: {printable(file)}: {printable(spec.name, 200)}: {prog.N} ops on {prog.world_size} rank(s), "
          f"{len(prog.coll_keys)} collective(s), {len(prog.p2p)} send/recv pair(s)")


def predict(file: Path, profile: str = DEFAULT_PROFILE, set_: list[str] | None = None, out: Path | None = None,
            fmt: OutFormat = OutFormat.table, launch: Launch | None = None, gantt: bool = True,
            all_ranks: bool = False, gpu_model: str | None = None, durations: Durations | None = None,
            max_connections: int | None = None, model_executor: bool = False, iteration_gap_ms: float = 0.0,
            max_ops: int | None = None, trace: bool | None = None, timed_graph: bool = False, explain: bool = False,
            full_ranks: bool = False, svg: bool | None = None) -> None:
    """``schedsim predict`` (its options are documented by :func:`schedsim.cli.predict`): simulate a schedule,
    write the output folder (:func:`schedsim.api.predict_to_dir`) and print the summary. Raises what those raise
    (SchedsimError, OSError)."""
    from schedsim._gc import paused_gc
    from schedsim.api import predict_to_dir

    set_max_ops(max_ops)
    prof: Any = profile
    if timed_graph:
        from schedsim.hardware.profile import load_profile

        base = load_profile(profile)
        prof = base.timed_graph()
        if prof is base:
            print(f"note: profile {base.name!r} has no launch.graph_timing_event_us (not measured): --timed-graph "
                  "changes nothing (schedsim calibrate measures it)", file=sys.stderr)
    rows: list[ExplainRow] | None = [] if explain else None
    with paused_gc():  # also through the summary: its tables walk the whole timeline
        tl, metrics, paths = predict_to_dir(file, set_, prof, out, launch.value if launch else None, gantt, trace,
                                            explain=rows, svg=svg,
                                            gpu_model=_gpu_model(gpu_model),
                                            durations=durations.value if durations else None,
                                            max_connections=max_connections, model_executor=model_executor,
                                            iteration_gap_s=iteration_gap_ms * 1e-3, full_ranks=full_ranks)
        if timed_graph and prof is not profile and prof.is_timed_graph and tl.launch != "cuda_graph":
            print(f"note: --timed-graph changes nothing in {tl.launch} mode (only a CUDA graph is timed by event "
                  "nodes)", file=sys.stderr)
        print_predict(tl, metrics, paths, fmt, all_ranks, rows)


def print_predict(tl: Timeline, metrics: Metrics, paths: list[Path], fmt: OutFormat, all_ranks: bool,
                  explain: list[ExplainRow] | None = None) -> None:
    """What ``predict`` prints: the warnings' kinds on stderr; the summary tables (or, ``fmt`` json, one JSON
    document), the peak memory, the NCCL choices of ``explain`` and the files written, on stdout."""
    import json

    from schedsim.notes import summarize

    for line in summarize(tl.meta.get("warnings", [])):  # one line per kind of warning
        print(printable(line, 2000, newlines=True), file=sys.stderr)
    if fmt == OutFormat.json:
        extra = {"training": tl.meta["training"]} if "training" in tl.meta else {}
        print(json.dumps({"schedule": tl.schedule, "profile": tl.profile, "metrics": metrics.to_dict(), **extra,
                          "files": [str(p) for p in paths], **({"explain": explain} if explain is not None else {})},
                         indent=1))
        return
    from schedsim.report.summary import print_summary

    print_summary(tl, metrics, all_ranks=all_ranks)
    if metrics.pipeline is not None:
        from schedsim.report.summary import print_pipeline

        print_pipeline(metrics.pipeline, all_ranks=all_ranks)
    if "training" in tl.meta:
        from schedsim.report.training import print_training

        print_training(tl.meta["training"])
    if metrics.memory_peak is not None:
        from schedsim.report.summary import fmt_bytes, fmt_time

        mp = metrics.memory_peak
        print(f"peak memory {fmt_bytes(mp.bytes)} on rank {mp.rank} at {fmt_time(mp.t_s)}, "
              f"when {printable(mp.op or 'the step starts', 200)} allocates")
    if explain == []:
        print("\ncommunication: none (the schedule has no collective, send or recv)")
    elif explain is not None:
        from schedsim.network.explain import format_explain

        print("\ncommunication (NCCL algorithm/protocol chosen, time alone):\n" + format_explain(explain))
    folders = list(dict.fromkeys(str(p.parent) for p in paths))
    print(f"wrote {', '.join(printable(f) for f in folders)}{'/' if len(folders) == 1 else ''}: "
          + ", ".join(printable(p.name) for p in paths))


# --- the command line without typer ------------------------------------------------------------------------------

#: The options :func:`fast_command` reads, per command: option → (parameter, what it takes). "flag" options set
#: the parameter to the value given; "text" takes the next word as it is, "path" as a Path, "list" appends it
#: (repeatable), "count" takes a whole number ≥ 1 written in at most 18 ASCII digits, an Enum class one of its
#: values. As typer's options (:mod:`schedsim.cli`) for the same names; anything else, typer parses.
_OPTIONS: dict[str, dict[str, tuple[str, Any]]] = {
    "check": {"--set": ("set_", "list"), "--max-ops": ("max_ops", "count")},
    "predict": {
        "--profile": ("profile", "text"), "-p": ("profile", "text"), "--set": ("set_", "list"),
        "--out": ("out", "path"), "-o": ("out", "path"), "--format": ("fmt", OutFormat),
        "--launch": ("launch", Launch), "--gantt": ("gantt", ("flag", True)), "--no-gantt": ("gantt", ("flag", False)),
        "--all-ranks": ("all_ranks", ("flag", True)), "--gpu-model": ("gpu_model", "text"),
        "--durations": ("durations", Durations), "--model-executor": ("model_executor", ("flag", True)),
        "--max-ops": ("max_ops", "count"), "--trace": ("trace", ("flag", True)),
        "--no-trace": ("trace", ("flag", False)), "--timed-graph": ("timed_graph", ("flag", True)),
        "--explain": ("explain", ("flag", True)), "--full-ranks": ("full_ranks", ("flag", True)),
        "--svg": ("svg", ("flag", True)), "--no-svg": ("svg", ("flag", False)),
    },
}
_COMMANDS: dict[str, Callable[..., None]] = {"check": check, "predict": predict}


def parse_plain(argv: list[str]) -> tuple[Callable[..., None], dict[str, Any]] | None:
    """``argv`` (the words after the program's name) as (command, keyword arguments) where it is a plain
    ``check`` or ``predict`` command line: the command's name first, one schedule file, and options of
    :data:`_OPTIONS`, each value its own word not starting with ``-``. None for anything else (typer's to parse)."""
    if not argv or argv[0] not in _COMMANDS:
        return None
    table = _OPTIONS[argv[0]]
    kw: dict[str, Any] = {}
    files: list[str] = []
    words = iter(argv[1:])
    for word in words:
        if not word.startswith("-"):
            files.append(word)
            continue
        opt = table.get(word)
        if opt is None:
            return None  # --help, --opt=value, -oDIR, --, -, a typo: typer's
        name, kind = opt
        if isinstance(kind, tuple):
            kw[name] = kind[1]
            continue
        value = next(words, None)
        if value is None or value.startswith("-"):
            return None
        if kind == "list":
            kw.setdefault(name, []).append(value)
        elif kind == "text":
            kw[name] = value
        elif kind == "path":
            kw[name] = Path(value)
        elif kind == "count":
            if not (value.isascii() and value.isdigit() and len(value) <= 18 and int(value) >= 1):
                return None  # 19+ digits: typer's (int() refuses over 4,300: sys.get_int_max_str_digits)
            kw[name] = int(value)
        else:
            if value not in kind._value2member_map_:
                return None
            kw[name] = kind(value)
    if len(files) != 1:
        return None
    return _COMMANDS[argv[0]], {"file": Path(files[0]), **kw}


def fast_command(argv: list[str]) -> Callable[[], None] | None:
    """The command of a plain ``check`` or ``predict`` command line (:func:`parse_plain`), to run in
    :func:`run_process`, exiting as typer's would (0, or the code of the error it printed); None for any other
    command line, and while a shell asks for completions (``_<PROG>_COMPLETE`` set), which typer answers."""
    import os

    parsed = parse_plain(argv)
    if parsed is None or any(k.startswith("_") and k.endswith("_COMPLETE") for k in os.environ):
        return None
    fn, kw = parsed

    def run() -> None:
        _result, code = call_handled(fn, (), kw)  # the commands return None: exit 0, as typer's would
        sys.exit(code or 0)

    return run


# --- the process -------------------------------------------------------------------------------------------------


def keep_freed_memory() -> bool:
    """Tell glibc's malloc to keep freed memory for reuse in this process: serve every block from the heap instead
    of fresh ``mmap`` s (``M_MMAP_MAX`` 0; glibc still maps one when the heap cannot grow), and return freed heap
    memory to the OS only above 2 GiB at the top (``M_TRIM_THRESHOLD``), so the arrays a large ``predict`` frees
    and allocates again (each ~8 MB per 1M ops) reuse pages that are already mapped instead of faulting in zeroed
    ones (what it saves at 1M and 10M ops, and what it costs in peak RSS: ``docs/validation.md``, the sections that
    name ``keep_freed_memory``).
    Returns whether glibc took the settings (False elsewhere: musl, macOS, Windows), changing nothing then."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes  # already imported by numpy, which every such command loads

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_mmap_max = -1, -4  # <malloc.h>
    return bool(mallopt(m_mmap_max, 0)) and bool(mallopt(m_trim_threshold, 2**31 - 1))


#: What matplotlib's ``kwdoc`` returns in a command's process (:func:`lean_artist_docs`).
LEAN_KWDOC = "Properties:\n    (not listed in schedsim's command-line process)"


def lean_artist_docs() -> None:
    """In this process, matplotlib's property tables are not built into its artists' docstrings.

    matplotlib builds, for every ``Artist`` subclass as it is defined, the docstring of its ``set()``: a table of
    every property by ``matplotlib.artist.kwdoc``, which inspects each setter and parses its docstring
    (``ArtistInspector.pprint_setters``: ~120 classes in ``import matplotlib.figure`` and the charts' own
    artists; the same tables fill the ``%(...:kwdoc)s`` fields of other docstrings). A command's process draws
    charts and exits: nothing reads those docstrings (``help()``, Sphinx). A finder first on ``sys.meta_path``
    waits for ``matplotlib.artist``'s import, if one comes, and once it has run, replaces its ``kwdoc`` by
    :data:`LEAN_KWDOC`, and each later subclass's ``set()`` signature is built when first read instead of as the
    class is defined (:func:`_lazy_set_signatures`: ``inspect.signature`` gives the same parameters). Nothing else
    of matplotlib changes: every chart is drawn the same. Importing the API as a library does not call this (its
    users' ``help()`` keeps matplotlib's tables). Cost on pp=32's charts: docs/validation.md, "fast38o" and
    "fast38r"."""
    if "matplotlib.artist" in sys.modules:
        module = sys.modules["matplotlib.artist"]
        module.kwdoc = _lean_kwdoc  # type: ignore[attr-defined]
        _lazy_set_signatures(module)
        return

    class LeanDocs:  # a meta path finder (importlib.abc.MetaPathFinder's protocol, without importing it)
        def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
            if name != "matplotlib.artist":
                return None
            sys.meta_path.remove(self)  # once: the module's own spec, from the finders after this one
            spec = next((got for f in list(sys.meta_path) if hasattr(f, "find_spec")
                         for got in (f.find_spec(name, path, target),) if got is not None), None)
            loader = spec.loader if spec is not None else None
            if loader is None or not hasattr(loader, "exec_module"):
                return spec
            run_module = loader.exec_module
            own = "exec_module" in getattr(loader, "__dict__", {})  # an instance's own, to be put back as it was

            def exec_module(module: Any) -> None:
                # once: a loader may serve other modules too (zipimport's, a frozen application's: one per archive)
                if own:
                    loader.exec_module = run_module  # type: ignore[method-assign]
                else:
                    del loader.exec_module
                run_module(module)
                if module.__name__ == name:
                    module.kwdoc = _lean_kwdoc
                    _lazy_set_signatures(module)

            try:
                loader.exec_module = exec_module  # type: ignore[method-assign]
            except (AttributeError, TypeError):  # a loader that takes no attributes (__slots__, C): as it is
                pass
            return spec

    if not any(type(f).__name__ == "LeanDocs" for f in sys.meta_path):
        sys.meta_path.insert(0, LeanDocs())


def _lean_kwdoc(artist: Any) -> str:
    return LEAN_KWDOC


#: The modules of numpy that only write docstrings onto its C objects (numpy 2.x, ``numpy/_core/__init__.py``
#: imports them last, "for module-freeze analysis"; ``numpy._core.function_base.add_newdoc`` sets each
#: ``__doc__``), left out of a command's process by :func:`lean_numpy_docs`.
NUMPY_DOC_MODULES = ("numpy._core._add_newdocs", "numpy._core._add_newdocs_scalars")


def lean_numpy_docs() -> None:
    """In this process, numpy, if imported after this call, does not write the docstrings of its C objects.

    numpy's import ends by running :data:`NUMPY_DOC_MODULES`: ~300 ``add_newdoc`` calls that attach texts to
    ``ndarray``, its methods, ``dtype``, the scalar types and the C functions (and, from a docstring's first
    line, the ``__text_signature__`` that ``inspect.signature`` reads for those C methods). A command's process
    never reads them (no ``help()``, no signature of a numpy C function); a stand-in module under each name,
    put in ``sys.modules`` before numpy is imported, is what ``numpy._core`` finds instead. Nothing else of numpy
    changes: every array operation and every output is the same. Does nothing once numpy is imported; importing
    the API as a library does not call this (its users' ``help()`` keeps numpy's texts). Cost: docs/validation.md,
    "fast38u"."""
    if "numpy" in sys.modules or "numpy._core" in sys.modules:
        return
    from types import ModuleType

    for name in NUMPY_DOC_MODULES:
        sys.modules.setdefault(name, ModuleType(name, "schedsim's stand-in: numpy's docstrings are not written in "
                                                      "a command's process (schedsim.clicore.lean_numpy_docs)"))


def _lazy_set_signatures(artist_module: Any) -> None:
    """The ``set()`` of each ``Artist`` subclass defined from now on gets its signature when first read.

    matplotlib gives each subclass its own ``set()`` as the class is defined (``Artist.__init_subclass__``) and
    builds its signature at once (``Artist._update_set_signature_and_docstring``: an ``ArtistInspector`` lists the
    class's setters, ``dir()`` of the class and ``inspect.signature`` of each ``set_*`` method; ~110 classes in
    ``import matplotlib.figure`` and the charts' own artists). Nothing draws with that signature: ``set()`` takes
    ``**kwargs``; ``inspect.signature`` and ``help()`` read it. Here the subclass's ``set`` gets matplotlib's flag
    and docstring (the first subclass's, built by matplotlib's own method: with :func:`_lean_kwdoc` every
    subclass's is the same text) and a ``__wrapped__`` (:class:`_SetSignature`), which ``inspect.signature``
    follows; the first read builds the signature with matplotlib's own method, and ``set`` is then as matplotlib
    makes it (its ``__signature__``, no ``__wrapped__``). A matplotlib without that method (another version) is left
    as it is."""
    artist = getattr(artist_module, "Artist", None)
    build = getattr(getattr(artist, "_update_set_signature_and_docstring", None), "__func__", None)
    if artist is None or build is None or getattr(build, "lazy", False):
        return
    doc: list[str] = []  # the docstring matplotlib gives a subclass's set() under the lean kwdoc, once built

    def lazy(cls: Any) -> None:
        fn = cls.set
        if not doc:  # the first subclass: matplotlib's own method, whose docstring every later one shares
            build(cls)
            if fn.__doc__ and fn.__doc__.endswith(LEAN_KWDOC):
                doc.append(fn.__doc__)
            return
        fn._autogenerated_signature = True
        fn.__doc__ = doc[0]
        fn.__wrapped__ = _SetSignature(build, cls, fn, [(k, _accessors(k)) for k in cls.__mro__])

    lazy.lazy = True  # type: ignore[attr-defined]
    artist._update_set_signature_and_docstring = classmethod(lazy)


def _accessors(klass: type) -> dict[str, Any]:
    """The ``set_*`` and ``get_*`` entries of a class's own namespace: what matplotlib's ``ArtistInspector`` reads
    (through ``dir()``) to list a class's setters and their aliases."""
    return {k: v for k, v in vars(klass).items() if k.startswith(("set_", "get_"))}


def _put(klass: type, name: str, entry: Any, missing: Any) -> None:
    """``klass.name = entry``, or no such entry where ``entry`` is ``missing``."""
    if entry is not missing:
        type.__setattr__(klass, name, entry)
    elif name in vars(klass):
        type.__delattr__(klass, name)


class _SetSignature:
    """What ``inspect.signature`` reads of an ``Artist`` subclass's ``set()`` whose signature is not built yet
    (:func:`_lazy_set_signatures`): ``__signature__``, built on the first read by matplotlib's own method
    ``build`` for ``cls``, whose ``set`` is ``fn``, as it was when the class was defined: with the ``set_*`` and
    ``get_*`` entries ``then`` held (:func:`_accessors` of each class of its MRO; a class decorator may have replaced
    some since, as ``mplot3d``'s ``define_aliases`` replaces ``Axes3D.set_xlim3d``), put back for the call and
    undone after it. ``fn`` keeps the signature and loses its ``__wrapped__``."""

    __slots__ = ("build", "cls", "fn", "then")

    def __init__(self, build: Callable[[Any], None], cls: Any, fn: Any, then: list[tuple[type, dict[str, Any]]]
                 ) -> None:
        self.build, self.cls, self.fn, self.then = build, cls, fn, then

    @property
    def __signature__(self) -> Any:
        fn, cls = self.fn, self.cls
        if "__signature__" not in vars(fn):
            missing = object()
            undo = [] if vars(cls).get("set") is fn else [(cls, "set", vars(cls).get("set", missing), fn)]
            for klass, was in self.then:  # (class, name, its entry now or ``missing``, its entry then)
                now = vars(klass)
                undo += [(klass, k, now.get(k, missing), was.get(k, missing))
                         for k in [*was, *(k for k in _accessors(klass) if k not in was)]
                         if now.get(k, missing) is not was.get(k, missing)]
            doc = fn.__doc__
            try:
                for klass, k, _now, then in undo:
                    _put(klass, k, then, missing)
                self.build(cls)
            finally:
                for klass, k, now, _then in reversed(undo):
                    _put(klass, k, now, missing)
            fn.__doc__ = doc
            vars(fn).pop("__wrapped__", None)
        return fn.__signature__


def run_process(run: Callable[[], None], *, workload: bool = False) -> None:
    """Run a command line's ``run`` (which exits with the command's code) as the whole process.

    pydantic's plugin loader, which imports :mod:`importlib.metadata`, is imported only if a validator is
    built with plugins enabled (:func:`schedsim._pydantic.defer_plugin_discovery`; typer's and schedsim's
    are built with them off).

    Unless ``workload`` (``execute`` and ``calibrate``: user work under torchrun, their threads and garbage are
    the user's business):

    * the process starts OpenBLAS with one thread (``OPENBLAS_NUM_THREADS=1`` unless set): numpy's import
      starts one BLAS thread per core, which cost ~70 ms CPU of a 0.16 s ``import numpy`` (2-core VM),
      and schedsim's own arrays never call BLAS. Must run before anything imports numpy.
    * freed memory stays mapped for reuse (:func:`keep_freed_memory`).
    * matplotlib, if a chart imports it, builds no property tables into its docstrings (:func:`lean_artist_docs`),
      and numpy writes no docstrings onto its C objects (:func:`lean_numpy_docs`).
    * the cyclic garbage collector stays off for the whole command, which then exits: a command leaves no
      cyclic garbage worth collecting (none after a ``sweep`` point), and each pass rescans the
      modules and models the start-up made. At the end the heap is frozen (:func:`gc.freeze`), so the
      interpreter's exit does not walk it once more either. Together ~7% of the instructions of a cold
      ``check`` (callgrind).

    Nothing ends in a traceback: an exception no command handled (a bug) prints one ``error:`` line and a
    "please report" line and exits 1 (the traceback only with ``--debug`` or ``SCHEDSIM_DEBUG=1``), Ctrl-C exits
    130, a reader that left (``| head``) exits 0; printing never fails on the text printed (:func:`_safe_streams`).
    """
    _safe_streams()
    try:
        _run_set_up(run, workload)
    except KeyboardInterrupt:
        from schedsim.cliutil import _print_err

        _print_err("interrupted")
        exit_interrupted()
    except SystemExit as e:
        if e.code == 130:  # a command's own Ctrl-C handler already said what was kept
            exit_interrupted()
        raise
    except BrokenPipeError:
        from schedsim.cliutil import _quiet_stdout

        _quiet_stdout()
        sys.exit(0)
    except Exception as e:  # a bug outside any command's own handler (start-up, option parsing)
        from schedsim.cliutil import debugging, report_bug

        if debugging():
            raise
        report_bug(e)
        sys.exit(1)


def exit_interrupted() -> None:
    """End the process with exit code 130 now, whatever state a Ctrl-C left the interpreter in.

    CPython re-raises SIGINT at exit (the process then dies of the signal, ``returncode == -2`` to a parent)
    whenever a KeyboardInterrupt escaped some nested evaluation on its way to our handler, even though the
    handler caught it (``_Py_UnhandledKeyboardInterrupt``, Modules/main.c, bpo-1054041). The outputs were
    already dealt with by the command's own handler, so flushing the two streams is all that is left to do.
    """
    import os

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os._exit(130)


def _safe_streams() -> None:
    """Make printing never fail on what is printed: characters the terminal's encoding lacks (``PYTHONIOENCODING
    =ascii``) and lone surrogates print as backslash escapes; a closed stdout or stderr (``>&-``) becomes
    /dev/null."""
    import os

    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None:
            try:
                setattr(sys, name, open(os.devnull, "w"))  # noqa: SIM115 (lives as long as the process)
            except OSError:
                continue
            stream = getattr(sys, name)
        try:
            stream.reconfigure(errors="backslashreplace")
        except (AttributeError, ValueError, OSError):
            pass


def _run_set_up(run: Callable[[], None], workload: bool) -> None:
    import gc
    import os

    from schedsim._pydantic import defer_plugin_discovery

    defer_plugin_discovery()  # before typer builds its parameters' validators, the first of the process
    if workload:
        run()
        return
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    lean_numpy_docs()  # before anything imports numpy
    keep_freed_memory()
    lean_artist_docs()
    gc.disable()
    try:
        run()
    finally:
        gc.freeze()
