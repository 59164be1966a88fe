// SPDX-License-Identifier: Apache-2.0
//
// tpscope as a torch.distributed (c10d) backend: one rank per process, over tpsCommInitRank.
//
// What it does with each call (tpscope/torch/__init__.py's docstring is the user's account):
//  * allreduce / allreduce_coalesced, ReduceOp.SUM on float32, float16 and bfloat16 CUDA tensors that are
//    contiguous and on this rank's device: tpsAllReduce, in place, on the communicator's wire (a
//    compressed one when the config names it).
//  * _allgather_base / allgather_into_tensor_coalesced / allgather and broadcast, for the same dtypes, as
//    an all-reduce over a zero-filled buffer on the exact wire whatever the communicator's
//    (tpsAllReduceWire, tpsWireExact): each rank writes its own part (or the root its tensor) and the sum
//    of one value with zeros is that value, bit for bit (a negative zero comes back as +0), where a
//    compressed wire would quantise it. This costs world-size times the bytes of a real all-gather; it is
//    there so that DTensor's Shard -> Replicate (a column-parallel output gathered) runs on the same
//    communicator.
//  * barrier on a CUDA device (barrier(device_ids=...), a group bound to a device): a one-word
//    all-reduce on the exact wire that the CPU waits for.
//  * Everything else: torch's own "Backend tpscope does not support X" (with "cpu:gloo,cuda:tpscope",
//    CPU tensors never reach this backend).
//
// Streams. A call is ordered on the caller's current stream. The library refuses the legacy default
// stream (PyTorch's default), so a call made there runs on a side stream of this backend that waits for
// the current stream first; Work::wait() then makes the waiting stream wait for it (NCCL's semantics).
// Under CUDA graph capture the current stream is never the legacy one, so the call is captured on it.
// A call on another stream than the last one waits for the last one (the ranks' calls must reach the
// GPU in the order they were made; two streams would let a later call overtake an earlier one).
//
// Completion and faults. A watcher thread polls each eager Work's end event; once the GPU is done it
// reads the communicator's asynchronous error and completes the Work's future with the tensors or with
// that error (tpsTimeout when a peer never came: a dead rank surfaces within the communicator's
// spin_timeout_ms, never a hang). wait() raises once the failure is known, and every later call raises
// (the library refuses a communicator after an asynchronous error). Captured calls get no watcher (a
// graph's replays are the caller's to synchronise); their future is complete at once.

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <pybind11/chrono.h>
#include <torch/extension.h>
#include <tpscope/tpscope.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

namespace tpscope_torch {

namespace {

void check_cuda(cudaError_t err, const char* what) {
  TORCH_CHECK(err == cudaSuccess, "tpscope: ", what, ": ", cudaGetErrorString(err));
}

void check_tps(tpsResult_t r, const char* what) {
  TORCH_CHECK(r == tpsSuccess, "tpscope: ", what, " failed: ", tpsGetErrorString(r),
              " (the library's log line on stderr says more)");
}

// The one line each refused tensor gets (dtype and layout first, so that they can be checked anywhere).
tpsDataType_t check_tensor(const at::Tensor& t, int device, const char* op) {
  TORCH_CHECK(t.layout() == at::kStrided, "tpscope: ", op, " takes dense tensors; got a ", t.layout(), " one");
  tpsDataType_t dtype = tpsNumDataTypes;
  switch (t.scalar_type()) {
    case at::kFloat: dtype = tpsFloat32; break;
    case at::kHalf: dtype = tpsFloat16; break;
    case at::kBFloat16: dtype = tpsBfloat16; break;
    default: TORCH_CHECK(false, "tpscope: ", op, " takes float32, float16 or bfloat16 tensors; got ", t.scalar_type());
  }
  TORCH_CHECK(t.is_contiguous(), "tpscope: ", op, " takes contiguous tensors; got one of strides ", t.strides(),
              " (call .contiguous() first)");
  TORCH_CHECK(t.device().is_cuda(), "tpscope: ", op, " takes CUDA tensors; got one on ", t.device().str(),
              " (with \"cpu:gloo,cuda:tpscope\" CPU tensors go to gloo)");
  TORCH_CHECK(t.device().index() == device, "tpscope: ", op, " takes tensors on this rank's device cuda:", device,
              "; got one on ", t.device().str());
  return dtype;
}

// The id of the CUDA graph capture a stream is in; 0 when it is not being captured.
unsigned long long capture_id(cudaStream_t s) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  check_cuda(cudaStreamGetCaptureInfo(s, &status, &id), "cudaStreamGetCaptureInfo");
  return status == cudaStreamCaptureStatusNone ? 0 : id;
}

// The last call's stream and an event recorded after it: the next call on another stream waits for
// it, so that the communicator's calls run on the GPU in the order they were made, as the ranks must
// see them, whichever streams the caller used (one stream per communicator would do the same, at the
// price of a fork and a join per call).
struct Chain {
  cudaEvent_t event = nullptr;
  cudaStream_t stream = nullptr;
  unsigned long long capture = 0;  // the capture it was recorded in (0: eager)
  bool recorded = false;
};

}  // namespace

class TpscopeBackend;

// One enqueued call: its end event, the tensors it wrote, and a CPU future the watcher completes.
class TpscopeWork : public c10d::Work {
 public:
  TpscopeWork(int rank, c10d::OpType op, std::vector<at::Tensor> outputs, int device, cudaEvent_t end, bool captured,
              std::shared_ptr<std::atomic<int>> comm_error)
      : c10d::Work(rank, op),
        outputs_(std::move(outputs)),
        device_(device),
        end_(end),
        captured_(captured),
        comm_error_(std::move(comm_error)),
        future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

  ~TpscopeWork() override {
    // Safe while the event is pending (CUDA frees it once it completes); no device guard, which could
    // throw from a destructor.
    if (end_ != nullptr) cudaEventDestroy(end_);
  }

  bool isCompleted() override { return future_->completed(); }
  bool isSuccess() const override { return future_->completed() && !future_->hasError(); }
  std::exception_ptr exception() const override { return future_->completed() ? future_->exception_ptr() : nullptr; }
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  // torch's semantics for CUDA work: the current stream waits for the call (the CPU does not), and a
  // failure already known raises. A timeout other than the default also blocks the CPU up to it.
  bool wait(std::chrono::milliseconds timeout) override {
    c10::cuda::CUDAGuard guard(device_);
    cudaStream_t current = at::cuda::getCurrentCUDAStream(device_).stream();
    // A captured call's event belongs to its capture: waited for there (the graph's replays are then the
    // caller's to order), never from outside it.
    if (!captured_ || capture_id(current) != 0)
      check_cuda(cudaStreamWaitEvent(current, end_, 0), "cudaStreamWaitEvent");
    if (timeout != kNoTimeout && !captured_) {
      auto deadline = std::chrono::steady_clock::now() + timeout;
      while (!future_->completed()) {
        TORCH_CHECK(std::chrono::steady_clock::now() < deadline, "tpscope: ", c10d::opTypeToString(opType_),
                    " did not finish within ", timeout.count(), " ms");
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    }
    if (future_->completed() && future_->hasError()) std::rethrow_exception(future_->exception_ptr());
    int err = comm_error_->load();
    TORCH_CHECK(err == tpsSuccess,
                "tpscope: the communicator failed earlier: ", tpsGetErrorString(static_cast<tpsResult_t>(err)),
                " (a peer rank died or stopped calling); destroy the process group");
    return true;
  }

  void synchronize() override { wait(kNoTimeout); }

  // Called by the watcher once the end event has completed (or at once for captured calls).
  void finish(tpsResult_t async_error) {
    if (async_error == tpsSuccess) {
      future_->markCompleted(c10::IValue(outputs_));
    } else {
      future_->setError(std::make_exception_ptr(std::runtime_error(
          c10::str("tpscope: ", c10d::opTypeToString(opType_), " failed on the GPU: ", tpsGetErrorString(async_error),
                   " (a peer rank died or stopped calling within the spin timeout)"))));
    }
  }

  cudaEvent_t end() const { return end_; }
  bool captured() const { return captured_; }

 private:
  std::vector<at::Tensor> outputs_;
  int device_;
  cudaEvent_t end_;
  bool captured_;
  std::shared_ptr<std::atomic<int>> comm_error_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class TpscopeBackend : public c10d::Backend {
 public:
  // uid: the tpsUniqueId's bytes; config: a tpsConfig_t's bytes (the ctypes binding's struct).
  TpscopeBackend(int rank, int size, const std::string& uid, int device, const std::string& config)
      : c10d::Backend(rank, size), device_(device), comm_error_(std::make_shared<std::atomic<int>>(tpsSuccess)) {
    TORCH_CHECK(uid.size() == sizeof(tpsUniqueId), "tpscope: a unique id is ", sizeof(tpsUniqueId), " bytes; got ",
                uid.size());
    TORCH_CHECK(config.size() == sizeof(tpsConfig_t), "tpscope: a tpsConfig_t is ", sizeof(tpsConfig_t), " bytes; got ",
                config.size(), " (the Python binding and the library disagree)");
    tpsUniqueId id;
    std::memcpy(&id, uid.data(), sizeof id);
    tpsConfig_t cfg;
    std::memcpy(&cfg, config.data(), sizeof cfg);
    c10::cuda::CUDAGuard guard(device_);
    {
      pybind11::gil_scoped_release nogil;  // the join waits for the other ranks
      check_tps(tpsCommInitRank(&comm_, size, id, rank, device_, &cfg), "tpsCommInitRank");
    }
    side_ = at::cuda::getStreamFromPool(/*isHighPriority=*/false, device_);
    check_cuda(cudaEventCreateWithFlags(&eager_chain_.event, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(cudaEventCreateWithFlags(&capture_chain_.event, cudaEventDisableTiming), "cudaEventCreate");
    watcher_ = std::thread([this] { watch(); });
  }

  ~TpscopeBackend() override { shutdown(); }

  const std::string getBackendName() const override { return "tpscope"; }

  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) return;
      stopping_ = true;
    }
    cv_.notify_all();
    if (watcher_.joinable()) watcher_.join();
    if (comm_ != nullptr) {
      // Raw calls, errors ignored: this also runs from the destructor, where nothing may throw.
      int previous = -1;
      cudaGetDevice(&previous);
      cudaSetDevice(device_);
      // The library waits for nothing: its buffers must outlive the calls queued (eager ones; a
      // captured graph replayed after the group is gone is the caller's error).
      if (eager_chain_.recorded) cudaEventSynchronize(eager_chain_.event);
      tpsCommDestroy(comm_);
      comm_ = nullptr;
      cudaEventDestroy(eager_chain_.event);
      cudaEventDestroy(capture_chain_.event);
      if (previous >= 0) cudaSetDevice(previous);
    }
  }

  void abort() override { shutdown(); }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    TORCH_CHECK(tensors.size() == 1, "tpscope: all_reduce takes one tensor per rank; got ", tensors.size());
    c10d::AllreduceCoalescedOptions coalesced;
    coalesced.reduceOp = opts.reduceOp;
    coalesced.timeout = opts.timeout;
    return allreduce_coalesced(tensors, coalesced);
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override {
    check_sum(opts.reduceOp, "all_reduce");
    std::vector<tpsDataType_t> dtypes;
    for (const auto& t : tensors) dtypes.push_back(check_tensor(t, device_, "all_reduce"));
    return enqueue(c10d::OpType::ALLREDUCE, tensors, [&](cudaStream_t s) {
      for (size_t i = 0; i < tensors.size(); ++i) reduce(tensors[i], dtypes[i], s, tpsWireAuto);
    });
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override {
    std::vector<at::Tensor> outputs{output}, inputs{input};
    return allgather_into_tensor_coalesced(outputs, inputs, opts);
  }

  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions&) override {
    TORCH_CHECK(outputs.size() == inputs.size(), "tpscope: all_gather: ", outputs.size(), " outputs for ",
                inputs.size(), " inputs");
    std::vector<tpsDataType_t> dtypes;
    for (size_t i = 0; i < inputs.size(); ++i) {
      dtypes.push_back(check_tensor(outputs[i], device_, "all_gather"));
      check_tensor(inputs[i], device_, "all_gather");
      TORCH_CHECK(inputs[i].scalar_type() == outputs[i].scalar_type(), "tpscope: all_gather: input ",
                  inputs[i].scalar_type(), " and output ", outputs[i].scalar_type(), " differ");
      TORCH_CHECK(outputs[i].numel() == inputs[i].numel() * size_, "tpscope: all_gather: the output holds ",
                  outputs[i].numel(), " elements, not world size x ", inputs[i].numel());
    }
    return enqueue(c10d::OpType::_ALLGATHER_BASE, outputs, [&](cudaStream_t s) {
      for (size_t i = 0; i < outputs.size(); ++i) {
        int64_t n = inputs[i].numel();
        at::Tensor flat = outputs[i].view({-1});
        flat.zero_();
        flat.narrow(0, rank_ * n, n).copy_(inputs[i].view({-1}));
        reduce(outputs[i], dtypes[i], s, tpsWireExact);
      }
    });
  }

  // The list form: gathered into one buffer, then copied out on the same stream.
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions&) override {
    TORCH_CHECK(inputs.size() == 1 && outputs.size() == 1, "tpscope: all_gather takes one tensor per rank");
    TORCH_CHECK(static_cast<int>(outputs[0].size()) == size_, "tpscope: all_gather takes world-size outputs; got ",
                outputs[0].size());
    at::Tensor& input = inputs[0];
    tpsDataType_t dtype = check_tensor(input, device_, "all_gather");
    for (const auto& o : outputs[0]) {
      check_tensor(o, device_, "all_gather");
      TORCH_CHECK(o.scalar_type() == input.scalar_type() && o.numel() == input.numel(),
                  "tpscope: all_gather: each output must match the input's dtype and size");
    }
    std::vector<at::Tensor> outs = outputs[0];
    return enqueue(c10d::OpType::ALLGATHER, outs, [&](cudaStream_t s) {
      int64_t n = input.numel();
      at::Tensor flat = at::zeros({n * size_}, input.options());
      flat.narrow(0, rank_ * n, n).copy_(input.view({-1}));
      reduce(flat, dtype, s, tpsWireExact);
      for (int r = 0; r < size_; ++r) outs[r].view({-1}).copy_(flat.narrow(0, r * n, n));
    });
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    TORCH_CHECK(tensors.size() == 1, "tpscope: broadcast takes one tensor per rank; got ", tensors.size());
    tpsDataType_t dtype = check_tensor(tensors[0], device_, "broadcast");
    return enqueue(c10d::OpType::BROADCAST, tensors, [&](cudaStream_t s) {
      if (rank_ != opts.rootRank) tensors[0].zero_();
      reduce(tensors[0], dtype, s, tpsWireExact);
    });
  }

  // barrier(device_ids=[...]) and a group bound to a device land here: a one-word all-reduce that the
  // CPU waits for, as ProcessGroupNCCL's barrier does.
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions&) override {
    c10::cuda::CUDAGuard guard(device_);
    std::vector<at::Tensor> word{at::zeros({2}, at::TensorOptions().device(at::kCUDA, device_).dtype(at::kFloat))};
    auto work =
        enqueue(c10d::OpType::BARRIER, word, [&](cudaStream_t s) { reduce(word[0], tpsFloat32, s, tpsWireExact); });
    auto future = work->getFuture();
    if (PyGILState_Check()) {  // torch's binding releases the GIL before a collective; a direct call may not
      pybind11::gil_scoped_release nogil;
      future->wait();  // rethrows the call's error
    } else {
      future->wait();
    }
    return work;
  }

 private:
  static void check_sum(const c10d::ReduceOp& op, const char* what) {
    TORCH_CHECK(op.op_ == c10d::ReduceOp::SUM, "tpscope: ", what, " supports ReduceOp.SUM only");
  }

  // The in-place sum of t over the ranks on `wire`: tpsWireAuto, the communicator's (all_reduce);
  // tpsWireExact for the collectives that must return values unchanged (all_gather, broadcast).
  void reduce(const at::Tensor& t, tpsDataType_t dtype, cudaStream_t s, tpsWire_t wire) {
    if (t.numel() == 0) return;
    void* buf = t.data_ptr();
    tpsStream_t stream = reinterpret_cast<tpsStream_t>(s);
    tpsResult_t r = tpsAllReduceWire(comm_, tpsBackendAuto, wire, &buf, static_cast<size_t>(t.numel()), dtype, &stream);
    if (r != tpsSuccess) {
      tpsResult_t async = tpsSuccess;
      tpsCommGetAsyncError(comm_, &async);
      if (async != tpsSuccess) comm_error_->store(async);
      TORCH_CHECK(false, "tpscope: tpsAllReduce failed: ", tpsGetErrorString(r),
                  async != tpsSuccess ? c10::str(" (after an earlier failure on the GPU: ", tpsGetErrorString(async),
                                                 "; a peer rank died or stopped calling)")
                                      : std::string(" (the library's log line on stderr says more)"));
    }
  }

  // Runs body on the stream the call is ordered on and returns its Work.
  template <typename Body>
  c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType op, std::vector<at::Tensor>& outputs, Body body) {
    TORCH_CHECK(comm_ != nullptr, "tpscope: the process group was shut down");
    c10::cuda::CUDAGuard guard(device_);
    c10::cuda::CUDAStream current = at::cuda::getCurrentCUDAStream(device_);
    unsigned long long capture = capture_id(current.stream());
    bool captured = capture != 0;
    // The legacy default stream (PyTorch's default, never a capture's): the library refuses it, so
    // the call runs on the side stream, after what the current stream has queued.
    bool side = current.stream() == nullptr && !captured;
    c10::cuda::CUDAStream stream = side ? side_ : current;
    // Eager calls chain to the last eager call, captured ones to the last call of the same capture
    // (torch.cuda.graph synchronises the device before it captures).
    Chain& chain = captured ? capture_chain_ : eager_chain_;
    if (chain.recorded && chain.stream != stream.stream() && chain.capture == capture)
      check_cuda(cudaStreamWaitEvent(stream.stream(), chain.event, 0), "cudaStreamWaitEvent");
    cudaEvent_t end = nullptr;
    check_cuda(cudaEventCreateWithFlags(&end, cudaEventDisableTiming), "cudaEventCreate");
    if (side) {
      check_cuda(cudaEventRecord(end, current.stream()), "cudaEventRecord");  // reused as the start mark
      check_cuda(cudaStreamWaitEvent(side_.stream(), end, 0), "cudaStreamWaitEvent");
      for (const auto& t : outputs) c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), side_);
    }
    {
      c10::cuda::CUDAStreamGuard on(stream);  // body's own torch ops (zero_, copy_) run there too
      try {
        body(stream.stream());
      } catch (...) {
        cudaEventDestroy(end);
        throw;
      }
    }
    check_cuda(cudaEventRecord(end, stream.stream()), "cudaEventRecord");
    check_cuda(cudaEventRecord(chain.event, stream.stream()), "cudaEventRecord");
    chain.stream = stream.stream();
    chain.capture = capture;
    chain.recorded = true;
    auto work = c10::make_intrusive<TpscopeWork>(rank_, op, outputs, device_, end, captured, comm_error_);
    if (captured) {
      work->finish(tpsSuccess);
    } else {
      std::lock_guard<std::mutex> lock(mutex_);
      pending_.push_back(work);
      cv_.notify_one();
    }
    return work;
  }

  // Completes each eager Work once its end event has completed, with the communicator's async error.
  void watch() {
    // Polling an event is no capture hazard: this thread's queries must not invalidate a capture that
    // the caller's thread runs in cudaStreamCaptureModeGlobal.
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&mode);
    cudaSetDevice(device_);
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      cv_.wait(lock, [this] { return stopping_ || !pending_.empty(); });
      if (pending_.empty() && stopping_) return;
      c10::intrusive_ptr<TpscopeWork> work = pending_.front();
      lock.unlock();
      cudaError_t q = cudaEventQuery(work->end());
      if (q == cudaErrorNotReady) {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
        lock.lock();
        if (stopping_) {  // shutting down: what is left completes as it stands
          lock.unlock();
          cudaEventSynchronize(work->end());
          lock.lock();
        }
        continue;
      }
      tpsResult_t async = tpsSuccess;
      if (q != cudaSuccess) {
        async = tpsCudaError;
      } else {
        tpsCommGetAsyncError(comm_, &async);
      }
      if (async != tpsSuccess) comm_error_->store(async);
      work->finish(async);
      lock.lock();
      pending_.pop_front();
    }
  }

  int device_;
  tpsComm_t comm_ = nullptr;
  std::shared_ptr<std::atomic<int>> comm_error_;  // the first asynchronous error seen, as a tpsResult_t
  c10::cuda::CUDAStream side_{c10::cuda::getDefaultCUDAStream()};
  Chain eager_chain_, capture_chain_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<c10::intrusive_ptr<TpscopeWork>> pending_;
  bool stopping_ = false;
  std::thread watcher_;
};

}  // namespace tpscope_torch

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "tpscope's c10d backend (see tpscope.torch)";
  pybind11::class_<tpscope_torch::TpscopeBackend, c10d::Backend, c10::intrusive_ptr<tpscope_torch::TpscopeBackend>>(
      m, "TpscopeBackend")
      .def(pybind11::init<int, int, const std::string&, int, const std::string&>(), pybind11::arg("rank"),
           pybind11::arg("size"), pybind11::arg("unique_id"), pybind11::arg("device"), pybind11::arg("config"));
  m.def("config_bytes", [] { return sizeof(tpsConfig_t); });
  // The tensor checks alone, as each collective makes them (tests reach them without a GPU).
  m.def(
      "check_tensor",
      [](const at::Tensor& t, int device, const std::string& op) {
        return static_cast<int>(tpscope_torch::check_tensor(t, device, op.c_str()));
      },
      pybind11::arg("tensor"), pybind11::arg("device"), pybind11::arg("op") = "all_reduce");
}
