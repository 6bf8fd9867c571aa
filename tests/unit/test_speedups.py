"""The C speed-ups (``kafka_ordered._speedups``) against the pure-Python fallback.

On a million seeded random keys (lengths 0..40) the C hashes equal the
scalar pure-Python ones (all three hashes; the pure-Python murmur2 takes
about 2 s for a million keys, so no sampling is needed), and the C
``LinearPartitioner`` equals the fallback's formula for layouts with
``initial`` 1..8 and ``partitions`` up to 4x ``initial``: on the million keys
against the vectorised bucket formula applied to the fallback hashes, and on
a 20k subset against the scalar pure-Python partition function
(``layout._compile_py``). Golden vectors hold on both paths.

C-specific tests are skipped when the extension is not built (or
``KAFKA_ORDERED_NO_SPEEDUPS=1``); ``make test-fallback`` runs the whole unit
suite on the pure-Python path.
"""

from __future__ import annotations

import os
import pickle
import random
import subprocess
import sys
import zlib
from typing import Any, Callable, Dict, List, Tuple

import mmh3
import numpy as np
import pytest

import kafka_ordered
from kafka_ordered import InvalidKeyError, Layout, LinearHashPartitioner, _hashing, layout
from kafka_ordered.layout import HASHES

MASK = 0x7FFFFFFF
N_KEYS = 1_000_000
N_SCALAR = 20_000

# Java UtilsTest.testMurmur2 (signed results of Utils.murmur2)
JAVA_MURMUR2 = [(b"21", -973932308), (b"foobar", -790332482), (b"abc", 479470107)]

# (initial, partitions): initial 1..8, partitions from initial up to 4x initial,
# on and off powers of two (split branch taken and not)
LAYOUTS: List[Tuple[int, int]] = [
    (1, 1), (1, 3), (1, 4), (2, 3), (2, 8), (3, 5), (3, 12), (4, 7),
    (5, 9), (5, 20), (6, 17), (7, 28), (8, 8), (8, 13), (8, 32),
]  # fmt: skip

try:
    from kafka_ordered import _speedups as C  # type: ignore[attr-defined]
except ImportError:  # not built: the C-specific tests skip
    C = None

needs_c = pytest.mark.skipif(C is None, reason="C extension kafka_ordered._speedups not built")
needs_active_c = pytest.mark.skipif(
    not kafka_ordered.speedups_enabled(), reason="C speed-ups not in use (not built, or KAFKA_ORDERED_NO_SPEEDUPS set)"
)


@pytest.fixture(scope="module")
def keys() -> List[bytes]:
    rnd = random.Random(20240611)
    randbytes, randrange = rnd.randbytes, rnd.randrange
    return [randbytes(randrange(41)) for _ in range(N_KEYS)]


@pytest.fixture(scope="module")
def py_hashes(keys: List[bytes]) -> Dict[str, np.ndarray]:
    """The fallback's scalar hashes of every key."""
    return {name: np.fromiter(map(fn, keys), dtype=np.int64, count=len(keys)) for name, fn in _hashing.PY_SCALAR.items()}


# -- golden vectors and references, both paths ---------------------------------------


def _paths() -> List[Any]:
    out: List[Any] = [pytest.param(_hashing.PY_SCALAR, id="python")]
    if C is not None:
        out.append(pytest.param({"murmur2": C.murmur2, "murmur3": C.murmur3, "crc32": C.crc32}, id="c"))
    return out


@pytest.mark.parametrize("fns", _paths())
@pytest.mark.parametrize("key,signed", JAVA_MURMUR2)
def test_murmur2_java_golden_vectors(fns: Dict[str, Callable[[bytes], int]], key: bytes, signed: int) -> None:
    assert fns["murmur2"](key) == signed & MASK


@pytest.mark.parametrize("fns", _paths())
def test_murmur3_and_crc32_reference_values(fns: Dict[str, Callable[[bytes], int]]) -> None:
    for key in (b"", b"a", b"ab", b"abc", b"abcd", b"hello world", bytes(range(256))):
        assert fns["murmur3"](key) == mmh3.hash(key) & MASK
        assert fns["crc32"](key) == zlib.crc32(key)
    assert fns["crc32"](b"123456789") == 0xCBF43926  # the CRC-32 check value
    assert fns["murmur3"](b"") == 0


@pytest.mark.parametrize("fns", _paths())
def test_long_keys(fns: Dict[str, Callable[[bytes], int]]) -> None:
    from kafka.partitioner.default import murmur2 as kafka_python_murmur2

    rnd = random.Random(5)
    for n in (255, 256, 257, 1000, 4099, 70_000):
        key = rnd.randbytes(n)
        assert fns["murmur2"](key) == kafka_python_murmur2(key) & MASK
        assert fns["murmur3"](key) == mmh3.hash(key) & MASK
        assert fns["crc32"](key) == zlib.crc32(key)


# -- C == fallback on a million keys ---------------------------------------------------


@needs_c
@pytest.mark.parametrize("name", HASHES)
def test_c_hash_equals_fallback_on_a_million_keys(keys: List[bytes], py_hashes: Dict[str, np.ndarray], name: str) -> None:
    fn = getattr(C, name)
    got = np.fromiter(map(fn, keys), dtype=np.int64, count=len(keys))
    bad = np.flatnonzero(got != py_hashes[name])
    assert bad.size == 0, f"{bad.size} mismatches, first key {keys[bad[0]]!r}"


@needs_c
@pytest.mark.parametrize("name", HASHES)
def test_c_partitioner_equals_fallback_on_a_million_keys(
    keys: List[bytes], py_hashes: Dict[str, np.ndarray], name: str
) -> None:
    for n0, n in LAYOUTS:
        part = C.LinearPartitioner(name, n0, n)
        got = np.fromiter(map(part, keys), dtype=np.int64, count=len(keys))
        want = layout._bucket_array(py_hashes[name].copy(), n0, n)
        bad = np.flatnonzero(got != want)
        assert bad.size == 0, f"{name} {n0}->{n}: {bad.size} mismatches, first key {keys[bad[0]]!r}"


@needs_c
@pytest.mark.parametrize("name", HASHES)
def test_c_partitioner_equals_scalar_fallback(keys: List[bytes], name: str) -> None:
    sample = keys[:N_SCALAR]
    for n0, n in LAYOUTS:
        c_fn = C.LinearPartitioner(name, n0, n, layout._as_bytes)
        py_fn = layout._compile_py(n0, n, name)
        assert list(map(c_fn, sample)) == list(map(py_fn, sample)), (name, n0, n)
        # and the module function (which goes through _hashing.SCALAR)
        assert [layout.partition_for(k, n0, n, name) for k in sample[:500]] == list(map(py_fn, sample[:500]))


@needs_c
def test_c_partitioner_big_counts() -> None:
    """Counts far beyond Kafka's: the uint64 arithmetic matches Python's."""
    rnd = random.Random(11)
    sample = [rnd.randbytes(rnd.randrange(20)) for _ in range(2000)]
    for n0, n in [(1, 2**31), (3, 2**40 + 5), (2**33, 2**34 + 1), (1, sys.maxsize)]:
        for name in HASHES:
            c_fn = C.LinearPartitioner(name, n0, n)
            py_fn = layout._compile_py(n0, n, name)
            assert list(map(c_fn, sample)) == list(map(py_fn, sample))


# -- the C partitioner's contract --------------------------------------------------


@needs_c
def test_c_partitioner_arguments_and_errors() -> None:
    part = C.LinearPartitioner("murmur2", 3, 7)
    assert (part.hash_name, part.initial, part.partitions) == ("murmur2", 3, 7)
    assert repr(part) == "LinearPartitioner('murmur2', 3, 7)"
    assert part(bytearray(b"abc")) == part(memoryview(b"abc")) == part(b"abc")
    for bad in ("abc", 1, None, 1.5):
        with pytest.raises(TypeError, match="key must be bytes"):
            part(bad)
    with pytest.raises(TypeError, match="exactly one positional argument"):
        part()
    with pytest.raises(TypeError, match="exactly one positional argument"):
        part(b"a", b"b")
    with pytest.raises(TypeError, match="exactly one positional argument"):
        part(key=b"a")
    with pytest.raises(ValueError, match="unknown hash"):
        C.LinearPartitioner("md5", 1, 1)
    for n0, n in [(0, 1), (3, 2), (-1, 4)]:
        with pytest.raises(ValueError, match="initial <= partitions"):
            C.LinearPartitioner("crc32", n0, n)
    with pytest.raises(OverflowError):
        C.LinearPartitioner("crc32", 1, 2**64)
    with pytest.raises(TypeError, match="callable"):
        C.LinearPartitioner("crc32", 1, 2, 5)
    for fn in (C.murmur2, C.murmur3, C.crc32):
        with pytest.raises(TypeError, match="key must be bytes"):
            fn("abc")


@needs_c
def test_c_partitioner_coerce() -> None:
    seen: List[Any] = []

    def coerce(key: Any) -> Any:
        seen.append(key)
        return key.encode() if isinstance(key, str) else key

    part = C.LinearPartitioner("murmur3", 2, 5, coerce)
    assert part("abc") == part(b"abc")
    assert seen == ["abc"]  # bytes never reach coerce
    with pytest.raises(TypeError, match="coerce must return bytes"):
        part(17)
    part = C.LinearPartitioner("murmur3", 2, 5, layout._as_bytes)
    with pytest.raises(InvalidKeyError, match="encode it first"):
        part("abc")


@needs_c
def test_c_partitioner_pickles() -> None:
    for coerce in (None, layout._as_bytes):
        part = C.LinearPartitioner("crc32", 4, 11, coerce)
        clone = pickle.loads(pickle.dumps(part))
        assert type(clone) is type(part) and repr(clone) == repr(part)
        assert [clone(b"k%d" % i) for i in range(200)] == [part(b"k%d" % i) for i in range(200)]


# -- wiring: Layout, partitioner, speedups_enabled ----------------------------------


@needs_active_c
def test_speedups_enabled_and_used() -> None:
    assert kafka_ordered.speedups_enabled() is True
    assert "speedups_enabled" in kafka_ordered.__all__
    assert _hashing.murmur2 is C.murmur2 and _hashing.SCALAR["crc32"] is C.crc32
    lay = Layout("t", 0, 4, 6, 6, "murmur3")
    assert type(lay._fn) is C.LinearPartitioner
    assert type(LinearHashPartitioner(4, 6)._fn(6)) is C.LinearPartitioner


@needs_active_c
def test_layout_public_behaviour_unchanged() -> None:
    lay = Layout("t", 0, 3, 7, 7)
    py_fn = layout._compile_py(3, 7, "murmur2")
    for key in (b"", b"abc", bytearray(b"abc"), memoryview(b"xyz")):
        assert lay.partition_for(key) == py_fn(key)
    for bad in ("abc", 5, None):
        with pytest.raises(InvalidKeyError) as c_err:
            lay.partition_for(bad)
        with pytest.raises(InvalidKeyError) as py_err:
            py_fn(bad)
        assert str(c_err.value) == str(py_err.value)


def test_layout_with_counts_beyond_c_ssize_t_falls_back() -> None:
    lay = Layout("t", 0, 1, 2**70, 2**70)
    assert lay.partition_for(b"abc") == _hashing.murmur2(b"abc")


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    full = dict(os.environ)
    full.pop(_hashing.NO_SPEEDUPS_ENV, None)
    full.update(env)
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=60)


def test_env_var_forces_fallback_and_logs_once() -> None:
    code = (
        "import logging; logging.basicConfig(level=logging.DEBUG, format='%(name)s %(message)s')\n"
        "import kafka_ordered, importlib\n"
        "from kafka_ordered import Layout, _hashing\n"
        "print('enabled', kafka_ordered.speedups_enabled())\n"
        "print('fn', type(Layout('t', 0, 2, 3, 3)._fn).__name__)\n"
        "print('m2', _hashing.murmur2 is _hashing.murmur2_py)\n"
    )
    out = _run(code, **{_hashing.NO_SPEEDUPS_ENV: "1"})
    assert out.returncode == 0, out.stderr
    assert "enabled False" in out.stdout and "fn function" in out.stdout and "m2 True" in out.stdout
    assert out.stderr.count("kafka_ordered C speed-ups") == 1


@needs_c
def test_without_env_var_c_is_used_in_a_fresh_process() -> None:
    out = _run("import kafka_ordered; print(kafka_ordered.speedups_enabled())", **{_hashing.NO_SPEEDUPS_ENV: "0"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"


# -- no compiler: the package still installs and works, and says so once at DEBUG

# (also drops a development checkout's editable-install finder, which would
# otherwise find another checkout's extension for a package run from elsewhere)
_NO_EDITABLE = "import sys; sys.meta_path[:] = [f for f in sys.meta_path if 'Editable' not in str(f)]\n"

_BLOCK_SPEEDUPS = (
    "import sys\n"
    "class _NoCompilerHere:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name == 'kafka_ordered._speedups':\n"
    "            raise ImportError('kafka_ordered._speedups was not built')\n"
    "        return None\n"
    "sys.meta_path.insert(0, _NoCompilerHere())\n"
)


def test_missing_extension_falls_back_and_says_so_once_at_debug() -> None:
    code = _BLOCK_SPEEDUPS + (
        "import logging; logging.basicConfig(level=logging.DEBUG, format='%(levelname)s %(name)s %(message)s')\n"
        "import importlib, kafka_ordered\n"
        "from kafka_ordered import Layout, _fastpath, _hashing\n"
        "from kafka_ordered.confluent import OrderedConsumer, OrderedProducer\n"
        "importlib.import_module('kafka_ordered._gating')\n"
        "print('enabled', kafka_ordered.speedups_enabled())\n"
        "print('routes', _fastpath.ProducerRoute is _fastpath.PyProducerRoute, _fastpath.Calm is _fastpath.PyCalm)\n"
        "print('methods', type(OrderedProducer.produce).__name__)\n"
        "print('partition', Layout('t', 0, 3, 7, 7).partition_for(b'foobar'))\n"
    )
    out = _run(code)
    assert out.returncode == 0, out.stderr
    assert "enabled False" in out.stdout and "routes True True" in out.stdout
    assert "methods PyMethod" in out.stdout
    want = layout._compile_py(3, 7, "murmur2")(b"foobar")
    assert f"partition {want}" in out.stdout
    lines = [ln for ln in out.stderr.splitlines() if "speed-ups" in ln]
    assert lines == ["DEBUG kafka_ordered C speed-ups unavailable, using pure Python"], out.stderr
    # and nothing above DEBUG: an application logging at INFO sees nothing
    quiet = _run(_BLOCK_SPEEDUPS + "import logging; logging.basicConfig(level=logging.INFO)\nimport kafka_ordered\n")
    assert quiet.returncode == 0 and "speed-ups" not in quiet.stderr


def test_build_without_a_compiler_succeeds_without_the_extension(tmp_path: Any) -> None:
    """What ``pip install .`` runs on a machine without a C compiler
    (``setup.py build`` with ``CC`` failing): the optional extension is
    skipped with a warning, the build succeeds, and the built package
    imports and works on the pure-Python path."""
    import shutil

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    src = tmp_path / "src"
    src.mkdir()
    for name in ("setup.py", "setup.cfg", "pyproject.toml", "README.md", "pyspark_kafka_ordered.py"):
        shutil.copy(os.path.join(root, name), src / name)
    for pkg in ("kafka_ordered", "spark_connector"):
        shutil.copytree(os.path.join(root, pkg), src / pkg,
                        ignore=shutil.ignore_patterns("*.so", "*.pyd", "__pycache__"))
    env = dict(os.environ, CC="false")
    env.pop(_hashing.NO_SPEEDUPS_ENV, None)
    built = subprocess.run([sys.executable, "setup.py", "build", "--build-base", str(tmp_path / "build")],
                           cwd=src, env=env, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    assert 'building extension "kafka_ordered._speedups" failed' in built.stdout + built.stderr
    lib = next((tmp_path / "build").glob("lib*"))
    assert not list(lib.rglob("_speedups*.so")) and (lib / "kafka_ordered" / "_fastpath.py").exists()
    code = (_NO_EDITABLE + "import kafka_ordered, sys\n"
            "assert kafka_ordered.__file__.startswith(sys.argv[1]), kafka_ordered.__file__\n"
            "print(kafka_ordered.speedups_enabled(), kafka_ordered.Layout('t', 0, 3, 7, 7).partition_for(b'foobar'))\n")
    ran = subprocess.run([sys.executable, "-c", code, str(lib)], cwd=tmp_path, env=dict(env, PYTHONPATH=str(lib)),
                         capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["False", str(layout._compile_py(3, 7, "murmur2")(b"foobar"))]


def test_stale_extension_is_refused_with_a_warning() -> None:
    """An extension built from older sources (a development checkout that
    was not rebuilt) lacks what this code needs: refused once, loudly, and
    the pure-Python paths are used."""
    code = (
        "import sys, types\n"
        "class _Stale:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'kafka_ordered._speedups':\n"
        "            import importlib.machinery as m\n"
        "            return m.ModuleSpec(name, self)\n"
        "    def create_module(self, spec):\n"
        "        mod = types.ModuleType(spec.name); mod.__file__ = '/stale/_speedups.so'; return mod\n"
        "    def exec_module(self, mod):\n"
        "        mod.murmur2 = mod.murmur3 = mod.crc32 = len\n"
        "sys.meta_path.insert(0, _Stale())\n"
        "import logging; logging.basicConfig(level=logging.DEBUG, format='%(levelname)s %(message)s')\n"
        "import kafka_ordered\n"
        "print('enabled', kafka_ordered.speedups_enabled(), kafka_ordered.Layout('t', 0, 3, 7, 7).partition_for(b'ab'))\n"
    )
    out = _run(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["enabled", "False", str(layout._compile_py(3, 7, "murmur2")(b"ab"))]
    warnings = [ln for ln in out.stderr.splitlines() if "speed-ups" in ln]
    assert len(warnings) == 1 and warnings[0].startswith("WARNING C speed-ups out of date"), out.stderr
    assert "make ext" in warnings[0]


@needs_c
def test_built_extension_has_the_api_this_code_needs() -> None:
    assert C.API == _hashing.SPEEDUPS_API

