# SPDX-License-Identifier: Apache-2.0
"""tpscope's AllReduce from Python: a thin ctypes binding of the C API (include/tpscope/tpscope.h).

Two kinds of communicator, as in C:

* ``Communicator.create(devices)``: every GPU in this process (llama.cpp's shape); calls take one
  buffer and one stream per GPU.
* ``Communicator.init_rank(nranks, unique_id, rank, device)``: one rank per process (NCCL's shape);
  one process makes the id with ``get_unique_id()`` and hands it to the others (``bytes``, so
  ``torch.distributed.broadcast_object_list`` or a pipe carries it); calls take this rank's one
  buffer and stream. The id holds the secret with which the ranks prove they were given it: pass it
  only over channels other users cannot read (never on a command line).

Buffers are device pointers (``int``) with an explicit count and dtype, or PyTorch tensors, whose data
pointer, element count, dtype and (unless a stream is given) current CUDA stream are used. Streams are
``int`` handles (``cudaStream_t``) or ``torch.cuda.Stream`` objects; the legacy default stream (0, which
is PyTorch's default) is refused by the library: run under ``with torch.cuda.stream(torch.cuda.Stream())``.
Every failure raises ``tpscope.Error``, whose ``status`` is the library's ``Status``.

The library is ``libtpscope.so``: the path in ``TPSCOPE_LIBRARY``, else the one the wheel carries
(``lib/`` inside this package), one in ``<prefix>/lib`` of the running Python, or on the loader's search
path. ``__version__`` is the package's version; in a source checkout, which has no ``_version.py``, the
loaded library's. ``cmake_prefix_path`` is the folder ``find_package(tpscope)`` looks in for the
wheel's CMake package (``CMAKE_PREFIX_PATH``), ``get_include()`` the folder of ``tpscope/tpscope.h``.
"""

import ctypes
import ctypes.util
import enum
import os
import sys

__all__ = [
    "Status", "DataType", "Backend", "Wire", "parse_wire", "Error", "Config", "Communicator", "get_unique_id",
    "library",
    "UNIQUE_ID_BYTES", "MAX_DEVICES", "MAX_PEER_UIDS", "cmake_prefix_path", "get_include",
]

_HERE = os.path.dirname(os.path.abspath(__file__))
# The wheel lays out an install prefix inside the package (cmake/TpscopeWheel.cmake).
cmake_prefix_path = _HERE
_BUNDLED_LIBRARY = os.path.join(_HERE, "lib", "libtpscope.so.0")

try:
    from ._version import __version__  # written by the build from project(VERSION)
except ImportError:  # a source checkout: the version of the library it runs with
    def __getattr__(name):
        if name == "__version__":
            return version()
        raise AttributeError("module 'tpscope' has no attribute %r" % name)


def get_include():
    """The folder holding tpscope/tpscope.h in the wheel (None in a source checkout: use include/)."""
    path = os.path.join(_HERE, "include")
    return path if os.path.exists(os.path.join(path, "tpscope", "tpscope.h")) else None

UNIQUE_ID_BYTES = 128  # TPS_UNIQUE_ID_BYTES
MAX_DEVICES = 8  # TPS_MAX_DEVICES
MAX_PEER_UIDS = 8  # TPS_MAX_PEER_UIDS


class Status(enum.IntEnum):
    """tpsResult_t."""
    SUCCESS = 0
    CUDA_ERROR = 1
    SYSTEM_ERROR = 2
    INTERNAL_ERROR = 3
    INVALID_ARGUMENT = 4
    INVALID_USAGE = 5
    TIMEOUT = 6
    UNAVAILABLE = 7
    NCCL_ERROR = 8


class DataType(enum.IntEnum):
    """tpsDataType_t."""
    FLOAT32 = 0
    FLOAT16 = 1
    BFLOAT16 = 2


class Wire(enum.IntEnum):
    """tpsWire_t: what a call's bytes travel as. EXACT is the default; the others are lossy (tpscope.h)."""
    EXACT = 0
    BF16 = 1
    INT8 = 2
    FP8 = 3
    INT4 = 4
    AUTO = 5


def parse_wire(text):
    """A wire as TPSCOPE_WIRE writes it, as (Wire, wire_error_budget): "exact", "bf16", "int8", "fp8", "int4"
    (budget 0.0), or "auto:BUDGET" with BUDGET a relative RMS error per call in (0, 1), e.g. "auto:0.01".
    ValueError naming the text for anything else (the library's own rule, wire.h's parseWirePolicy)."""
    if not isinstance(text, str):
        raise TypeError("parse_wire takes a str, not %s" % type(text).__name__)
    if text.startswith("auto:"):
        number = text[len("auto:"):]
        try:
            budget = float(number)
        except ValueError:
            budget = float("nan")
        # float() takes what strtod refuses (spaces, "infinity", "1_0", "nan"): only plain numbers pass.
        plain = number.strip() == number and number and "_" not in number and number.lower() not in ("nan", "inf")
        if not plain or not 0.0 < budget < 1.0:
            raise ValueError("wire %r: the budget after auto: is a relative RMS error per call in (0, 1), "
                             "e.g. auto:0.01" % (text,))
        return Wire.AUTO, budget
    names = {w.name.lower(): w for w in Wire if w != Wire.AUTO}
    if text not in names:
        raise ValueError("wire %r is not one of exact, bf16, int8, fp8, int4, auto:BUDGET" % (text,))
    return names[text], 0.0


class Backend(enum.IntEnum):
    """tpsBackend_t."""
    AUTO = 0
    HOST = 1
    P2P = 2
    NCCL = 3


_ELEMENT_BYTES = {DataType.FLOAT32: 4, DataType.FLOAT16: 2, DataType.BFLOAT16: 2}
_TORCH_DTYPES = {"torch.float32": DataType.FLOAT32, "torch.float16": DataType.FLOAT16,
                 "torch.bfloat16": DataType.BFLOAT16}
_NAMES = {"float32": DataType.FLOAT32, "f32": DataType.FLOAT32, "float": DataType.FLOAT32,
          "float16": DataType.FLOAT16, "f16": DataType.FLOAT16, "half": DataType.FLOAT16,
          "bfloat16": DataType.BFLOAT16, "bf16": DataType.BFLOAT16}


class Error(RuntimeError):
    """A call failed; ``status`` is the library's Status (the library's log line on stderr says more)."""

    def __init__(self, status, message):
        self.status = Status(status)
        super().__init__("%s: %s" % (message, self.status.name.lower().replace("_", " ")))


class _Config(ctypes.Structure):
    """tpsConfig_t, field for field (python/tests checks it against the C layout)."""
    _fields_ = [("backend", ctypes.c_int), ("host_copy_threshold", ctypes.c_size_t),
                ("host_chunk_bytes", ctypes.c_size_t), ("host_blocks", ctypes.c_int),
                ("spin_timeout_ms", ctypes.c_uint), ("shared_devices", ctypes.c_int),
                ("num_peer_uids", ctypes.c_int), ("peer_uids", ctypes.c_uint * MAX_PEER_UIDS),
                ("wire", ctypes.c_int), ("wire_error_budget", ctypes.c_float), ("reserved", ctypes.c_int * 14)]


class _UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * UNIQUE_ID_BYTES)]


class Config:
    """tpsConfig_t: a field left at 0 takes its default (environment, tune file, built-in).

    peer_uids: for ``Communicator.init_rank`` only, the uids of other users whose processes may be the
    other ranks (at most MAX_PEER_UIDS); by default only processes of this process's user may join
    (tpscope.h, tpsCommInitRank, has the rule).

    wire: Wire.EXACT (the default, which TPSCOPE_WIRE may set), or a compressed wire, or Wire.AUTO with
    wire_error_budget, the relative RMS error per call allowed, in (0, 1); or the wire as TPSCOPE_WIRE
    writes it ("int8", "auto:0.01", parse_wire), which sets the budget too."""

    def __init__(self, backend=Backend.AUTO, host_copy_threshold=0, host_chunk_bytes=0, host_blocks=0,
                 spin_timeout_ms=0, shared_devices=False, peer_uids=(), wire=Wire.EXACT, wire_error_budget=0.0):
        self.backend = Backend(backend)
        self.shared_devices = bool(shared_devices)  # ranks may share a GPU (tests; never for timings)
        self.host_copy_threshold = int(host_copy_threshold)
        self.host_chunk_bytes = int(host_chunk_bytes)
        self.host_blocks = int(host_blocks)
        self.spin_timeout_ms = int(spin_timeout_ms)
        for name in ("host_copy_threshold", "host_chunk_bytes", "host_blocks", "spin_timeout_ms"):
            if getattr(self, name) < 0:
                raise ValueError("Config.%s must not be negative" % name)
        self.peer_uids = tuple(peer_uids)
        if len(self.peer_uids) > MAX_PEER_UIDS:
            raise ValueError("Config.peer_uids names %d uids; at most %d" % (len(self.peer_uids), MAX_PEER_UIDS))
        for uid in self.peer_uids:
            if not isinstance(uid, int) or isinstance(uid, bool) or not 0 <= uid < 2 ** 32:
                raise ValueError("Config.peer_uids: %r is no uid" % (uid,))
        if isinstance(wire, str):
            if wire_error_budget:
                raise ValueError("Config: give the budget in the wire (%r) or in wire_error_budget, not both" % (wire,))
            wire, wire_error_budget = parse_wire(wire)
        self.wire = Wire(wire)
        self.wire_error_budget = float(wire_error_budget)
        if self.wire == Wire.AUTO and not 0.0 < self.wire_error_budget < 1.0:
            raise ValueError("Config.wire_error_budget is %r: Wire.AUTO takes a relative RMS error in (0, 1)"
                             % (wire_error_budget,))

    @classmethod
    def _from_c(cls, c):
        n = max(0, min(c.num_peer_uids, MAX_PEER_UIDS))
        return cls(Backend(c.backend), c.host_copy_threshold, c.host_chunk_bytes, c.host_blocks, c.spin_timeout_ms,
                   c.shared_devices != 0, tuple(c.peer_uids[:n]), Wire(c.wire), c.wire_error_budget)

    def _c(self):
        uids = (ctypes.c_uint * MAX_PEER_UIDS)(*self.peer_uids)
        return _Config(int(self.backend), self.host_copy_threshold, self.host_chunk_bytes, self.host_blocks,
                       self.spin_timeout_ms, 1 if self.shared_devices else 0, len(self.peer_uids), uids,
                       int(self.wire), self.wire_error_budget)


# ---- the library -----------------------------------------------------------------------------------

_lib = None


def _candidates():
    env = os.environ.get("TPSCOPE_LIBRARY")
    if env:
        return [env]
    paths = [_BUNDLED_LIBRARY, os.path.join(sys.prefix, "lib", "libtpscope.so")]
    found = ctypes.util.find_library("tpscope")
    if found:
        paths.append(found)
    return paths


def library():
    """The loaded libtpscope.so (loaded on first use); OSError naming where it looked when absent."""
    global _lib
    if _lib is not None:
        return _lib
    tried = []
    for path in _candidates():
        if os.path.sep in path and not os.path.exists(path):
            tried.append(path)
            continue
        try:
            lib = ctypes.CDLL(path)
            break
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
    else:
        raise OSError("libtpscope.so not found; install the wheel (pip install tpscope), or build the library "
                      "(target tpscope) and set TPSCOPE_LIBRARY to its path. Tried: " + ", ".join(tried))
    vp, sz, i, pi = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.POINTER(ctypes.c_int)
    sig = {
        "tpsGetErrorString": ([i], ctypes.c_char_p),
        "tpsGetVersion": ([], ctypes.c_char_p),
        "tpsGetUniqueId": ([ctypes.POINTER(_UniqueId)], i),
        "tpsCommCreate": ([ctypes.POINTER(vp), i, pi, ctypes.POINTER(_Config)], i),
        "tpsCommInitRank": ([ctypes.POINTER(vp), i, _UniqueId, i, i, ctypes.POINTER(_Config)], i),
        "tpsCommDestroy": ([vp], i),
        "tpsCommCount": ([vp, pi], i),
        "tpsCommUserRank": ([vp, pi], i),
        "tpsAllReduceWith": ([vp, i, ctypes.POINTER(vp), sz, i, ctypes.POINTER(vp)], i),
        "tpsAllReduceWire": ([vp, i, i, ctypes.POINTER(vp), sz, i, ctypes.POINTER(vp)], i),
        "tpsAllReduceAddRmsNorm": ([vp, i, ctypes.POINTER(vp), ctypes.POINTER(vp), ctypes.POINTER(vp),
                                    ctypes.POINTER(vp), ctypes.POINTER(vp), sz, sz, ctypes.c_float, i,
                                    ctypes.POINTER(vp)], i),
        "tpsCommGetAsyncError": ([vp, pi], i),
        "tpsCommGetConfig": ([vp, ctypes.POINTER(_Config)], i),
    }
    for name, (args, res) in sig.items():
        f = getattr(lib, name)
        f.argtypes, f.restype = args, res
    _lib = lib
    return lib


def _check(status, what):
    if status != Status.SUCCESS:
        raise Error(status, what)


def version():
    """The library's version string."""
    return library().tpsGetVersion().decode()


def get_unique_id():
    """A fresh id (bytes of length UNIQUE_ID_BYTES) for one rank-per-process communicator. It holds a
    secret: hand it to the other ranks only over channels other users cannot read."""
    uid = _UniqueId()
    _check(library().tpsGetUniqueId(ctypes.byref(uid)), "tpsGetUniqueId")
    return ctypes.string_at(ctypes.addressof(uid), UNIQUE_ID_BYTES)


# ---- arguments -------------------------------------------------------------------------------------

def _is_tensor(x):
    return hasattr(x, "data_ptr") and hasattr(x, "dtype") and hasattr(x, "numel")


def _dtype(x):
    """A DataType from a DataType, an int, a name ('bf16') or a torch dtype."""
    if isinstance(x, DataType):
        return x
    if isinstance(x, int) and not isinstance(x, bool):
        return DataType(x)
    if isinstance(x, str) and x.lower() in _NAMES:
        return _NAMES[x.lower()]
    if str(x) in _TORCH_DTYPES:
        return _TORCH_DTYPES[str(x)]
    raise TypeError("unsupported dtype %r: tpscope reduces float32, float16 and bfloat16" % (x,))


def _pointer(x, what):
    """(device pointer, element count or None, DataType or None, the tensor or None) of one buffer."""
    if _is_tensor(x):
        if not getattr(x, "is_cuda", False):
            raise ValueError("%s is not a CUDA tensor (device %s)" % (what, getattr(x, "device", "?")))
        if not x.is_contiguous():
            raise ValueError("%s is not contiguous; pass tensor.contiguous() and copy the result back" % what)
        return int(x.data_ptr()), int(x.numel()), _dtype(x.dtype), x
    if isinstance(x, int) and not isinstance(x, bool):
        if x <= 0:
            raise ValueError("%s is a null or negative device pointer" % what)
        return x, None, None, None
    raise TypeError("%s must be a CUDA tensor or a device pointer (int), not %s" % (what, type(x).__name__))


def _stream(s, tensor, what):
    """A cudaStream_t handle from an int, a torch.cuda.Stream, or (None) the tensor's current stream."""
    if s is None:
        if tensor is None:
            raise ValueError("%s: a stream is needed when buffers are plain pointers" % what)
        import torch  # only reached with tensors, so torch is there
        s = torch.cuda.current_stream(tensor.device)
    if hasattr(s, "cuda_stream"):
        s = s.cuda_stream
    if not isinstance(s, int) or isinstance(s, bool):
        raise TypeError("%s must be a CUDA stream (int handle or torch.cuda.Stream)" % what)
    if s == 0:
        raise ValueError("%s is the legacy default stream, which tpscope refuses; run under "
                         "`with torch.cuda.stream(torch.cuda.Stream()):` or pass a stream you created" % what)
    return s


def _call_wire(wire):
    """One call's Wire from a Wire, its int, or its name ("exact", "int8", ...; "auto": the communicator's).
    ValueError for anything else: an error budget ("auto:0.01") belongs to a communicator, not a call."""
    if isinstance(wire, str):
        names = {w.name.lower(): w for w in Wire}
        if wire not in names:
            raise ValueError("a call's wire %r is not one of exact, bf16, int8, fp8, int4, auto (the communicator's)"
                             % (wire,))
        return names[wire]
    if isinstance(wire, bool) or not isinstance(wire, int):
        raise TypeError("a call's wire must be a tpscope.Wire or its name, not %s" % type(wire).__name__)
    try:
        return Wire(wire)
    except ValueError:
        raise ValueError("a call's wire %r is not a tpscope.Wire" % (wire,)) from None


def _as_list(x, n, what):
    if n == 1 and not isinstance(x, (list, tuple)):
        return [x]
    if not isinstance(x, (list, tuple)) or len(x) != n:
        raise ValueError("%s: %d expected (one per GPU of this communicator in this process)" % (what, n))
    return list(x)


class Communicator:
    """A tpsComm_t. Make one with create() or init_rank(); close() (or a with block) frees it."""

    def __init__(self, handle, local):
        self._handle = ctypes.c_void_p(handle)
        self.local_size = local  # buffers and streams per call: the GPUs of this process
        lib = library()
        n, r = ctypes.c_int(), ctypes.c_int()
        _check(lib.tpsCommCount(self._handle, ctypes.byref(n)), "tpsCommCount")
        _check(lib.tpsCommUserRank(self._handle, ctypes.byref(r)), "tpsCommUserRank")
        self.nranks, self.rank = n.value, r.value

    @classmethod
    def create(cls, devices, config=None):
        """Every rank in this process: devices is a list of CUDA ordinals (2 to MAX_DEVICES)."""
        devices = [int(d) for d in devices]
        if not 2 <= len(devices) <= MAX_DEVICES:
            raise ValueError("a communicator spans 2 to %d GPUs, not %d" % (MAX_DEVICES, len(devices)))
        lib = library()
        handle = ctypes.c_void_p()
        arr = (ctypes.c_int * len(devices))(*devices)
        cfg = config._c() if config else None
        _check(lib.tpsCommCreate(ctypes.byref(handle), len(devices), arr, ctypes.byref(cfg) if cfg else None),
               "tpsCommCreate")
        return cls(handle.value, len(devices))

    @classmethod
    def init_rank(cls, nranks, unique_id, rank, device, config=None):
        """One rank per process: collective over the nranks processes that pass the same unique_id."""
        if not isinstance(unique_id, (bytes, bytearray)) or len(unique_id) != UNIQUE_ID_BYTES:
            raise ValueError("unique_id must be the %d bytes get_unique_id() returned" % UNIQUE_ID_BYTES)
        for name, v in (("nranks", nranks), ("rank", rank), ("device", device)):
            if not isinstance(v, int) or isinstance(v, bool):
                raise TypeError("%s must be an int" % name)
        lib = library()
        uid = _UniqueId()
        ctypes.memmove(ctypes.addressof(uid), bytes(unique_id), UNIQUE_ID_BYTES)
        handle = ctypes.c_void_p()
        cfg = config._c() if config else None
        _check(lib.tpsCommInitRank(ctypes.byref(handle), nranks, uid, rank, device,
                                   ctypes.byref(cfg) if cfg else None), "tpsCommInitRank")
        return cls(handle.value, 1)

    def _buffers(self, bufs, count, dtype, streams, what):
        bufs = _as_list(bufs, self.local_size, what + " buffers")
        parsed = [_pointer(b, "%s buffer %d" % (what, i)) for i, b in enumerate(bufs)]
        counts = {c for _, c, _, _ in parsed if c is not None}
        dtypes = {d for _, _, d, _ in parsed if d is not None}
        if count is None:
            if len(counts) != 1:
                raise ValueError("%s: count is needed (buffers are pointers, or tensors of different sizes)" % what)
            count = counts.pop()
        elif any(c is not None and c < count for c in counts):
            raise ValueError("%s: a tensor has fewer than count=%d elements" % (what, count))
        if dtype is None:
            if len(dtypes) != 1:
                raise ValueError("%s: dtype is needed (buffers are pointers, or tensors of different dtypes)" % what)
            dtype = dtypes.pop()
        dtype = _dtype(dtype)
        if dtypes and dtypes != {dtype}:
            raise ValueError("%s: the tensors' dtype is not %s" % (what, dtype.name.lower()))
        if not isinstance(count, int) or count <= 0:
            raise ValueError("%s: count must be a positive int" % what)
        if streams is None:
            streams = [None] * self.local_size
        streams = _as_list(streams, self.local_size, what + " streams")
        handles = [_stream(s, t, "%s stream %d" % (what, i)) for i, (s, (_, _, _, t)) in enumerate(zip(streams, parsed))]
        ptrs = (ctypes.c_void_p * self.local_size)(*[p for p, _, _, _ in parsed])
        strs = (ctypes.c_void_p * self.local_size)(*handles)
        return ptrs, count, dtype, strs

    def all_reduce(self, bufs, count=None, dtype=None, streams=None, backend=Backend.AUTO, wire=Wire.AUTO):
        """In-place sum over all ranks, enqueued on the streams (asynchronous, capturable).

        bufs: a tensor or device pointer for a rank-per-process communicator, else one per GPU.
        wire: this call's wire (tpsAllReduceWire): Wire.AUTO (the default) the communicator's, Wire.EXACT
        the exact sum whatever the communicator's wire, or a compressed wire; a Wire or its name ("int8").
        Every rank passes the same wire."""
        wire = _call_wire(wire)
        ptrs, count, dtype, strs = self._buffers(bufs, count, dtype, streams, "all_reduce")
        _check(library().tpsAllReduceWire(self._live(), int(Backend(backend)), int(wire), ptrs, count, int(dtype),
                                          strs), "tpsAllReduce")

    def all_reduce_add_rms_norm(self, partial, residual_in, residual_out, weight, normed, rows, width, eps,
                                dtype=DataType.BFLOAT16, streams=None, backend=Backend.AUTO):
        """tpsAllReduceAddRmsNorm (bf16). False when the backend has no fused kernel for this call (nothing
        was enqueued; reduce, add and normalise apart), True when enqueued."""
        ptrs, count, dtype, strs = self._buffers(partial, rows * width, dtype, streams, "all_reduce_add_rms_norm")
        n = self.local_size

        def arr(xs, what):
            return (ctypes.c_void_p * n)(*[_pointer(x, what)[0] for x in _as_list(xs, n, what)])
        status = library().tpsAllReduceAddRmsNorm(
            self._live(), int(Backend(backend)), ptrs, arr(residual_in, "residual_in"),
            arr(residual_out, "residual_out"), arr(weight, "weight") if weight is not None else None,
            arr(normed, "normed") if weight is not None else None, rows, width, float(eps), int(dtype), strs)
        if status == Status.UNAVAILABLE:
            return False
        _check(status, "tpsAllReduceAddRmsNorm")
        return True

    def async_error(self):
        """Status of errors after calls returned (Status.TIMEOUT: a peer never arrived)."""
        s = ctypes.c_int()
        _check(library().tpsCommGetAsyncError(self._live(), ctypes.byref(s)), "tpsCommGetAsyncError")
        return Status(s.value)

    def config(self):
        """tpsCommGetConfig: the configuration in effect (every default resolved), as a Config."""
        c = _Config()
        _check(library().tpsCommGetConfig(self._live(), ctypes.byref(c)), "tpsCommGetConfig")
        return Config._from_c(c)

    def check(self):
        """Raises Error when the communicator had an asynchronous error (call after synchronising)."""
        s = self.async_error()
        if s != Status.SUCCESS:
            raise Error(s, "asynchronous error")

    def _live(self):
        if not self._handle:
            raise ValueError("the communicator is closed")
        return self._handle

    def close(self):
        """Frees the communicator (synchronise its streams first). Idempotent."""
        if self._handle:
            library().tpsCommDestroy(self._handle)
            self._handle = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
