# SPDX-License-Identifier: Apache-2.0
"""tpscope.torch without a GPU: the extension compiles against the libtpscope.so under test, importing
registers "tpscope" for CUDA, the tensor checks give their one line, and a process group asking for
it on a machine without CUDA fails with one clear line. The collectives themselves need a GPU
(python/tests/gpu_torch_backend.py). Skips, with the reason, where torch is not installed."""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import package_under_test  # noqa: E402
package_under_test.use()

try:
    import torch
    import torch.distributed as dist
    HAVE_TORCH = True
except ImportError:  # tested by the skip below
    HAVE_TORCH = False

NO_TORCH = "torch is not installed for this python (scripts/setup installs it into .deps/torch)"


@unittest.skipUnless(HAVE_TORCH, NO_TORCH)
class TorchBackendTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import tpscope.torch  # noqa: F401  registers the backend
        cls.tt = tpscope.torch
        cls.ext = tpscope.torch.extension()  # compiles (once; torch caches it)

    def test_registered_for_cuda(self):
        self.assertIn("tpscope", dist.Backend.backend_list)
        self.assertEqual(dist.Backend.TPSCOPE, "tpscope")
        self.assertEqual(dist.Backend.backend_capability["tpscope"], ["cuda"])
        self.assertIs(dist.Backend._plugins["TPSCOPE"].creator_fn, self.tt.create_backend)
        # The extended creator: torch hands it init_process_group's pg_options.
        self.assertTrue(dist.Backend._plugins["TPSCOPE"].extended_api)

    def test_extension_matches_binding(self):
        import tpscope
        self.assertEqual(self.ext.config_bytes(), len(bytes(tpscope.Config()._c())))
        # The class torch will hold is a c10d Backend.
        self.assertTrue(issubclass(self.ext.TpscopeBackend, torch._C._distributed_c10d.Backend))

    def test_one_cxx_runtime(self):
        """The extension runs on the process's libstdc++ and carries no copy of its own: two copies'
        locale state in one process crash the first number the extension formats."""
        if not (shutil.which("readelf") and shutil.which("nm")):
            self.skipTest("readelf and nm (binutils) are not installed")
        so = self.ext.__file__
        dynamic = subprocess.run(["readelf", "-d", so], capture_output=True, text=True, check=True).stdout
        self.assertRegex(dynamic, r"NEEDED.*\[libstdc\+\+\.so", "the extension does not link libstdc++.so")
        symbols = subprocess.run(["nm", "--defined-only", so], capture_output=True, text=True, check=True).stdout
        self.assertNotIn("_ZNSt6locale7classicEv", symbols, "the extension holds a static copy of libstdc++")

    def check(self, tensor, needle):
        with self.assertRaises(RuntimeError) as cm:
            self.ext.check_tensor(tensor, 0, "all_reduce")
        first = str(cm.exception).splitlines()[0]
        self.assertIn(needle, first)
        self.assertTrue(first.startswith("tpscope: all_reduce takes"), first)

    def test_bad_dtype(self):
        for dtype in (torch.int32, torch.int64, torch.float64, torch.uint8):
            self.check(torch.zeros(4, dtype=dtype), "float32, float16 or bfloat16 tensors; got")

    def test_non_contiguous(self):
        self.check(torch.zeros(4, 4).t(), "contiguous tensors")
        self.check(torch.zeros(8)[::2], "contiguous tensors")

    def test_cpu_tensor(self):
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            self.check(torch.zeros(4, dtype=dtype), "CUDA tensors; got one on cpu")

    def test_sparse(self):
        self.check(torch.zeros(4).to_sparse(), "dense tensors")

    @unittest.skipIf(HAVE_TORCH and torch.cuda.is_available(), "a GPU is present: gpu_torch_backend.py covers it")
    def test_process_group_without_cuda(self):
        import torch.multiprocessing as mp
        with tempfile.TemporaryDirectory() as tmp:
            ctx = mp.get_context("spawn")
            q = ctx.Queue()
            p = ctx.Process(target=_init_without_cuda, args=(os.path.join(tmp, "store"), q))
            p.start()
            p.join(120)
            self.assertEqual(p.exitcode, 0)
            err = q.get(timeout=5)
        self.assertIn("tpscope: the backend needs a CUDA device", err)

    def test_unique_id_through_the_store(self):
        """Rank 0 puts a fresh id in the group's store, every rank joins with those bytes and this
        process's Config (the communicator itself, stubbed here, needs a GPU)."""
        import tpscope
        from unittest import mock
        made = []

        class Stub:
            @staticmethod
            def TpscopeBackend(rank, size, uid, device, config):
                made.append((rank, size, uid, device, config))
                return "backend"

        store = dist.HashStore()
        self.tt.set_config(tpscope.Config(shared_devices=True, spin_timeout_ms=1234))
        try:
            with mock.patch.object(self.tt, "extension", return_value=Stub), \
                    mock.patch("torch.cuda.is_available", return_value=True), \
                    mock.patch("torch.cuda.current_device", return_value=0):
                for rank in (0, 1):
                    self.assertEqual(self.tt.create_backend(_group_options(store, rank, 2), None), "backend")
        finally:
            self.tt.set_config(None)
        self.assertEqual(len(made), 2)
        (r0, n0, uid0, d0, cfg0), (r1, n1, uid1, d1, cfg1) = made
        self.assertEqual((r0, r1, n0, n1, d0, d1), (0, 1, 2, 2, 0, 0))
        self.assertEqual(len(uid0), tpscope.UNIQUE_ID_BYTES)
        self.assertEqual(uid0, uid1)
        self.assertEqual(uid0, bytes(store.get("tpscope/unique_id")))
        want = bytes(tpscope.Config(shared_devices=True, spin_timeout_ms=1234)._c())
        self.assertEqual((cfg0, cfg1), (want, want))

    def test_pg_options_configure_the_group(self):
        """init_process_group's pg_options (a tpscope.Config) configure the group's communicator, the wire
        among them; without them, set_config's configuration; anything else is refused naming it."""
        import tpscope
        from unittest import mock
        made = []

        class Stub:
            @staticmethod
            def TpscopeBackend(rank, size, uid, device, config):
                made.append(config)
                return "backend"

        self.tt.set_config(tpscope.Config(wire="fp8"))
        try:
            with mock.patch.object(self.tt, "extension", return_value=Stub), \
                    mock.patch("torch.cuda.is_available", return_value=True), \
                    mock.patch("torch.cuda.current_device", return_value=0):
                opts = _group_options(dist.HashStore(), 0, 1)
                self.tt.create_backend(opts, tpscope.Config(wire="int8", shared_devices=True))
                self.tt.create_backend(opts, None)
                with self.assertRaisesRegex(TypeError, "pg_options must be a tpscope.Config"):
                    self.tt.create_backend(opts, "int8")
        finally:
            self.tt.set_config(None)
        self.assertEqual(made[0], bytes(tpscope.Config(wire="int8", shared_devices=True)._c()))
        self.assertEqual(made[1], bytes(tpscope.Config(wire=tpscope.Wire.FP8)._c()))
        self.assertEqual(len(made), 2)
        self.assertIs(self.tt.backend_config(None), self.tt.get_config())

    def test_refuses_bad_config(self):
        with self.assertRaises(TypeError):
            self.tt.set_config("shared")
        import tpscope
        self.tt.set_config(tpscope.Config(shared_devices=True))
        self.assertTrue(self.tt.get_config().shared_devices)
        self.tt.set_config(None)
        self.assertFalse(self.tt.get_config().shared_devices)


def _group_options(store, rank, size):
    """What torch gives an extended creator (its _DistributedBackendOptions), for one rank of a group."""
    opts = dist.distributed_c10d._DistributedBackendOptions()
    opts.store, opts.group_rank, opts.group_size = store, rank, size
    return opts


def _init_without_cuda(store_path, q):
    package_under_test.use()
    import tpscope.torch  # noqa: F401
    try:
        dist.init_process_group("cpu:gloo,cuda:tpscope", init_method="file://" + store_path, rank=0, world_size=1)
        q.put("no error")
    except Exception as e:  # the message is what the test checks
        q.put(str(e).splitlines()[0] if str(e) else repr(e))


if __name__ == "__main__":
    unittest.main()
