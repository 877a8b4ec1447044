//===- StagedHostBackend.h - a device-like backend on the host --*- C++ -*-===//
//
// For executor tests: a backend that claims device memory (hostMemory()
// false: uploads and downloads copy) but keeps its tensors on the host and
// runs the CPU kernels, with a Communication that runs every collective as
// --collectives mpi does between its copies (runHostCollective). It drives
// the device path of Program / Executor / PipelineExecutor (bindCollective,
// connect, ExecContext::communication, all_reduce_start / wait through the
// communication, host-staged pipeline sends and receives, the backend's
// accumulate and finishStep) on machines without a GPU, and counts what
// went through it.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_TEST_UNITTESTS_EXECUTOR_STAGEDHOSTBACKEND_H
#define TESSERA_TEST_UNITTESTS_EXECUTOR_STAGEDHOSTBACKEND_H

#include "runtime/executor/Backend.h"
#include "runtime/executor/Communication.h"
#include "runtime/executor/KernelDesc.h"
#include "runtime/executor/Program.h"

#include <deque>

namespace tessera {
namespace runtime {
namespace test {

using exec::Arena;
using exec::Backend;
using exec::CollectiveOp;
using exec::CollectiveSpec;
using exec::Communication;
using exec::CompileOptions;
using exec::cpuBackend;
using exec::ExecContext;
using exec::Instruction;
using exec::runHostCollective;
using exec::TensorType;
using exec::Transport;

class StagedHostCommunication final : public Communication {
public:
  Transport transport() const override { return Transport::Mpi; }
  llvm::Error connect(const mpi::Communicator &) override {
    ++connects;
    return llvm::Error::success();
  }
  llvm::Error finishStep() override {
    ++steps;
    completeSends();
    return llvm::Error::success();
  }
  llvm::Error collective(const CollectiveSpec &spec, const Tensor &in,
                         Tensor &out, const ExecContext &ctx,
                         llvm::StringRef) override {
    ++collectives;
    return runHostCollective(spec, in, out, ctx.comms[spec.commIndex],
                             ctx.traffic);
  }
  llvm::Error allReduceF64(double *data, int64_t count, mpi::ReduceOp op,
                           const mpi::Communicator &c, const ExecContext &ctx,
                           llvm::StringRef) override {
    return mpi::allReduceF64(data, count, op, c, ctx.traffic);
  }
  llvm::Error startAllReduce(const Tensor &in, Tensor &out, mpi::ReduceOp op,
                             const mpi::Communicator &c, int,
                             const ExecContext &ctx, llvm::StringRef) override {
    ++starts;
    CollectiveSpec spec{CollectiveOp::AllReduce, -1, c.size(), 0, 0,
                        op == mpi::ReduceOp::Max};
    return runHostCollective(spec, in, out, c, ctx.traffic);
  }
  llvm::Error waitAllReduce(int, llvm::StringRef) override {
    ++waits;
    return llvm::Error::success();
  }

  /// With `tagless`, tsrt.send / tsrt.recv come here too and are matched
  /// as NCCL matches them: by order between two ranks, without tags
  /// (MPI_Isend / MPI_Recv with one tag on the pp communicator, which MPI
  /// delivers in order). Receives block at their instruction.
  bool pointToPoint() const override { return tagless; }
  llvm::Error connectPointToPoint(const mpi::Communicator &pp) override {
    ppComm = pp;
    ++ppConnects;
    return llvm::Error::success();
  }
  llvm::Error send(const Tensor &t, int peer, llvm::StringRef) override {
    sent.push_back(t);
    requests.emplace_back();
    ++sends;
    int rc = MPI_Isend(t.raw(), static_cast<int>(t.bytes()), MPI_BYTE, peer, 0,
                       ppComm.handle(), &requests.back());
    return rc == MPI_SUCCESS ? llvm::Error::success()
                             : mpi::failure(rc, "MPI_Isend");
  }
  llvm::Error recv(Tensor &t, int peer, llvm::StringRef) override {
    ++recvs;
    int rc = MPI_Recv(t.raw(), static_cast<int>(t.bytes()), MPI_BYTE, peer, 0,
                      ppComm.handle(), MPI_STATUS_IGNORE);
    return rc == MPI_SUCCESS ? llvm::Error::success()
                             : mpi::failure(rc, "MPI_Recv");
  }
  /// Completes the sends (end of step).
  void completeSends() {
    for (MPI_Request &r : requests)
      MPI_Wait(&r, MPI_STATUS_IGNORE);
    requests.clear();
    sent.clear();
  }

  int connects = 0, steps = 0, collectives = 0, starts = 0, waits = 0;
  bool tagless = false;
  int ppConnects = 0, sends = 0, recvs = 0;
  mpi::Communicator ppComm;
  std::vector<Tensor> sent;
  std::deque<MPI_Request> requests;
};

class StagedHostBackend final : public Backend {
public:
  llvm::StringRef name() const override { return "staged-host"; }
  bool hostMemory() const override { return false; }
  llvm::Expected<Tensor> allocate(DType dtype,
                                  std::vector<int64_t> shape) override {
    return Tensor::empty(dtype, std::move(shape));
  }
  llvm::Expected<Arena> allocateArena(int64_t bytes) override {
    return Arena::allocate(bytes);
  }
  llvm::Expected<Tensor> upload(const Tensor &host) override {
    ++uploads;
    return host.clone();
  }
  llvm::Expected<Tensor> download(const Tensor &t) override {
    ++downloads;
    return t.clone();
  }
  llvm::Error copy(const Tensor &src, Tensor &dst) override {
    return cpuBackend().copy(src, dst);
  }
  llvm::Error bindKernel(const exec::KernelDesc &kernel,
                         Instruction &inst) override {
    return cpuBackend().bindKernel(kernel, inst); // the CPU kernels
  }
  llvm::Error bindCollective(const CollectiveSpec &spec,
                             const TensorType &operand,
                             const TensorType &result,
                             Instruction &inst) override {
    if (spec.op == CollectiveOp::AllSlice) // a local copy: the CPU closure
      return cpuBackend().bindCollective(spec, operand, result, inst);
    inst.fn = [spec](const ExecContext &ctx, llvm::ArrayRef<const Tensor *> in,
                     llvm::MutableArrayRef<Tensor> out) -> llvm::Error {
      return ctx.communication->collective(spec, *in[0], out[0], ctx, "");
    };
    return llvm::Error::success();
  }
  llvm::Error supportsCommunication(llvm::StringRef) const override {
    return llvm::Error::success();
  }
  llvm::Error connect(const mpi::Communicator &c) override {
    return comm.connect(c);
  }
  Communication *communication() override { return &comm; }
  llvm::Error finishStep() override { return comm.finishStep(); }

  StagedHostCommunication comm;
  int uploads = 0, downloads = 0;
};

} // namespace test
} // namespace runtime
} // namespace tessera

#endif // TESSERA_TEST_UNITTESTS_EXECUTOR_STAGEDHOSTBACKEND_H
