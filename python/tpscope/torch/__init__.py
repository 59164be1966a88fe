# SPDX-License-Identifier: Apache-2.0
"""tpscope as a ``torch.distributed`` backend: importing this module registers ``"tpscope"``.

    import tpscope.torch                                  # builds the extension once, registers "tpscope"
    dist.init_process_group("cpu:gloo,cuda:tpscope")      # torchrun's environment, unchanged
    dist.all_reduce(x)                                    # x: a CUDA tensor; tpscope's AllReduce

Each process is one rank of a tpscope rank-per-process communicator (``tpsCommInitRank``) on its
current CUDA device (``torch.cuda.set_device`` before ``init_process_group``). Rank 0 makes the
unique id and torch's store (the one ``init_process_group`` was given, so ``torchrun`` works as it is)
carries it to the others: the id's secret is then as private as the store, the same trust NCCL's own
id gets there.

What reaches tpscope, in place, ordered on the caller's current CUDA stream:

* ``all_reduce`` (and its coalesced form) with ``ReduceOp.SUM`` on float32, float16 and bfloat16;
  also through ``torch.distributed._functional_collectives`` (what DTensor and tensor-parallel
  modules call), and inside a ``torch.cuda.graph`` capture.
* ``all_gather_into_tensor`` / ``all_gather`` and ``broadcast`` on the same dtypes, computed as an
  all-reduce over a zero-filled buffer, always on the exact wire (``tpsAllReduceWire``), whatever the
  group's: they return every value's own bits (one value summed with zeros; a negative zero comes
  back as +0), never a compressed wire's approximation. They cost world-size times a real
  all-gather's bytes; they are there so that DTensor's Shard -> Replicate (a column-parallel output
  gathered) stays on one communicator.

What does not: other dtypes, other reductions, non-contiguous tensors, tensors on another device and
every other collective are refused with one line naming the call and what to change (torch's own
"Backend tpscope does not support ..." for collectives it lacks). With ``"cpu:gloo,cuda:tpscope"``,
CPU tensors, ``barrier`` and object collectives go to gloo as torch's device map sends them.

Work and streams, as torch documents for CUDA backends: ``work.wait()`` makes the current stream
wait for the call (the CPU does not wait); ``work.get_future()`` completes once the call has finished
on the GPU, with the tensors or with the error. Faults: a rank that dies or stops calling leaves the
others' calls ending after the communicator's spin timeout (``Config.spin_timeout_ms``, tpscope's
bound) with ``tpsTimeout``; the future carries it, ``wait()`` raises once it is known, and every later
call raises: destroy the process group.

Configuration: ``init_process_group(..., pg_options=tpscope.Config(...))`` configures that group's
communicator (torch hands a CUDA backend's options to it; gloo's side of ``"cpu:gloo,cuda:tpscope"``
ignores them); without ``pg_options``, ``set_config(tpscope.Config(...))`` sets the configuration of the
communicators made after it. For example ``shared_devices=True`` to let ranks share one GPU (a test
setup; never for timings), or the wire the AllReduce travels as: ``tpscope.Config(wire="int8")`` (or
``wire=tpscope.Wire.INT8``; ``"auto:0.01"`` picks per size under a relative RMS error budget, from the
tune file's wire table). The wire left at its default (exact) follows ``TPSCOPE_WIRE`` in each rank's
environment, as for any communicator; every rank must ask for the same wire. The wire applies to
``all_reduce`` alone (gathers and broadcasts stay exact, above). A compressed wire is lossy: each rank
still ends with the same bits, but not with the exact sum (see tpscope.h, tpsWire_t).

The extension is compiled on first use with ``torch.utils.cpp_extension`` (g++ and ninja, the CUDA
headers torch was built against) against the torch this process runs, the libtpscope.so that
``tpscope.library()`` loads and the ``tpscope/tpscope.h`` beside it (the wheel's ``include/``,
``<prefix>/include``, this checkout's ``include/``, or ``TPSCOPE_INCLUDE_DIR``). It is compiled here
rather than shipped in the wheel because torch's C++ interface changes with every torch release: a
prebuilt one would pin the torch of everyone who installs tpscope, where a torchrun user's torch is
chosen by the rest of their stack. The build is kept per tpscope, torch and Python version (under
``TORCH_EXTENSIONS_DIR``, by default ``~/.cache/torch_extensions``); the one process that builds it (of
all the ranks starting at once) says once on stderr how long that took, the others wait for it.
"""

import hashlib
import os
import sys
import time

import torch
import torch.distributed as dist

import tpscope

__all__ = ["BACKEND", "extension", "set_config", "get_config", "backend_config", "create_backend"]

BACKEND = "tpscope"
_UID_KEY = "tpscope/unique_id"

_ext = None
_config = tpscope.Config()


def set_config(config):
    """The tpscope.Config of communicators made from now on (None: defaults)."""
    global _config
    if config is not None and not isinstance(config, tpscope.Config):
        raise TypeError("set_config takes a tpscope.Config, not %s" % type(config).__name__)
    _config = config if config is not None else tpscope.Config()


def get_config():
    return _config


def _library_path():
    """The file of the libtpscope.so the ctypes binding loaded (the extension links the same one)."""
    lib = tpscope.library()
    if os.path.sep in lib._name and os.path.exists(lib._name):
        return os.path.realpath(lib._name)
    path = _mapped_file("libtpscope.so")
    if path is None:
        raise OSError("cannot tell which file libtpscope.so was loaded from; set TPSCOPE_LIBRARY to its path")
    return path


def _mapped_file(prefix):
    """The file this process has mapped whose name starts with `prefix`, or None."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1] if len(line.split()) >= 6 else ""
                if os.path.basename(path).startswith(prefix):
                    return path
    except OSError:
        pass
    return None


def _include_dir(lib_path):
    here = os.path.dirname(os.path.abspath(__file__))
    lib_dir = os.path.dirname(lib_path)
    candidates = [os.environ.get("TPSCOPE_INCLUDE_DIR", ""),
                  os.path.join(lib_dir, "..", "include"),  # the wheel, an install: <prefix>/lib, <prefix>/include
                  os.path.join(lib_dir, "..", "..", "include"),  # a build folder in a checkout: build/lib
                  os.path.join(here, "..", "..", "..", "include")]  # this checkout: python/tpscope/torch
    for d in candidates:
        if d and os.path.exists(os.path.join(d, "tpscope", "tpscope.h")):
            return os.path.realpath(d)
    raise OSError("tpscope/tpscope.h not found (looked in %s); set TPSCOPE_INCLUDE_DIR to the folder that holds "
                  "tpscope/tpscope.h" % ", ".join(c for c in candidates if c))


def _libstdcxx_flags():
    """The C++ runtime this process runs with (torch's libstdc++.so), linked by its file: a compiler
    without a shared libstdc++ of its own would otherwise copy its static one into the extension, and
    two copies of the runtime's locale state in one process crash the first time the extension
    formats a number (a refusal's message with a tensor's strides)."""
    path = _mapped_file("libstdc++.so")
    return [path] if path else []


_NAME = "tpscope_c10d"


def _build_directory(lib):
    """Where the extension is built and kept: one folder per tpscope version, torch version, Python and
    library file, so that no two of them rebuild each other's."""
    root = os.environ.get("TORCH_EXTENSIONS_DIR") or os.path.join(os.path.expanduser("~"), ".cache",
                                                                   "torch_extensions")
    key = "%s-torch%s-py%d%d-%s" % (tpscope.__version__, torch.__version__, sys.version_info[0], sys.version_info[1],
                                     hashlib.sha256(lib.encode()).hexdigest()[:10])
    return os.path.join(root, _NAME + "-" + key.replace("+", "_"))


def _compile(lib, build_dir):
    from torch.utils import cpp_extension
    # No CUDA sources: the arch list only has to be non-empty where no GPU is there to ask.
    if not torch.cuda.is_available():
        os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
    return cpp_extension.load(
        name=_NAME,
        sources=[os.path.join(os.path.dirname(os.path.abspath(__file__)), "backend.cpp")],
        extra_include_paths=[_include_dir(lib)],
        extra_cflags=["-O2", "-std=c++17"],
        extra_ldflags=[lib, "-Wl,-rpath," + os.path.dirname(lib)] + _libstdcxx_flags(),
        with_cuda=True,
        build_directory=build_dir,
        verbose=os.environ.get("TPSCOPE_TORCH_VERBOSE_BUILD") == "1")


def extension():
    """The compiled backend module: built on the first call on this machine (one process builds, any
    others starting at the same time wait for it), then loaded from the build folder."""
    global _ext
    if _ext is None:
        from torch.utils.file_baton import FileBaton
        lib = _library_path()
        build_dir = _build_directory(lib)
        os.makedirs(build_dir, exist_ok=True)
        if os.path.exists(os.path.join(build_dir, _NAME + ".so")):
            _ext = _compile(lib, build_dir)  # built: ninja finds nothing to do
        else:
            baton = FileBaton(os.path.join(build_dir, "tpscope-build.lock"))
            if baton.try_acquire():
                try:
                    start = time.monotonic()
                    sys.stderr.write("tpscope.torch: compiling the torch.distributed extension against torch %s "
                                     "(once; kept in %s)\n" % (torch.__version__, build_dir))
                    _ext = _compile(lib, build_dir)
                    sys.stderr.write("tpscope.torch: the extension took %.0f s to build\n" % (time.monotonic() - start))
                finally:
                    baton.release()
            else:
                baton.wait()
                _ext = _compile(lib, build_dir)
        if _ext.config_bytes() != len(bytes(tpscope.Config()._c())):
            raise RuntimeError("tpscope.torch: the library's tpsConfig_t is %d bytes, the binding's %d"
                               % (_ext.config_bytes(), len(bytes(tpscope.Config()._c()))))
    return _ext


def backend_config(pg_options):
    """The tpscope.Config a group's communicator is made with: its ``pg_options`` when given (a
    tpscope.Config), else set_config's. TypeError for anything else, naming it."""
    if pg_options is None:
        return _config
    if not isinstance(pg_options, tpscope.Config):
        raise TypeError("tpscope: pg_options must be a tpscope.Config (e.g. tpscope.Config(wire=\"int8\")), not %s"
                        % type(pg_options).__name__)
    return pg_options


def create_backend(opts, pg_options):
    """torch.distributed's creator (its extended form: the group's options and ``pg_options``): joins
    this rank to a fresh tpscope communicator on the current CUDA device, the id handed over through
    the group's store, configured by backend_config(pg_options)."""
    config = backend_config(pg_options)
    ext = extension()
    if not torch.cuda.is_available():
        raise RuntimeError("tpscope: the backend needs a CUDA device (torch.cuda.is_available() is False)")
    if opts.group_rank == 0:
        opts.store.set(_UID_KEY, tpscope.get_unique_id())
    uid = opts.store.get(_UID_KEY)
    return ext.TpscopeBackend(opts.group_rank, opts.group_size, bytes(uid), torch.cuda.current_device(),
                              bytes(config._c()))


dist.Backend.register_backend(BACKEND, create_backend, extended_api=True, devices=["cuda"])
