# SPDX-License-Identifier: Apache-2.0
"""The binding's argument handling, without a GPU: tensors (stand-ins with torch's attributes) and
pointers turned into the C call's arguments, Python-side refusals, and the library's statuses raised
as tpscope.Error. The library is TPSCOPE_LIBRARY (CTest sets it to the build's libtpscope.so)."""

import ctypes
import json
import os
import re
import subprocess
import sys
import threading
import time
import unittest

# The join's bound, read once by the library when it first needs it: short, so the timeout test is quick.
os.environ.setdefault("TPSCOPE_BOOTSTRAP_TIMEOUT_MS", "600")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import package_under_test  # noqa: E402
package_under_test.use()

import tpscope  # noqa: E402


class FakeTensor:
    """What the binding reads of a torch.Tensor."""

    def __init__(self, ptr, numel, dtype="torch.bfloat16", cuda=True, contiguous=True):
        self._ptr, self._numel, self.dtype, self.is_cuda, self._contiguous = ptr, numel, dtype, cuda, contiguous
        self.device = "cuda:0" if cuda else "cpu"

    def data_ptr(self):
        return self._ptr

    def numel(self):
        return self._numel

    def is_contiguous(self):
        return self._contiguous


class FakeStream:
    def __init__(self, handle):
        self.cuda_stream = handle


def fake_comm(local=1):
    """A Communicator whose C handle is never used: for the checks made before any call."""
    c = object.__new__(tpscope.Communicator)
    c._handle, c.local_size, c.nranks, c.rank = None, local, 2, 0
    return c


class Arguments(unittest.TestCase):
    def test_tensor_gives_pointer_count_dtype(self):
        ptrs, count, dtype, streams = fake_comm()._buffers(FakeTensor(0x7000, 4096), None, None,
                                                           FakeStream(0x99), "t")
        self.assertEqual(ptrs[0], 0x7000)
        self.assertEqual(count, 4096)
        self.assertEqual(dtype, tpscope.DataType.BFLOAT16)
        self.assertEqual(streams[0], 0x99)

    def test_torch_dtypes_and_names(self):
        self.assertEqual(tpscope._dtype("torch.float16"), tpscope.DataType.FLOAT16)
        self.assertEqual(tpscope._dtype("f32"), tpscope.DataType.FLOAT32)
        self.assertEqual(tpscope._dtype(2), tpscope.DataType.BFLOAT16)
        with self.assertRaises(TypeError):
            tpscope._dtype("torch.int8")

    def test_pointer_needs_count_dtype_and_stream(self):
        c = fake_comm()
        with self.assertRaisesRegex(ValueError, "count is needed"):
            c._buffers(0x1000, None, "bf16", 5, "t")
        with self.assertRaisesRegex(ValueError, "dtype is needed"):
            c._buffers(0x1000, 8, None, 5, "t")
        with self.assertRaisesRegex(ValueError, "a stream is needed"):
            c._buffers(0x1000, 8, "bf16", None, "t")
        ptrs, count, dtype, streams = c._buffers(0x1000, 8, "bf16", 5, "t")
        self.assertEqual((ptrs[0], count, dtype, streams[0]), (0x1000, 8, tpscope.DataType.BFLOAT16, 5))

    def test_refusals(self):
        c = fake_comm()
        with self.assertRaisesRegex(ValueError, "not a CUDA tensor"):
            c._buffers(FakeTensor(0x10, 8, cuda=False), None, None, 5, "t")
        with self.assertRaisesRegex(ValueError, "not contiguous"):
            c._buffers(FakeTensor(0x10, 8, contiguous=False), None, None, 5, "t")
        with self.assertRaisesRegex(ValueError, "legacy default stream"):
            c._buffers(FakeTensor(0x10, 8), None, None, FakeStream(0), "t")
        with self.assertRaisesRegex(ValueError, "fewer than count"):
            c._buffers(FakeTensor(0x10, 8), 16, None, 5, "t")
        with self.assertRaisesRegex(ValueError, "dtype is not float32"):
            c._buffers(FakeTensor(0x10, 8), None, "f32", 5, "t")
        with self.assertRaisesRegex(ValueError, "null or negative"):
            c._buffers(0, 8, "bf16", 5, "t")
        with self.assertRaises(TypeError):
            c._buffers("0x10", 8, "bf16", 5, "t")

    def test_one_buffer_per_local_gpu(self):
        c = fake_comm(local=2)
        with self.assertRaisesRegex(ValueError, "2 expected"):
            c._buffers(FakeTensor(0x10, 8), None, None, [5, 6], "t")
        ptrs, count, _, streams = c._buffers([FakeTensor(0x10, 8), FakeTensor(0x20, 8)], None, None, [5, 6], "t")
        self.assertEqual((ptrs[0], ptrs[1], streams[0], streams[1], count), (0x10, 0x20, 5, 6, 8))
        with self.assertRaisesRegex(ValueError, "count is needed"):
            c._buffers([FakeTensor(0x10, 8), FakeTensor(0x20, 9)], None, None, [5, 6], "t")

    def test_call_wire(self):
        self.assertEqual(tpscope._call_wire(tpscope.Wire.EXACT), tpscope.Wire.EXACT)
        self.assertEqual(tpscope._call_wire("int8"), tpscope.Wire.INT8)
        self.assertEqual(tpscope._call_wire("auto"), tpscope.Wire.AUTO)
        self.assertEqual(tpscope._call_wire(3), tpscope.Wire.FP8)
        for bad in ("auto:0.01", "INT8", "lossy", 6, -1):
            with self.assertRaisesRegex(ValueError, "wire"):
                tpscope._call_wire(bad)
        for bad in (None, 2.0, True):
            with self.assertRaises(TypeError):
                tpscope._call_wire(bad)
        # The wire is checked before anything else of the call; a good one reaches the (closed) handle.
        c = fake_comm()
        with self.assertRaisesRegex(ValueError, "not a tpscope.Wire"):
            c.all_reduce(FakeTensor(0x10, 8), streams=FakeStream(5), wire=99)
        with self.assertRaisesRegex(ValueError, "closed"):
            c.all_reduce(FakeTensor(0x10, 8), streams=FakeStream(5), wire="exact")

    def test_config_refuses_negative_values(self):
        with self.assertRaises(ValueError):
            tpscope.Config(spin_timeout_ms=-1)
        self.assertEqual(tpscope.Config(backend=tpscope.Backend.P2P)._c().backend, 2)

    def test_config_carries_shared_devices(self):
        self.assertEqual(tpscope.Config()._c().shared_devices, 0)
        self.assertEqual(tpscope.Config(shared_devices=True)._c().shared_devices, 1)

    def test_config_comes_back_from_its_c_struct(self):
        c = tpscope.Config(backend=tpscope.Backend.HOST, host_blocks=16, spin_timeout_ms=500, shared_devices=True)
        back = tpscope.Config._from_c(c._c())
        self.assertEqual((back.backend, back.host_blocks, back.spin_timeout_ms, back.shared_devices),
                         (tpscope.Backend.HOST, 16, 500, True))


    def test_wire_as_tpscope_wire_writes_it(self):
        """parse_wire reads what TPSCOPE_WIRE takes (the library's parseWirePolicy), and Config takes it."""
        self.assertEqual(tpscope.parse_wire("exact"), (tpscope.Wire.EXACT, 0.0))
        self.assertEqual(tpscope.parse_wire("int4"), (tpscope.Wire.INT4, 0.0))
        self.assertEqual(tpscope.parse_wire("auto:0.01"), (tpscope.Wire.AUTO, 0.01))
        self.assertEqual(tpscope.parse_wire("auto:1e-3"), (tpscope.Wire.AUTO, 0.001))
        for bad in ("", "INT8", "auto", "auto:", "auto:0", "auto:1", "auto:-0.1", "auto:nan", "auto:inf", "auto: 0.1",
                    "auto:0.1 ", "auto:1_0", "int8 ", "lossy"):
            with self.assertRaises(ValueError, msg=bad):
                tpscope.parse_wire(bad)
        with self.assertRaises(TypeError):
            tpscope.parse_wire(2)
        c = tpscope.Config(wire="fp8")._c()
        self.assertEqual((c.wire, c.wire_error_budget), (int(tpscope.Wire.FP8), 0.0))
        c = tpscope.Config(wire="auto:0.25")._c()
        self.assertEqual((c.wire, c.wire_error_budget), (int(tpscope.Wire.AUTO), 0.25))
        self.assertEqual(tpscope.Config(wire=tpscope.Wire.INT8)._c().wire, 2)
        self.assertEqual(tpscope.Config()._c().wire, 0)  # exact: TPSCOPE_WIRE decides in the library
        self.assertEqual(tpscope.Config._from_c(tpscope.Config(wire="auto:0.25")._c()).wire, tpscope.Wire.AUTO)
        with self.assertRaisesRegex(ValueError, "not both"):
            tpscope.Config(wire="auto:0.1", wire_error_budget=0.2)
        with self.assertRaisesRegex(ValueError, "int9"):
            tpscope.Config(wire="int9")
        with self.assertRaises(ValueError):
            tpscope.Config(wire=tpscope.Wire.AUTO)  # no budget

    def test_config_carries_peer_uids(self):
        c = tpscope.Config(peer_uids=[1000, 65534])._c()
        self.assertEqual((c.num_peer_uids, list(c.peer_uids)), (2, [1000, 65534, 0, 0, 0, 0, 0, 0]))
        self.assertEqual(tpscope.Config._from_c(c).peer_uids, (1000, 65534))
        self.assertEqual(tpscope.Config()._c().num_peer_uids, 0)
        with self.assertRaisesRegex(ValueError, "at most 8"):
            tpscope.Config(peer_uids=range(9))
        for bad in (-1, 2 ** 32, True, "0"):
            with self.assertRaisesRegex(ValueError, "no uid"):
                tpscope.Config(peer_uids=[bad])


def header_fields(struct_name):
    """The field names of a typedef struct in tpscope.h, in order, read from the header's text."""
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "..", "include", "tpscope", "tpscope.h")) as f:
        text = f.read()
    body = re.search(r"typedef struct \{((?:(?!typedef struct).)*?)\} %s;" % struct_name, text, re.S).group(1)
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    # Each declaration ends with its name, and an array's with [size] after it.
    return [re.search(r"([A-Za-z_]\w*)\s*(?:\[[^\]]*\])?\s*$", decl).group(1)
            for decl in body.split(";") if decl.strip()]


class ConfigLayout(unittest.TestCase):
    """tpscope._Config against tpsConfig_t as a C compiler lays it out (the program CTest names in
    TPSCOPE_CONFIG_LAYOUT, tests/unit/config_layout.c), and against the header's own field list."""

    def c_layout(self):
        program = os.environ.get("TPSCOPE_CONFIG_LAYOUT")
        if not program:
            self.skipTest("TPSCOPE_CONFIG_LAYOUT is not set (CTest sets it to the build's tpscope_config_layout)")
        return json.loads(subprocess.run([program], check=True, capture_output=True, text=True).stdout)

    def test_ctypes_struct_matches_the_c_layout(self):
        c = self.c_layout()
        ours = [(name, getattr(tpscope._Config, name).offset, getattr(tpscope._Config, name).size)
                for name, _ in tpscope._Config._fields_]
        theirs = [(f["name"], f["offset"], f["size"]) for f in c["fields"]]
        self.assertEqual(ours, theirs, "tpscope._Config's (name, offset, size) differ from tpsConfig_t's")
        self.assertEqual(ctypes.sizeof(tpscope._Config), c["size"])
        self.assertEqual(ctypes.alignment(tpscope._Config), c["align"])

    def test_layout_program_names_every_field_of_the_header(self):
        c = self.c_layout()
        self.assertEqual([f["name"] for f in c["fields"]], header_fields("tpsConfig_t"),
                         "tests/unit/config_layout.c does not list tpsConfig_t's fields as tpscope.h declares them")

    def test_library_reads_num_peer_uids_where_the_binding_writes_it(self):
        # A count out of range is refused by tpsCommInitRank before any join: only if the library finds
        # the binding's num_peer_uids at its own offset.
        cfg = tpscope.Config()._c()
        cfg.num_peer_uids = tpscope.MAX_PEER_UIDS + 1
        uid = tpscope._UniqueId()
        ctypes.memmove(ctypes.addressof(uid), tpscope.get_unique_id(), tpscope.UNIQUE_ID_BYTES)
        handle = ctypes.c_void_p()
        status = tpscope.library().tpsCommInitRank(ctypes.byref(handle), 2, uid, 0, 0, ctypes.byref(cfg))
        self.assertEqual(status, tpscope.Status.INVALID_ARGUMENT)


class PackageUnderTest(unittest.TestCase):
    """The tests ran against the package they were meant for: the checkout's, or the installed wheel with
    the library it carries, found without TPSCOPE_LIBRARY, and the version its metadata has."""

    def test_the_package_and_library_under_test(self):
        path = os.path.realpath(tpscope.__file__)
        in_checkout = os.path.commonpath([path, os.path.realpath(package_under_test.CHECKOUT)]) == \
            os.path.realpath(package_under_test.CHECKOUT)
        if not package_under_test.INSTALLED:
            self.assertTrue(in_checkout, path)
            return
        self.assertFalse(in_checkout, "TPSCOPE_TEST_INSTALLED=1 but tpscope came from the checkout: " + path)
        self.assertNotIn("TPSCOPE_LIBRARY", os.environ)
        self.assertEqual(os.path.realpath(tpscope.library()._name), os.path.realpath(tpscope._BUNDLED_LIBRARY))
        from importlib import metadata
        self.assertEqual(tpscope.__version__, metadata.version("tpscope"))
        self.assertEqual(tpscope.version(), tpscope.__version__)


class Library(unittest.TestCase):
    def test_unique_ids_are_fresh_bytes(self):
        a, b = tpscope.get_unique_id(), tpscope.get_unique_id()
        self.assertEqual(len(a), tpscope.UNIQUE_ID_BYTES)
        self.assertNotEqual(a, b)

    def test_library_statuses_become_errors(self):
        uid = tpscope.get_unique_id()
        with self.assertRaises(tpscope.Error) as e:
            tpscope.Communicator.init_rank(1, uid, 0, 0)
        self.assertEqual(e.exception.status, tpscope.Status.INVALID_ARGUMENT)
        self.assertIn("tpsCommInitRank", str(e.exception))
        with self.assertRaises(tpscope.Error) as e:
            tpscope.Communicator.init_rank(2, b"\x5a" * tpscope.UNIQUE_ID_BYTES, 0, 0)
        self.assertEqual(e.exception.status, tpscope.Status.INVALID_ARGUMENT)
        with self.assertRaisesRegex(ValueError, "128 bytes"):
            tpscope.Communicator.init_rank(2, b"short", 0, 0)
        with self.assertRaisesRegex(ValueError, "2 to 8 GPUs"):
            tpscope.Communicator.create([0])

    def test_all_reduce_wire_is_exported(self):
        lib = tpscope.library()
        for wire in (tpscope.Wire.EXACT, tpscope.Wire.AUTO, 99):  # a NULL communicator comes first
            status = lib.tpsAllReduceWire(None, 0, int(wire), None, 1, 0, None)
            self.assertEqual(status, tpscope.Status.INVALID_ARGUMENT)

    def test_missing_rank_times_out(self):
        with self.assertRaises(tpscope.Error) as e:
            tpscope.Communicator.init_rank(2, tpscope.get_unique_id(), 1, 0)
        self.assertEqual(e.exception.status, tpscope.Status.TIMEOUT)

    def test_two_ranks_join_through_the_binding(self):
        # Both ranks join (threads; ctypes releases the GIL during the call) and then agree on the
        # outcome of their GPUs: a communicator with a GPU, the same error on both ranks without one.
        uid = tpscope.get_unique_id()
        outcome = [None, None]

        def rank(r):
            try:
                # Both on GPU 0; uid 65534 may join too (none does): tpsCommGetConfig gives it back.
                cfg = tpscope.Config(backend=tpscope.Backend.HOST, shared_devices=True, peer_uids=[65534])
                comm = tpscope.Communicator.init_rank(2, uid, r, 0, cfg)
                got = comm.config()
                outcome[r] = (comm.nranks, comm.rank, got.backend, got.shared_devices, got.peer_uids)
                comm.close()
            except tpscope.Error as e:
                outcome[r] = e.status
        threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
        t0 = time.time()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertLess(time.time() - t0, 5.0)
        if isinstance(outcome[0], tuple):
            host = tpscope.Backend.HOST
            self.assertEqual(sorted(outcome), [(2, 0, host, True, (65534,)), (2, 1, host, True, (65534,))])
        else:
            self.assertNotEqual(outcome[0], tpscope.Status.TIMEOUT)
            self.assertEqual(outcome[0], outcome[1])


if __name__ == "__main__":
    unittest.main()
